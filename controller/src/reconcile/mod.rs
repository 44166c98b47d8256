//! The Kubernetes controller: `gpuplane run`.
//!
//! One kube-runtime `Controller` reconciles the `GpuPartition` of this node; changes to the
//! `InferenceServer`s of this node map to their partition (a host converge covers a partition and all its
//! servers, so they are planned together). Each reconcile observes the host, plans, applies
//! through the one door, and writes the truth back as status conditions by server-side apply.
//! A per-node Lease makes sure only one agent acts for a node. The watches hold only this
//! node's objects, selected by the label `gpuplane.dev/node` ([`scope`]); this node's objects
//! without it are reported by [`strays`].

pub mod budget;
mod cleanup;
pub mod conflict;
mod guard;
mod host_io;
mod kube_io;
mod orphans;
mod partition;
pub mod scope;
mod strays;
#[cfg(test)]
mod tests;
mod wake;
mod write_status;

use crate::host::Host;
use crate::metrics;
use futures::StreamExt;
use gpuplane_crds::{GpuPartition, InferenceServer};
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::{Api, Client};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::kubeapi::lease::NodeLease;
pub use kube_io::SERVER_FINALIZER;

/// Field manager of every status write.
pub const MANAGER: &str = "gpuplane-agent";
/// Finalizer that lets the agent apply `spec.deletionPolicy` before a partition goes away.
pub const FINALIZER: &str = "gpuplane.dev/host-cleanup";

/// Settings of `gpuplane run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub node: String,
    pub gpu_vendor: String,
    pub gpu_driver: String,
    pub kubeconfig: Option<std::path::PathBuf>,
    pub metrics_addr: String,
    /// The liveness listener apart from the metrics one (`--health-addr`), if any.
    pub health_addr: Option<String>,
    pub drift_interval: Duration,
    pub poll_interval: Duration,
    pub lease_namespace: String,
    pub lease_duration: Duration,
    pub identity: String,
    /// Which objects the agent watches: its node's (by label), or the whole cluster's.
    pub watch_scope: scope::WatchScope,
    /// The node's address in `/sd/servers` for host servers on a wildcard (`discovery/`).
    pub sd_node_address: Option<String>,
    /// The bearer token `/sd/servers` requires (`--sd-token-file`).
    pub sd_token: Option<String>,
}

/// Errors of a reconcile (API failures); host problems become conditions instead.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("host: {0}")]
    Host(#[from] crate::host::HostError),
    /// A partition's restore (its deletion) stopped before the host was back.
    #[error("host: restore did not finish: {0}")]
    RestoreUnfinished(String),
    /// The blocking task that held the host was lost.
    #[error("internal: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A reconcile panicked (caught; the agent goes on).
    #[error("internal: reconcile of {what} panicked: {message}")]
    Panicked { what: String, message: String },
}

impl Error {
    /// The errors metric's category.
    pub fn category(&self) -> crate::metrics::ErrorCategory {
        use crate::metrics::ErrorCategory as C;
        match self {
            Error::Kube(_) => C::Api,
            Error::Finalizer(_) => C::Finalizer,
            Error::Host(_) | Error::RestoreUnfinished(_) => C::Host,
            Error::Task(_) | Error::Panicked { .. } => C::Internal,
        }
    }
}

/// Shared state of the reconcilers.
pub struct Ctx {
    pub client: Client,
    pub opts: RunOptions,
    pub host: Arc<Mutex<Box<dyn Host + Send>>>,
    pub recorder: Recorder,
    pub metrics: metrics::Metrics,
    pub lease: NodeLease,
    /// Readiness progress by unit key, across reconciles.
    pub progress: Mutex<BTreeMap<String, crate::converge::StartupTrack>>,
    /// Consecutive failures per object, for exponential backoff.
    pub failures: Mutex<HashMap<String, u32>>,
    /// Set once the API server has answered.
    pub api_ok: Arc<AtomicBool>,
    /// Early reconciles of a partition whose server just became ready.
    pub wake: wake::Wake,
}

