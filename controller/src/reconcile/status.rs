//! Writing status: conditions merged so `lastTransitionTime` survives, then server-side apply
//! on the status subresource with one field manager.

use super::{Error, MANAGER};
use gpuplane_crds::{GpuPartition, GpuPartitionStatus, InferenceServer, InferenceServerStatus};
use kube::api::{Patch, PatchParams};
use kube::Api;

pub use crate::status::refusal::{invalid, waiting_for_partition};
pub use gpuplane_crds::condition::merge;

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
