//! The agent without Kubernetes: `gpuplane run --manifests DIR`, for Proxmox hosts that are no
//! cluster's nodes (installed by the .deb as `gpuplane.service`).
//!
//! Reads the manifests in DIR (a GitOps checkout: `git pull` into it), validates them exactly as
//! `gpuplane converge` does, converges the host through the one door, and writes each resource's
//! status as a YAML file under the state directory (`/var/lib/gpuplane/status/`) and as log lines
//! (the journal). It looks again when DIR changes (polled every second) and on the drift
//! interval, and serves the same `/metrics`, `/healthz`, `/readyz` as the Kubernetes agent.
//! It tells systemd it is ready (`sd_notify READY=1`) after the first converge, so units
//! ordered after `gpuplane.service` start with the GPUs already bound.
//!
//! # Guarantees
//! - An invalid manifest changes nothing on the host: its problems go into
//!   `status/_invalid.yaml` and the log, and the host keeps its last converged state.
//! - Status files are replaced atomically (temp file + rename); a reader never sees half a file.

mod notify;
mod status_files;
mod watch;

use crate::apply::Door;
use crate::converge::{converge_with, Options};
use crate::desired::select;
use crate::host::Host;
use crate::manifests::Manifests;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings of `gpuplane run --manifests DIR`.
#[derive(Debug, Clone)]
pub struct StandaloneOptions {
    pub manifests: PathBuf,
    pub status_dir: PathBuf,
    pub gpu_vendor: String,
    pub gpu_driver: String,
    pub metrics_addr: String,
    pub drift_interval: Duration,
    pub poll_interval: Duration,
    /// Tests: stop once nothing is left to wait for, or after this many rounds; `None`: run
    /// until stopped.
    pub max_rounds: Option<u64>,
}

/// Runs until stopped (or `max_rounds`).
pub fn run(opts: StandaloneOptions, mut host: Box<dyn Host + Send>) -> Result<(), String> {
    let metrics = crate::reconcile::metrics::Metrics::new().map_err(|e| e.to_string())?;
    let ready = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.spawn(crate::reconcile::metrics::serve(
        opts.metrics_addr.clone(),
        metrics.clone(),
        ready.clone(),
    ));
    let mut progress = Default::default();
    let mut seen = watch::Fingerprint::default();
    let mut rounds = 0u64;
    loop {
        let started = Instant::now();
        let settled = round(&opts, host.as_mut(), &metrics, &mut progress);
        metrics
            .reconcile_duration
            .with_label_values(&["Manifests"])
            .observe(started.elapsed().as_secs_f64());
        metrics.reconciles.with_label_values(&["Manifests"]).inc();
        if !ready.swap(true, Ordering::SeqCst) {
            notify::ready();
        }
        rounds += 1;
        if opts.max_rounds.is_some_and(|m| settled || rounds >= m) {
            return Ok(());
        }
        // A server still starting is looked at again soon; otherwise at the drift interval,
        // or as soon as the manifests change.
        let wait = if settled {
            opts.drift_interval
        } else {
            opts.poll_interval
        };
        seen = watch::until_changed(&opts.manifests, seen, wait);
    }
}

/// One pass: read, validate, converge, write status. Whether nothing is left to wait for.
fn round(
    opts: &StandaloneOptions,
    host: &mut dyn Host,
    metrics: &crate::reconcile::metrics::Metrics,
    progress: &mut std::collections::BTreeMap<String, crate::converge::Progress>,
) -> bool {
    let desired = Manifests::load(&opts.manifests)
        .map_err(|e| e.to_string())
        .and_then(|m| {
            let observed = host.observe().map_err(|e| e.to_string())?;
            select::for_host(&m, &observed, &opts.gpu_vendor, &opts.gpu_driver)
                .map_err(|e| e.to_string())
        });
    let desired = match desired {
        Ok(d) => d,
        Err(f) => {
            tracing::warn!(
                "manifests in {} are not applied: {f}",
                opts.manifests.display()
            );
            metrics.errors.with_label_values(&["InvalidSpec"]).inc();
            status_files::write_invalid(&opts.status_dir, &f);
            return true;
        }
    };
    let units: Vec<_> = desired.servers.iter().map(|s| s.unit.clone()).collect();
    host.watch_units(&units);
    host.watch_preflight(&crate::desired::preflight::requests(&desired));
    let report = {
        let mut door = Door::new(host);
        let o = Options {
            poll_seconds: opts.poll_interval.as_secs().max(1),
            block_on_ready: false,
            ..Options::default()
        };
        converge_with(&desired, &mut door, &o, progress)
    };
    for (kind, n) in &report.writes_by_kind {
        metrics.host_writes.with_label_values(&[kind]).inc_by(*n);
    }
    let status = crate::status::compute(&desired, &report, &Default::default());
    status_files::write(&opts.status_dir, &status);
    !matches!(report.stop, Some(crate::converge::Stop::Waiting { .. }))
}