impl Ctx {
    /// Backoff for an object after a failure: 5 s doubling to 5 min.
    pub fn backoff(&self, key: &str) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = f.entry(key.to_string()).or_insert(0);
        *n = (*n + 1).min(10);
        Duration::from_secs((5u64 << (*n - 1)).min(300))
    }

    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

/// Runs the agent until the process is stopped.
pub async fn run(opts: RunOptions, host: Box<dyn Host + Send>) -> Result<(), String> {
    let client = crate::kubeapi::client(opts.kubeconfig.as_deref()).await?;
    let metrics = metrics::Metrics::new().map_err(|e| e.to_string())?;
    metrics.set_sd_token(opts.sd_token.clone());
    let api_ok = Arc::new(AtomicBool::new(false));
    let lease = NodeLease::new(
        client.clone(),
        &opts.lease_namespace,
        &opts.node,
        &opts.identity,
        opts.lease_duration,
    );
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: MANAGER.into(),
            instance: Some(opts.identity.clone()),
        },
    );
    let (wake, woken) = wake::Wake::new();
    let ctx = Arc::new(Ctx {
        wake,
        client: client.clone(),
        opts: opts.clone(),
        host: Arc::new(Mutex::new(host)),
        recorder,
        metrics: metrics.clone(),
        lease: lease.clone(),
        progress: Mutex::new(BTreeMap::new()),
        failures: Mutex::new(HashMap::new()),
        api_ok: api_ok.clone(),
    });
    serve_probes(&opts, &metrics, &api_ok);
    tokio::spawn(renew_lease(lease, metrics, api_ok));
    tracing::info!(node = %opts.node, identity = %opts.identity, scope = ?opts.watch_scope, "gpuplane agent starting");
    control(ctx, woken).await;
    Ok(())
}

/// `/metrics`, `/sd/servers`, `/readyz` on the metrics listener, and `/healthz` on its own
/// loopback listener when asked (`--health-addr`).
fn serve_probes(opts: &RunOptions, metrics: &metrics::Metrics, api_ok: &Arc<AtomicBool>) {
    tokio::spawn(metrics::serve(
        opts.metrics_addr.clone(),
        metrics.clone(),
        api_ok.clone(),
    ));
    if let Some(addr) = opts.health_addr.clone() {
        let ready = api_ok.clone();
        tokio::spawn(async move {
            if let Err(e) = metrics::serve_health(addr.clone(), ready).await {
                tracing::error!("cannot serve /healthz on {addr}: {e}");
            }
        });
    }
}

/// Holds the node's Lease, renewing it every third of its duration. A renewal that does not
/// answer within a period is a failure: without it, a network that drops packets would leave
/// this agent believing it leads.
async fn renew_lease(lease: NodeLease, metrics: metrics::Metrics, api_ok: Arc<AtomicBool>) {
    let period = lease.duration / 3;
    loop {
        match tokio::time::timeout(period, lease.try_acquire()).await {
            Ok(Ok(held)) => {
                api_ok.store(true, Ordering::SeqCst);
                metrics.leader.set(i64::from(held));
            }
            Ok(Err(e)) => {
                metrics.leader.set(0);
                tracing::warn!("lease: {e}");
            }
            Err(_) => {
                lease.let_go("the API server did not answer the renewal in time");
                metrics.leader.set(0);
                tracing::warn!("lease: no answer from the API server within {period:?}");
            }
        }
        tokio::time::sleep(period).await;
    }
}

