//! Custom resource types of gpuplane (`gpuplane.dev/v1alpha1`).
//!
//! This crate knows nothing of the controller: it holds the API types, their
//! OpenAPI schemas (via schemars) and the condition helpers shared by every
//! consumer. The generated CRD YAML lives next to it in `crds/` and is written
//! by the `crdgen` binary; a test fails when the committed YAML is stale.

pub mod condition;
pub mod partition;
pub mod server;

pub use condition::{set_condition, ConditionStatus};
pub use partition::*;
pub use server::*;

use kube::CustomResourceExt;

/// The API group of every gpuplane resource.
pub const GROUP: &str = "gpuplane.dev";

/// The CRD manifests, as one multi-document YAML string, exactly as `crdgen` writes them.
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in [GpuPartition::crd(), InferenceServer::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

/// Path of the committed CRD YAML, relative to the crate root.
pub const CRDS_FILE: &str = "gpuplane.dev_crds.yaml";

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed YAML must match what the types generate, or `kubectl apply -f crds/`
    /// would install a schema that differs from the code. Regenerate with
    /// `cargo run -p gpuplane-crds --bin crdgen`.
    #[test]
    fn committed_crd_yaml_is_fresh() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CRDS_FILE);
        let committed = std::fs::read_to_string(&path).expect("committed CRD YAML exists");
        let generated = crds_yaml().expect("CRDs serialize");
        assert!(
            committed == generated,
            "{} is stale: run `cargo run -p gpuplane-crds --bin crdgen`",
            path.display()
        );
    }

    #[test]
    fn crds_have_status_subresource_and_printer_columns() {
        for crd in [GpuPartition::crd(), InferenceServer::crd()] {
            let v = &crd.spec.versions[0];
            assert!(v
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some());
            let cols = v
                .additional_printer_columns
                .as_ref()
                .expect("printer columns");
            assert!(cols.iter().any(|c| c.name == "Ready"));
            assert!(crd
                .spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty()));
        }
        assert_eq!(GpuPartition::crd().spec.scope, "Cluster");
        assert_eq!(InferenceServer::crd().spec.scope, "Namespaced");
    }

    #[test]
    fn pci_address_pattern_is_in_the_schema() {
        let yaml = crds_yaml().unwrap();
        assert!(yaml.contains(partition::PCI_ADDRESS_PATTERN));
    }
}
