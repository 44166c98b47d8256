//! Objects of this node that lack the node label, and objects whose label is wrong: reported
//! on the object, never dropped in silence.
//!
//! Under [`WatchScope::Node`](super::scope::WatchScope) the agent's main watches see only
//! objects labelled for its node. A second pair of watches, on objects *without* the label
//! (`!gpuplane.dev/node`), finds the rest: in a labelled fleet they deliver nothing (the API
//! server filters them), so they cost nothing. An unlabelled `GpuPartition` whose
//! `spec.nodeName` is this node, and an unlabelled `InferenceServer` whose partition is on this
//! node, get `Ready=False` with reason `NodeLabelMissing` and the `kubectl label` command that
//! fixes them, plus one Warning event. Nothing is done on the host for them until they are
//! labelled (the agent never writes labels).
//!
//! Wrong labels are reported by the agent of the node the label names (the only one that sees
//! the object): a partition labelled for this node with another `spec.nodeName`
//! (`partition.rs`), and a server labelled for this node whose partition is on another node
//! (`orphans.rs`), get reason `NodeLabelMismatch`.
//!
//! # Caveats
//! - In a cluster where nothing is labelled yet, every agent receives every object through the
//!   unlabelled watches (the cost of the cluster-wide agent, once) until they are labelled.
//! - Reports are written by the lease holder only, when the unlabelled watches change and every
//!   drift interval; an object labelled for a node without an agent is seen by nobody.

use super::scope::{counted, partition_problem, server_problem, unlabelled_config, LabelProblem};
use super::write_status::{refuse, Refusal, Reported};
use super::Ctx;
use crate::status::refusal;
use futures::StreamExt;
use gpuplane_crds::{GpuPartition, InferenceServer};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};
use std::sync::Arc;
use std::time::Duration;

/// Watches the unlabelled objects and reports this node's among them, until the process ends.
/// `labelled` is the main watch's store of this node's partitions (a server's partition may be
/// labelled while the server is not).
pub(super) async fn run(ctx: Arc<Ctx>, labelled: Store<GpuPartition>) {
    let config = unlabelled_config();
    let events = |kind: &str| {
        ctx.metrics
            .watch_events
            .with_label_values(&[kind, "unlabelled"])
    };
    let (parts, parts_w) = reflector::store::<GpuPartition>();
    let (servers, servers_w) = reflector::store::<InferenceServer>();
    let changed = Arc::new(tokio::sync::Notify::new());
    let p_stream = counted(
        watcher(Api::<GpuPartition>::all(ctx.client.clone()), config.clone()),
        events("GpuPartition"),
    )
    .default_backoff()
    .reflect(parts_w)
    .for_each(|_| {
        changed.notify_one();
        std::future::ready(())
    });
    let s_stream = counted(
        watcher(Api::<InferenceServer>::all(ctx.client.clone()), config),
        events("InferenceServer"),
    )
    .default_backoff()
    .reflect(servers_w)
    .for_each(|_| {
        changed.notify_one();
        std::future::ready(())
    });
    let report_loop = async {
        loop {
            tokio::select! {
                _ = changed.notified() => {}
                _ = tokio::time::sleep(ctx.opts.drift_interval) => {}
            }
            // Let a burst of events (the initial list) settle into the stores first.
            tokio::time::sleep(Duration::from_millis(500)).await;
            if ctx.lease.is_leader() {
                report_all(&ctx, &parts, &servers, &labelled).await;
            }
        }
    };
    futures::join!(p_stream, s_stream, report_loop);
}

/// Reports this node's unlabelled partitions and servers.
async fn report_all(
    ctx: &Ctx,
    parts: &Store<GpuPartition>,
    servers: &Store<InferenceServer>,
    labelled: &Store<GpuPartition>,
) {
    let node = &ctx.opts.node;
    for p in parts.state() {
        if &p.spec.node_name != node || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(problem) = partition_problem(&p) {
            report(ctx, p.as_ref(), &problem).await;
        }
    }
    let partition_of = |s: &InferenceServer| {
        let name = &s.spec.partition_ref.name;
        let find =
            |st: &Store<GpuPartition>| st.state().into_iter().find(|p| &p.name_any() == name);
        find(labelled).or_else(|| find(parts))
    };
    for s in servers.state() {
        let Some(p) = partition_of(&s) else { continue };
        if &p.spec.node_name != node {
            continue;
        }
        if let Some(problem) = server_problem(&s, &p) {
            report(ctx, s.as_ref(), &problem).await;
        }
    }
}

/// `Ready=False` with the problem's reason on `obj`, and one Warning event per generation. A
/// failure is logged: the next report (a watch change, the drift interval) tries again.
pub(super) async fn report<K: Reported>(ctx: &Ctx, obj: &K, problem: &LabelProblem) {
    let refusal = Refusal {
        reason: problem.reason,
        status: refusal::label_problem(
            problem.reason,
            problem.message.clone(),
            obj.meta().generation,
            &crate::clock::now(),
        ),
        note: problem.message.clone(),
        action: "Watch",
    };
    if let Err(e) = refuse(ctx, obj, refusal, |_| {}).await {
        tracing::warn!(kind = K::KIND, name = %obj.name_any(), "cannot report {}: {e}", problem.reason);
    }
}