/// The controller: this node's partitions (and a partition's servers) watched, each change
/// reconciled, until a signal stops it. The watches are built here (not by `Controller::new`)
/// to count what the API server sends.
async fn control(ctx: Arc<Ctx>, woken: wake::Woken) {
    let opts = &ctx.opts;
    let partitions: Api<GpuPartition> = Api::all(ctx.client.clone());
    let servers: Api<InferenceServer> = Api::all(ctx.client.clone());
    let config = scope::watch_config(opts.watch_scope, &opts.node);
    let events = |kind: &str| ctx.metrics.watch_events.with_label_values(&[kind, "node"]);
    let (store, writer) = reflector::store::<GpuPartition>();
    let partition_events =
        scope::counted(watcher(partitions, config.clone()), events("GpuPartition"))
            .reflect(writer)
            .applied_objects();
    let server_events =
        scope::counted(watcher(servers, config), events("InferenceServer")).touched_objects();
    if opts.watch_scope == scope::WatchScope::Node {
        tokio::spawn(strays::run(ctx.clone(), store.clone()));
    }
    let pools: Api<gpuplane_crds::GpuNodePool> = Api::all(ctx.client.clone());
    let pool_events = scope::counted(
        watcher(pools, watcher::Config::default()),
        ctx.metrics
            .watch_events
            .with_label_values(&["GpuNodePool", "pool"]),
    )
    .touched_objects();
    let waiting = store.clone();
    Controller::for_stream(partition_events, store)
        .watches_stream(server_events, |s: InferenceServer| {
            Some(ObjectRef::<GpuPartition>::new(&s.spec.partition_ref.name))
        })
        .watches_stream(pool_events, move |pool: gpuplane_crds::GpuNodePool| {
            budget::waiting_members(&waiting.state(), &pool)
        })
        .reconcile_on(woken)
        .shutdown_on_signal()
        .run(
            |p, ctx| async move {
                let what = format!("GpuPartition/{}", p.metadata.name.as_deref().unwrap_or(""));
                guard::catch_panic(&what, partition::reconcile(p, ctx)).await
            },
            error_policy,
            ctx.clone(),
        )
        .for_each(|res| {
            let ctx = ctx.clone();
            async move {
                match res {
                    Ok((obj, action)) => tracing::debug!(object = %obj, ?action, "reconciled"),
                    // A server names a partition that does not exist: say so on the server.
                    Err(kube::runtime::controller::Error::ObjectNotFound(r)) => {
                        orphans::report(&ctx, &r.name).await
                    }
                    Err(e) => tracing::warn!("reconcile: {e}"),
                }
            }
        })
        .await;
}

fn error_policy(p: Arc<GpuPartition>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let key = p.metadata.name.clone().unwrap_or_default();
    if is_stale_finalizer_race(err) {
        // Another write came between our read and our patch (the watch cache still showed the
        // old object): look again at once with a fresh one, this is not a failure.
        tracing::debug!(partition = %key, "a write raced ours (409); reconciling again with a fresh object: {err}");
        return Action::requeue(std::time::Duration::from_secs(1));
    }
    let reason = err.category();
    ctx.metrics.count_error(reason);
    let wait = ctx.backoff(&key);
    tracing::warn!(partition = %key, "reconcile failed ({}), retrying in {wait:?}: {err}", reason.as_str());
    Action::requeue(wait)
}

/// A write that lost a race with another writer: the kube-runtime finalizer helper adds the
/// finalizer with a JSON patch that first tests the list it saw, so a stale cache makes that test
/// fail (422 Invalid, or 409 Conflict); our own finalizer patches carry the resourceVersion they
/// saw, so someone else's write in between answers 409 (found by `e2e/tests/kube_faults.rs`,
/// where a concurrent writer made each 409 a failure backed off 5 s, 10 s, ...). Status writes
/// (forced server-side apply, no resourceVersion) never get 409. Looking again at once with a
/// fresh object is right: a reconcile is idempotent.
fn is_stale_finalizer_race(err: &Error) -> bool {
    use kube::runtime::finalizer::Error as F;
    let conflict = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 409);
    match err {
        Error::Kube(e) => conflict(e),
        Error::Finalizer(e) => match e.as_ref() {
            F::AddFinalizer(kube::Error::Api(s)) => s.code == 422 || s.code == 409,
            F::RemoveFinalizer(e) => conflict(e),
            F::ApplyFailed(Error::Kube(e)) | F::CleanupFailed(Error::Kube(e)) => conflict(e),
            _ => false,
        },
        _ => false,
    }
}
