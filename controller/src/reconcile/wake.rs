//! Waking a partition's reconcile the moment a starting server is ready, or the moment the
//! kernel reports a GPU fault ([`follow_health`]).
//!
//! A reconcile that leaves a server starting comes back after the poll interval (5 s by
//! default). Meanwhile a probe asks the server's `/health_generate` every 250 ms
//! ([`crate::host::Host::probe_ready`]: one GET where the last observation reached the server)
//! and, when it answers 200, asks the controller to reconcile the partition now, so `Ready`
//! is published within a probe period plus one reconcile of the server coming up.
//!
//! # Guarantees
//! - Readiness is still decided by a full observation in the reconcile; a probe only makes it
//!   come sooner.
//! - One probe per partition at a time; it ends at the poll interval, or when the server
//!   answers. It never waits for the host: while a converge holds the host, it skips a turn.

use super::Ctx;
use crate::host::model::UnitRef;
use crate::host::{HEALTH_EVERY, PROBE_EVERY};
use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use gpuplane_crds::GpuPartition;
use kube::runtime::reflector::ObjectRef;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The controller's early triggers; `Wake::default()` triggers nothing (tests).
#[derive(Default)]
pub struct Wake {
    tx: Option<UnboundedSender<ObjectRef<GpuPartition>>>,
    probing: Mutex<HashSet<String>>,
    /// The partitions whose GPUs' health facts are followed ([`follow_health`]).
    health: Mutex<HashSet<String>>,
}

/// The partitions to reconcile early, as the controller receives them.
pub type Woken = UnboundedReceiver<ObjectRef<GpuPartition>>;

impl Wake {
    /// A trigger and the stream the controller reconciles on.
    pub fn new() -> (Wake, Woken) {
        let (tx, rx) = unbounded();
        (
            Wake {
                tx: Some(tx),
                probing: Default::default(),
                health: Default::default(),
            },
            rx,
        )
    }

    /// Whether a probe for partition `name` still runs (tests wait for one to end).
    #[cfg(test)]
    pub(crate) fn is_probing(&self, name: &str) -> bool {
        self.probing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(name)
    }
}

/// Starts probing `units` for partition `name` until one answers `/health_generate` 200 (then
/// reconciles the partition) or `within` passes. Does nothing while a probe for `name` runs.
pub fn probe_until_ready(ctx: &Arc<Ctx>, name: &str, units: Vec<UnitRef>, within: Duration) {
    let Some(tx) = ctx.wake.tx.clone() else {
        return;
    };
    if units.is_empty() || !claim(&ctx.wake.probing, name) {
        return;
    }
    let ctx = ctx.clone();
    let name = name.to_string();
    tokio::spawn(async move {
        let end = Instant::now() + within;
        while Instant::now() + PROBE_EVERY < end {
            tokio::time::sleep(PROBE_EVERY).await;
            let units = units.clone();
            let ready = with_idle_host(&ctx, move |h| {
                units.iter().any(|u| h.probe_ready(u) == Some(true))
            })
            .await
            .unwrap_or(false);
            if ready {
                tracing::debug!(partition = %name, "a starting server answers: reconciling now");
                let _ = tx.unbounded_send(ObjectRef::new(&name));
                break;
            }
        }
        ctx.wake
            .probing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
    });
}

/// Follows the host's health mark ([`crate::host::Host::health_mark`]) for partition `name`,
/// from its first reconcile on: every [`HEALTH_EVERY`], while no converge holds the host, and
/// reconciles the partition as soon as the mark differs from the one its last look saw, so a
/// fault the kernel reports is judged within about a second plus one reconcile, not a drift
/// interval later. One follower per partition, for the agent's life (a deleted partition's
/// reconcile finds nothing to do).
pub fn follow_health(ctx: &Arc<Ctx>, name: &str) {
    let Some(tx) = ctx.wake.tx.clone() else {
        return;
    };
    if !claim(&ctx.wake.health, name) {
        return;
    }
    let ctx = ctx.clone();
    let name = name.to_string();
    tokio::spawn(async move {
        let mut last: Option<u64> = None;
        loop {
            tokio::time::sleep(HEALTH_EVERY).await;
            let mark = with_idle_host(&ctx, |h| h.health_mark()).await.flatten();
            let Some(mark) = mark else { continue };
            if last.is_some_and(|l| l != mark) {
                tracing::info!(partition = %name, "the GPUs' health facts changed: reconciling now");
                let _ = tx.unbounded_send(ObjectRef::new(&name));
            }
            last = Some(mark);
        }
    });
}

/// `f` on the host, on a blocking thread, unless a converge holds it now (`None` then: the
/// caller skips a turn; it never waits for the host).
async fn with_idle_host<T: Send + 'static>(
    ctx: &Arc<Ctx>,
    f: impl FnOnce(&mut dyn crate::host::Host) -> T + Send + 'static,
) -> Option<T> {
    let host = ctx.host.clone();
    tokio::task::spawn_blocking(move || match host.try_lock() {
        Ok(mut h) => Some(f(h.as_mut())),
        Err(_) => None,
    })
    .await
    .ok()
    .flatten()
}

/// Adds `name` to `set`; `false` when it was there (a task for it runs already).
fn claim(set: &Mutex<HashSet<String>>, name: &str) -> bool {
    set.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name.to_string())
}
