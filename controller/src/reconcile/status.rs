//! Writing status: conditions merged so `lastTransitionTime` survives, then server-side apply
//! on the status subresource with one field manager.

use super::{Error, MANAGER};
use crate::status::ResourceStatus;
use gpuplane_crds::condition::{Condition, Time};
use gpuplane_crds::{GpuPartition, GpuPartitionStatus, InferenceServer, InferenceServerStatus};
use kube::api::{Patch, PatchParams};
use kube::Api;

pub use gpuplane_crds::condition::merge;

/// Conditions for a spec that failed validation.
pub fn invalid(messages: &[String], generation: Option<i64>) -> ResourceStatus {
    let now = Time(jiff::Timestamp::now());
    let c = |t: &str, s: &str, reason: &str, m: String| Condition {
        type_: t.into(),
        status: s.into(),
        reason: reason.into(),
        message: m,
        observed_generation: generation,
        last_transition_time: now.clone(),
    };
    ResourceStatus {
        conditions: vec![
            c("Ready", "False", "InvalidSpec", messages.join("; ")),
            c(
                "Progressing",
                "False",
                "InvalidSpec",
                "fix the spec; nothing on the host was changed".into(),
            ),
            c(
                "Reconciling",
                "False",
                "InvalidSpec",
                "waiting for a spec change".into(),
            ),
            c("Stalled", "True", "InvalidSpec", messages.join("; ")),
        ],
    }
}

/// Conditions for a server whose partition cannot be applied (invalid or missing): not Ready
/// and Stalled, since only a change to a spec can move it.
pub fn waiting_for_partition(
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> ResourceStatus {
    let now = Time(jiff::Timestamp::now());
    let c = |t: &str, s: &str| Condition {
        type_: t.into(),
        status: s.into(),
        reason: reason.into(),
        message: message.clone(),
        observed_generation: generation,
        last_transition_time: now.clone(),
    };
    ResourceStatus {
        conditions: vec![
            c("Ready", "False"),
            c("Reconciling", "False"),
            c("Stalled", "True"),
        ],
    }
}

/// Server-side apply of `status` on the status subresource of `kind`/`name`.
async fn patch_status<K>(
    api: &Api<K>,
    kind: &str,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch =
        serde_json::json!({"apiVersion": "gpuplane.dev/v1alpha1", "kind": kind, "status": status});
    api.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

pub async fn patch_partition(
    api: &Api<GpuPartition>,
    name: &str,
    status: &GpuPartitionStatus,
) -> Result<(), Error> {
    patch_status(api, "GpuPartition", name, status).await
}

pub async fn patch_server(
    api: &Api<InferenceServer>,
    name: &str,
    status: &InferenceServerStatus,
) -> Result<(), Error> {
    patch_status(api, "InferenceServer", name, status).await
}

#[cfg(test)]
mod tests;
