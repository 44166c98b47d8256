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

use super::kube_io::publish;
use super::scope::{counted, partition_problem, server_problem, unlabelled_config, LabelProblem};
use super::status::{merge, patch_partition, patch_server, waiting_for_partition};
use super::Ctx;
use futures::StreamExt;
use gpuplane_crds::condition::types;
use gpuplane_crds::{GpuPartition, GpuPartitionStatus, InferenceServer, InferenceServerStatus};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Resource, ResourceExt};
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
            report_partition(ctx, &p, &problem).await;
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
            report_server(ctx, &s, &problem).await;
        }
    }
}

/// Whether `Ready` already says `reason` for the current generation.
fn already_says(
    conditions: &[gpuplane_crds::condition::Condition],
    observed: Option<i64>,
    generation: Option<i64>,
    reason: &str,
) -> bool {
    observed == generation
        && conditions
            .iter()
            .any(|c| c.type_ == types::READY && c.reason == reason)
}

/// `Ready=False` with the problem's reason on a partition, and one Warning event.
pub(super) async fn report_partition(ctx: &Ctx, p: &GpuPartition, problem: &LabelProblem) {
    let old = p.status.clone().unwrap_or_default();
    if already_says(
        &old.conditions,
        old.observed_generation,
        p.metadata.generation,
        problem.reason,
    ) {
        return;
    }
    let w = waiting_for_partition(
        problem.reason,
        problem.message.clone(),
        p.metadata.generation,
    );
    let st = GpuPartitionStatus {
        observed_generation: p.metadata.generation,
        conditions: merge(&old.conditions, &w.conditions),
        ..old
    };
    let api: Api<GpuPartition> = Api::all(ctx.client.clone());
    if let Err(e) = patch_partition(&api, &p.name_any(), &st).await {
        tracing::warn!(partition = %p.name_any(), "cannot report {}: {e}", problem.reason);
        return;
    }
    ctx.metrics
        .set_conditions("GpuPartition", "", &p.name_any(), &st.conditions);
    let r = p.object_ref(&());
    publish(
        ctx,
        &r,
        EventType::Warning,
        problem.reason,
        "Watch",
        problem.message.clone(),
    )
    .await;
}

/// `Ready=False` with the problem's reason on a server, and one Warning event.
pub(super) async fn report_server(ctx: &Ctx, s: &InferenceServer, problem: &LabelProblem) {
    let old = s.status.clone().unwrap_or_default();
    if already_says(
        &old.conditions,
        old.observed_generation,
        s.metadata.generation,
        problem.reason,
    ) {
        return;
    }
    let w = waiting_for_partition(
        problem.reason,
        problem.message.clone(),
        s.metadata.generation,
    );
    let st = InferenceServerStatus {
        observed_generation: s.metadata.generation,
        conditions: merge(&old.conditions, &w.conditions),
        ..old
    };
    let ns = s.namespace().unwrap_or_default();
    let api: Api<InferenceServer> = Api::namespaced(ctx.client.clone(), &ns);
    if let Err(e) = patch_server(&api, &s.name_any(), &st).await {
        tracing::warn!(server = %s.name_any(), "cannot report {}: {e}", problem.reason);
        return;
    }
    ctx.metrics
        .set_conditions("InferenceServer", &ns, &s.name_any(), &st.conditions);
    let r = s.object_ref(&());
    publish(
        ctx,
        &r,
        EventType::Warning,
        problem.reason,
        "Watch",
        problem.message.clone(),
    )
    .await;
}
