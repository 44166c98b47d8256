//! Custom resource types of gpuplane (`gpuplane.dev/v1alpha1`).
//!
//! This crate knows nothing of the controller: it holds the API types, their
//! OpenAPI schemas (via schemars) and the condition helpers shared by every
//! consumer. The generated CRD YAML lives next to it in `crds/` and is written
//! by the `crdgen` binary; a test fails when the committed YAML is stale.

pub mod cel;
pub mod condition;
pub mod docs;
pub mod kstatus;
pub mod partition;
pub mod pool;
pub mod reason;
pub mod server;

pub use condition::{set_condition, ConditionStatus};
pub use partition::*;
pub use pool::*;
pub use server::*;

use kube::CustomResourceExt;

/// The API group of every gpuplane resource.
pub const GROUP: &str = "gpuplane.dev";

/// The label that places an object on a node: a `GpuPartition` carries its `spec.nodeName`, an
/// `InferenceServer` the node of its partition, and the agent's Lease its node (the webhook
/// judges labelled Leases). Each agent watches only the objects labelled with its own node
/// (ARCHITECTURE.md, "Per-node scoping"); checks outside the project rely on this exact key.
pub const NODE_LABEL: &str = "gpuplane.dev/node";

/// The CRDs of every gpuplane kind, with their CEL rules and list bounds (`cel.rs`): what the
/// chart installs and what the CLI checks a manifest's schema against.
pub fn crds(
) -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    let mut all = [
        GpuPartition::crd(),
        InferenceServer::crd(),
        GpuNodePool::crd(),
    ];
    for crd in &mut all {
        let kind = crd.spec.names.kind.clone();
        cel::apply(crd, &kind);
    }
    all.into()
}

/// The CRD manifests, as one multi-document YAML string, exactly as `crdgen` writes them.
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

/// Path of the committed CRD YAML, relative to the crate root.
pub const CRDS_FILE: &str = "gpuplane.dev_crds.yaml";

/// Each kind's `openAPIV3Schema` of the committed CRDs (`gpuplane.dev_crds.yaml`, as `crdgen`
/// wrote it; a test holds it equal to [`crds`]) as one JSON object, kind → schema, made by
/// `build.rs`: a process that only validates against the schemas parses this instead of
/// generating the CRDs again (a third of a one-shot `gpuplane plan`).
pub const CRD_SCHEMAS_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/crd_schemas.json"));

#[cfg(test)]
mod tests;
