//! The agent without Kubernetes: `gpuplane run --manifests DIR`, for Proxmox hosts that are no
//! cluster's nodes (installed by the .deb as `gpuplane.service`).
//!
//! Reads the manifests in DIR (a GitOps checkout: `git pull` into it), validates them exactly as
//! `gpuplane converge` does, converges the host through the one door, and writes each resource's
//! status as a YAML file under the state directory (`/var/lib/gpuplane/status/`) and as log lines
//! (the journal). It looks again as soon as DIR changes (inotify, and a poll every second), when
//! a starting server answers `/health_generate` (asked every 250 ms), and on the drift interval, and serves the same `/metrics`, `/healthz`, `/readyz` as the Kubernetes agent.
//! It tells systemd it is ready (`sd_notify READY=1`) after the first converge, so units
//! ordered after `gpuplane.service` start with the GPUs already bound. SIGTERM or SIGINT stop
//! it between passes: the pass in progress finishes, status included (`signals.rs`).
//!
//! # Guarantees
//! - An invalid manifest changes nothing on the host: its problems go into
//!   `status/_invalid.yaml` and the log, and the host keeps its last converged state.
//! - Status files are replaced atomically (temp file + rename); a reader never sees half a file.
//! - The SGLang servers that are Ready with metrics are listed for Prometheus after each pass
//!   (`discovery/`): at `/sd/servers` on the metrics listener and in the file_sd file
//!   (`--file-sd`, default `/var/lib/gpuplane/prometheus/servers.json`), replaced atomically.

mod file_sd;
mod notify;
mod signals;
mod status_files;
mod watch;

use crate::converge::{converge_seeded, Options};
use crate::desired::select::SelectError;
use crate::door::Door;
use crate::host::model::UnitRef;
use crate::host::{Host, HEALTH_EVERY};
use crate::manifests::Manifests;
use crate::pass::outcome::final_host;
use crate::pass::select::{from_manifests, Refused, Selected};
use crate::pass::watch::Watching;
use crate::pass::Pass;
use crate::resource_key::ResourceKey;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings of `gpuplane run --manifests DIR`.
#[derive(Debug, Clone)]
pub struct StandaloneOptions {
    pub manifests: PathBuf,
    pub status_dir: PathBuf,
    /// Where the servers are listed for Prometheus's `file_sd_configs` (`discovery/`); `None`:
    /// not written (`/sd/servers` on the metrics listener serves the same list).
    pub file_sd: Option<PathBuf>,
    /// The node's address for host servers on a wildcard (`discovery::select`).
    pub sd_node_address: Option<String>,
    pub gpu_vendor: String,
    pub gpu_driver: String,
    pub metrics_addr: String,
    /// The bearer token `/sd/servers` requires (`--sd-token-file`).
    pub sd_token: Option<String>,
    pub drift_interval: Duration,
    pub poll_interval: Duration,
    /// Tests: stop once nothing is left to wait for, or after this many rounds; `None`: run
    /// until stopped.
    pub max_rounds: Option<u64>,
}

/// Replaces one of the agent's own files (a status file, the file_sd list) through the one
/// atomic writer (`crate::atomic_file`: a link planted under the name is replaced, never written
/// through), creating its directory if it went missing; a failure is logged, never stops a pass.
fn write_or_log(path: &std::path::Path, text: &str) {
    let r = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .map_err(|e| e.to_string())
        .and_then(|_| {
            crate::atomic_file::write(path, text.as_bytes(), 0o644).map_err(|e| e.to_string())
        });
    if let Err(e) = r {
        tracing::warn!("cannot write {}: {e}", path.display());
    }
}

/// Refuses a status directory, or a file_sd file's directory, that someone other than root (or
/// the agent's own user) can write: whoever can write it could replace the files the agent and
/// Prometheus read (issue 37). Each is created when missing.
pub fn check_dirs(opts: &StandaloneOptions) -> Result<(), String> {
    crate::atomic_file::check_dir(&opts.status_dir).map_err(|e| format!("--status-dir: {e}"))?;
    if let Some(dir) = opts.file_sd.as_deref().and_then(|p| p.parent()) {
        crate::atomic_file::check_dir(dir).map_err(|e| format!("--file-sd: {e}"))?;
    }
    Ok(())
}

