//! Conflicts between objects that claim the same thing, decided the same way by every agent at
//! every reconcile: **the oldest claim wins**.
//!
//! A claim's age is `metadata.creationTimestamp` (set once by the API server, never changed),
//! then namespace and name for objects created in the same second: a total order, so the
//! decision depends only on the objects, never on list order, timing or which agent asks. An
//! object without a timestamp (never stored by an API server) sorts last.
//!
//! - **Two partitions for one node** (and so two partitions claiming the same GPUs): the oldest
//!   is reconciled; every younger one gets `Ready=False` and `Progressing=False` with reason
//!   `Conflict`, naming the winner, and never touches the host — not even when it is deleted
//!   (its finalizer is removed without applying its `deletionPolicy`: the host is the
//!   winner's). It is looked at again every drift interval and takes over once the winner is
//!   gone.
//! - **Servers over-subscribing a slice** (two servers on one slice), or sharing a unit name or
//!   a port at one location: the servers are taken in claim order, so the older keeps the
//!   slice, unit or port and the younger gets reason `Conflict` naming it.
//!
//! A partition for a node that no agent serves is not seen by any agent (each watches only its
//! own node's partition): it keeps no status at all, which `kubectl get` shows as such.

use super::write_status::{refuse, Refusal};
use super::{Ctx, Error, FINALIZER};
use crate::status::refusal;
use gpuplane_crds::GpuPartition;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

/// The reason of the loser's conditions.
pub const REASON: crate::status::Reason = refusal::CONFLICT;

/// The claim order: creation time (none last), then namespace and name.
pub fn claim_key<K: Resource>(o: &K) -> (bool, String, String, String) {
    crate::desired::claim_key(o.meta())
}

/// Sorts `objects` oldest claim first.
pub fn sort_by_claim<K: Resource>(objects: &mut [K]) {
    objects.sort_by_key(|o| claim_key(o));
}

/// When `p` loses its node to an older partition among `all`: the message for its conditions.
pub fn partition_loses(p: &GpuPartition, all: &[GpuPartition]) -> Option<String> {
    let winner = all
        .iter()
        .filter(|o| o.spec.node_name == p.spec.node_name)
        .min_by_key(|o| claim_key(*o))?;
    if winner.name_any() == p.name_any() {
        return None;
    }
    Some(format!(
        "node {} is already claimed by GpuPartition {}, which is older (the oldest claim wins); \
         one node has one partition: delete this one or give it another nodeName",
        p.spec.node_name,
        winner.name_any()
    ))
}

/// Before a partition is reconciled: when it loses its node, says so on it (and lets it go when
/// it is being deleted) and returns when to look again; `None` when it is the node's partition.
pub(super) async fn settle_partition(p: &GpuPartition, ctx: &Ctx) -> Result<Option<Action>, Error> {
    let api: Api<GpuPartition> = Api::all(ctx.client.clone());
    // A younger partition for this node carries this node's label too (a partition labelled
    // for another node is reported as NodeLabelMismatch by that node's agent).
    let scope = super::scope::list_params(ctx.opts.watch_scope, &ctx.opts.node);
    let all = api.list(&scope).await?.items;
    let Some(message) = partition_loses(p, &all) else {
        return Ok(None);
    };
    let name = p.name_any();
    if p.metadata.deletion_timestamp.is_some() {
        if p.finalizers().iter().any(|f| f == FINALIZER) {
            let rest: Vec<&String> = p.finalizers().iter().filter(|f| *f != FINALIZER).collect();
            let patch = serde_json::json!({"metadata": {"finalizers": rest, "resourceVersion": p.resource_version()}});
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await?;
        }
        return Ok(Some(Action::await_change()));
    }
    let refusal = Refusal {
        reason: REASON,
        status: refusal::conflict(&message, p.metadata.generation, &crate::clock::now()),
        note: message,
        action: "Claim",
    };
    refuse(ctx, p, refusal, |_| {}).await?;
    Ok(Some(Action::requeue(ctx.opts.drift_interval)))
}

#[cfg(test)]
mod tests;
