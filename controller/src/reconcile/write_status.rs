//! The one way `reconcile/` writes status: conditions merged so `lastTransitionTime` survives,
//! server-side apply on the status subresource with one field manager, the condition metric
//! (`gpuplane_resource_condition`) set from what was written, and, for a refusal, one Warning
//! event per generation.
//!
//! # Guarantees
//! - [`write`] is the only caller of the status subresource in `reconcile/`; every status it
//!   writes is mirrored in the metric, so a dashboard and `kubectl get` never disagree.
//! - [`refuse`] writes only when the merged status differs from the stored one, and publishes
//!   its event only when `Ready` did not already say the refusal's reason for the object's
//!   current generation: re-reconciling a refused object costs no API write and no event.

use super::kube_io::publish;
use super::{Ctx, Error, MANAGER};
use crate::status::ResourceStatus;
use gpuplane_crds::condition::{types, Condition};
use gpuplane_crds::{GpuPartition, GpuPartitionStatus, InferenceServer, InferenceServerStatus};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};

pub use gpuplane_crds::condition::merge;

/// A resource whose status the agent writes: the two kinds.
pub(super) trait Reported:
    Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug
{
    type Status: serde::Serialize + Clone + Default + PartialEq;
    /// The kind, as in `apiVersion`/`kind` and the metric's `kind` label.
    const KIND: &'static str;
    /// The API of this object (cluster-wide for a partition, its namespace for a server).
    fn api_for(&self, client: &kube::Client) -> Api<Self>;
    /// The stored status, or an empty one.
    fn stored(&self) -> Self::Status;
    fn conditions(st: &Self::Status) -> &[Condition];
    fn observed(st: &Self::Status) -> Option<i64>;
    /// Sets `observedGeneration` and the conditions, keeping every other field.
    fn set(st: &mut Self::Status, generation: Option<i64>, conditions: Vec<Condition>);
}

impl Reported for GpuPartition {
    type Status = GpuPartitionStatus;
    const KIND: &'static str = "GpuPartition";
    fn api_for(&self, client: &kube::Client) -> Api<Self> {
        Api::all(client.clone())
    }
    fn stored(&self) -> GpuPartitionStatus {
        self.status.clone().unwrap_or_default()
    }
    fn conditions(st: &GpuPartitionStatus) -> &[Condition] {
        &st.conditions
    }
    fn observed(st: &GpuPartitionStatus) -> Option<i64> {
        st.observed_generation
    }
    fn set(st: &mut GpuPartitionStatus, generation: Option<i64>, conditions: Vec<Condition>) {
        st.observed_generation = generation;
        st.conditions = conditions;
    }
}

impl Reported for InferenceServer {
    type Status = InferenceServerStatus;
    const KIND: &'static str = "InferenceServer";
    fn api_for(&self, client: &kube::Client) -> Api<Self> {
        Api::namespaced(client.clone(), &self.namespace().unwrap_or_default())
    }
    fn stored(&self) -> InferenceServerStatus {
        self.status.clone().unwrap_or_default()
    }
    fn conditions(st: &InferenceServerStatus) -> &[Condition] {
        &st.conditions
    }
    fn observed(st: &InferenceServerStatus) -> Option<i64> {
        st.observed_generation
    }
    fn set(st: &mut InferenceServerStatus, generation: Option<i64>, conditions: Vec<Condition>) {
        st.observed_generation = generation;
        st.conditions = conditions;
    }
}

/// Writes `st` as the status of `obj` and shows its conditions in the metric.
pub(super) async fn write<K: Reported>(ctx: &Ctx, obj: &K, st: &K::Status) -> Result<(), Error> {
    let patch = serde_json::json!({
        "apiVersion": "gpuplane.dev/v1alpha1", "kind": K::KIND, "status": st,
    });
    obj.api_for(&ctx.client)
        .patch_status(
            &obj.name_any(),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    show(ctx, obj, st);
    Ok(())
}

/// Shows `st`'s conditions of `obj` in `gpuplane_resource_condition`.
fn show<K: Reported>(ctx: &Ctx, obj: &K, st: &K::Status) {
    ctx.metrics.set_conditions(
        K::KIND,
        &obj.namespace().unwrap_or_default(),
        &obj.name_any(),
        K::conditions(st),
    );
}

/// A refusal to write: its conditions (a builder of [`crate::status::refusal`]), the reason
/// they carry, and the note and action of its event.
pub(super) struct Refusal {
    pub reason: crate::status::Reason,
    pub status: ResourceStatus,
    pub note: String,
    pub action: &'static str,
}

/// Says `refusal` on `obj` (see the module's guarantees); `shape` adjusts the other fields of
/// the status (a refused partition reports no slices).
pub(super) async fn refuse<K: Reported>(
    ctx: &Ctx,
    obj: &K,
    refusal: Refusal,
    shape: impl FnOnce(&mut K::Status),
) -> Result<(), Error> {
    let old = obj.stored();
    let generation = obj.meta().generation;
    let said = K::observed(&old) == generation
        && K::conditions(&old)
            .iter()
            .any(|c| c.type_ == types::READY && c.reason == refusal.reason);
    let mut st = old.clone();
    K::set(
        &mut st,
        generation,
        merge(K::conditions(&old), &refusal.status.conditions),
    );
    shape(&mut st);
    if st != old {
        write(ctx, obj, &st).await?;
    } else {
        // Nothing to write, but the metric may not know it yet (a restarted agent).
        show(ctx, obj, &st);
    }
    if !said {
        let r = obj.object_ref(&());
        publish(
            ctx,
            &r,
            EventType::Warning,
            refusal.reason.as_str(),
            refusal.action,
            refusal.note,
        )
        .await;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