/// Runs until stopped (or `max_rounds`); refuses to start on an unsafe status or file_sd
/// directory ([`check_dirs`]).
pub fn run(opts: StandaloneOptions, mut host: Box<dyn Host + Send>) -> Result<(), String> {
    check_dirs(&opts)?;
    let metrics = crate::metrics::Metrics::new().map_err(|e| e.to_string())?;
    metrics.set_sd_token(opts.sd_token.clone());
    let ready = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.spawn(crate::metrics::serve(
        opts.metrics_addr.clone(),
        metrics.clone(),
        ready.clone(),
    ));
    let mut progress = Default::default();
    let mut watch = watch::Watch::new(&opts.manifests);
    rt.spawn(signals::stop_on_signal(watch.stopper()));
    let mut watching = Watching::default();
    let mut rounds = 0u64;
    loop {
        let started = Instant::now();
        let manifests = watch.read_stable(|| Manifests::load(&opts.manifests));
        // Taken before the pass observes: a fault the kernel reports during the pass wakes
        // the next one.
        let mark = host.health_mark();
        let waiting = round(
            &opts,
            manifests,
            host.as_mut(),
            &metrics,
            &mut progress,
            &mut watching,
        );
        metrics
            .reconcile_duration
            .with_label_values(&["Manifests"])
            .observe(started.elapsed().as_secs_f64());
        metrics.reconciles.with_label_values(&["Manifests"]).inc();
        if !ready.swap(true, Ordering::SeqCst) {
            notify::ready();
        }
        rounds += 1;
        if opts
            .max_rounds
            .is_some_and(|m| waiting.is_none() || rounds >= m)
        {
            return Ok(());
        }
        // A stop during the pass: `wait` returns `Stopped` at once.
        let woke = until_next(&opts, host.as_mut(), &progress, &mut watch, waiting, mark);
        tracing::debug!("woke: {woke:?}");
        if woke == watch::Wake::Stopped {
            break;
        }
    }
    tracing::info!("stopped after a whole pass");
    Ok(())
}

/// Waits for the next pass. Settled: until the drift interval, or as soon as the manifests
/// change or the GPUs' health facts differ from `mark` (compared every [`HEALTH_EVERY`]: a fault
/// the kernel reports is judged within about a second plus one pass, not a drift interval
/// later). A server still starting: until the poll interval, as soon as it answers
/// `/health_generate` 200 (asked every 250 ms: Ready is published within a probe period plus
/// one pass of the server coming up, not a poll interval), and no later than a stall would be
/// due (StartupStalled is reported when it happens, not up to a poll interval after).
fn until_next(
    opts: &StandaloneOptions,
    host: &mut dyn Host,
    progress: &std::collections::BTreeMap<String, crate::converge::StartupTrack>,
    watch: &mut watch::Watch,
    waiting: Option<Vec<crate::host::model::UnitRef>>,
    mark: Option<u64>,
) -> watch::Wake {
    let mut health_at = Instant::now();
    let mut health_changed = |host: &mut dyn Host| {
        if mark.is_none() || health_at.elapsed() < HEALTH_EVERY {
            return false;
        }
        health_at = Instant::now();
        host.health_mark() != mark
    };
    let Some(units) = waiting else {
        // Settled: only the health mark to compare, at its own pace.
        let mut probe = || health_changed(host);
        return watch.wait_every(opts.drift_interval, Some(&mut probe), HEALTH_EVERY);
    };
    let now = host.now();
    let due = units
        .iter()
        .filter_map(|u| progress.get(&u.key()))
        .filter_map(|p| p.stall_due_in(now))
        .min()
        .map(|s| Duration::from_secs(s.max(1)));
    let wait = due.map_or(opts.poll_interval, |d| d.min(opts.poll_interval));
    let mut probe =
        || units.iter().any(|u| host.probe_ready(u) == Some(true)) || health_changed(host);
    watch.wait(wait, Some(&mut probe))
}

/// One pass on the manifests as read (`pass/`): select, converge, publish. `None` when nothing
/// is left to wait for; else the units of the servers still starting (none when it waits for a
/// lock).
fn round(
    opts: &StandaloneOptions,
    manifests: Result<Manifests, crate::manifests::ManifestError>,
    host: &mut dyn Host,
    metrics: &crate::metrics::Metrics,
    progress: &mut BTreeMap<String, crate::converge::StartupTrack>,
    watching: &mut Watching,
) -> Option<Vec<UnitRef>> {
    let pass = Pass::begin();
    let mut removed = vec![];
    let selected = manifests
        .map_err(|e| e.to_string())
        .and_then(|m| select(opts, &pass, &m, host, watching, &mut removed));
    let Selected { desired, seed, .. } = match selected {
        Ok(s) => s,
        Err(f) => {
            tracing::warn!(
                "manifests in {} are not applied: {f}",
                opts.manifests.display()
            );
            metrics.count_error(crate::metrics::ErrorCategory::InvalidSpec);
            status_files::write_invalid(&opts.status_dir, &f);
            // Nothing is known to serve as asked: no scrape targets.
            publish_targets(opts, metrics, "[]".into());
            return None;
        }
    };
    let report = {
        let mut door = Door::new(host);
        let o = Options {
            poll_seconds: opts.poll_interval.as_secs().max(1),
            block_on_ready: false,
            ..Options::default()
        };
        converge_seeded(&desired, &mut door, &o, progress, seed)
    };
    let node = crate::discovery::select::Node {
        name: &desired.partition.node_name,
        address: opts.sd_node_address.as_deref(),
    };
    let outcome = pass.outcome(&desired, &report, &Default::default(), &node);
    outcome.record(metrics, &report, &desired.partition.node_name);
    status_files::write(
        &opts.status_dir,
        &outcome.statuses,
        &servers_by_key(&desired),
    );
    for (key, st) in &outcome.statuses {
        let (ns, name) = match key {
            ResourceKey::Partition { name } | ResourceKey::Pool { name } => ("", name.as_str()),
            ResourceKey::Server { namespace, name } => (namespace.as_str(), name.as_str()),
        };
        metrics.set_conditions(key.kind(), ns, name, &st.conditions);
    }
    forget_removed(opts, metrics, &desired, &removed, final_host(&report));
    publish_targets(opts, metrics, outcome.targets);
    // A held lock: look again after a poll interval (no unit to probe meanwhile). What a dead
    // writer left and a step removed is logged where it is removed (host/local/files.rs).
    if report.waits_for_lock() {
        return Some(vec![]);
    }
    report.waiting_units(&desired)
}

/// The manifests' desired state for this host (`pass::select`), with the units of servers gone
/// from the manifests to stop and remove (what a deleted InferenceServer's finalizer does in
/// Kubernetes), found by the unit their status file names; a refusal is also written into the
/// status file of each resource it names.
fn select(
    opts: &StandaloneOptions,
    pass: &Pass,
    m: &Manifests,
    host: &mut dyn Host,
    watching: &mut Watching,
    removed: &mut Vec<status_files::Removed>,
) -> Result<Selected, String> {
    tracing::debug!(
        "manifests read: {} partitions, {} servers",
        m.partitions.len(),
        m.servers.len()
    );
    let gpu = (opts.gpu_vendor.as_str(), opts.gpu_driver.as_str());
    let add_removed = |d: &mut crate::desired::Desired| {
        *removed = status_files::removed_servers(&opts.status_dir, &servers_by_key(d));
        for r in removed.iter() {
            if !d.removed_units.contains(&r.unit) {
                d.removed_units.push(r.unit.clone());
            }
        }
    };
    from_manifests(pass, m, host, watching, gpu, add_removed).map_err(|e| {
        if let Refused::Select(SelectError::Invalid(errs)) = &e {
            status_files::write_refusals(&opts.status_dir, errs, &pass.time());
        }
        e.to_string()
    })
}

/// Each server's unit by its resource key (the status files name the unit they were for).
fn servers_by_key(desired: &crate::desired::Desired) -> BTreeMap<ResourceKey, UnitRef> {
    desired
        .servers
        .iter()
        .map(|s| (ResourceKey::server_id(&s.id), s.unit.clone()))
        .collect()
}

/// The removed servers whose unit is gone (stopped, no file; or never there) lose their status
/// file and their condition series; the others are tried again at the next pass.
fn forget_removed(
    opts: &StandaloneOptions,
    metrics: &crate::metrics::Metrics,
    desired: &crate::desired::Desired,
    removed: &[status_files::Removed],
    host: &crate::host::model::HostState,
) {
    for r in removed {
        let reused = desired.servers.iter().any(|s| s.unit == r.unit);
        let gone = reused
            || host
                .unit(&r.unit)
                .is_none_or(|o| o.file.is_none() && !o.is_active());
        if !gone {
            continue;
        }
        tracing::info!(resource = %r.resource, "the server left the manifests; its unit {} is stopped and removed", r.unit);
        status_files::forget(&opts.status_dir, &r.file);
        if let ResourceKey::Server { namespace, name } = &r.resource {
            metrics.forget("InferenceServer", namespace, name);
        }
    }
}

/// The servers for Prometheus, replaced whole: `/sd/servers` and the file_sd file.
fn publish_targets(opts: &StandaloneOptions, metrics: &crate::metrics::Metrics, json: String) {
    if let Some(path) = &opts.file_sd {
        file_sd::write(path, &json);
    }
    metrics.set_server_sd(json);
}
