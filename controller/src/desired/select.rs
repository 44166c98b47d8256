//! This host's share of a set of manifests: its partition (by `spec.nodeName`) and the servers
//! on it, all validated against the observed host. The one decision made before any host
//! write, shared by `gpuplane plan`/`converge` and the file agent (`run --manifests`). Pure.
//!
//! A `GpuNodePool` in the manifests (a directory of a pool's members, as applied to a cluster)
//! is checked like the rest (`pool.rs`): an invalid one refuses the input. A valid one is not
//! needed here: slots are asked through the API server by the Kubernetes agent, and these
//! front doors converge one host without asking.

use super::{check_servers_together, resolve_partition, resolve_server, Desired, SpecError};
use crate::host::model::HostState;
use crate::manifests::Manifests;

/// Why the manifests give this host nothing to converge to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// No partition names this node.
    #[error("no GpuPartition has spec.nodeName {node:?} (this host); found: {}", if found.is_empty() { "none".to_string() } else { found.join(", ") })]
    NoPartition { node: String, found: Vec<String> },
    /// Several partitions name this node.
    #[error("{} GpuPartitions name node {node:?} ({}); one host has one partition", names.len(), names.join(", "))]
    Several { node: String, names: Vec<String> },
    /// The specs are invalid.
    #[error("invalid spec (reason InvalidSpec), nothing was changed:\n{}", .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<SpecError>),
}

/// The desired state of the host `observed` from `manifests`, or why there is none.
pub fn for_host(
    manifests: &Manifests,
    observed: &HostState,
    gpu_vendor: &str,
    gpu_driver: &str,
) -> Result<Desired, SelectError> {
    let node = &observed.node_name;
    let mine: Vec<_> = manifests
        .partitions
        .iter()
        .filter(|p| &p.spec.node_name == node)
        .collect();
    let name = |p: &gpuplane_crds::GpuPartition| p.metadata.name.clone().unwrap_or("?".into());
    let partition = match mine.as_slice() {
        [p] => *p,
        [] => {
            let found = manifests
                .partitions
                .iter()
                .map(|p| format!("{} (nodeName {})", name(p), p.spec.node_name))
                .collect();
            return Err(SelectError::NoPartition {
                node: node.clone(),
                found,
            });
        }
        many => {
            return Err(SelectError::Several {
                node: node.clone(),
                names: many.iter().map(|p| name(p)).collect(),
            })
        }
    };
    let pools: Vec<SpecError> = manifests
        .pools
        .iter()
        .flat_map(super::pool::check)
        .collect();
    let dp = resolve_partition(partition, observed, gpu_vendor, gpu_driver).map_err(|mut e| {
        e.extend(pools.iter().cloned());
        SelectError::Invalid(e)
    })?;
    let mut servers = Vec::new();
    let mut errors: Vec<SpecError> = unknown_partitions(manifests);
    for s in manifests
        .servers
        .iter()
        .filter(|s| s.spec.partition_ref.name == dp.name)
    {
        match resolve_server(s, &dp) {
            Ok(d) => servers.push(d),
            Err(e) => errors.extend(e),
        }
    }
    // Files carry no creation time: the claim already on the host is the older one. A server
    // whose unit exists here comes first (stable: otherwise file order), so a conflict lands
    // on the newcomer, never on the server that has been serving.
    servers.sort_by_key(|d| {
        observed
            .unit(&d.unit)
            .and_then(|u| u.file.as_ref())
            .is_none()
    });
    errors.extend(check_servers_together(&servers));
    errors.extend(pools);
    if !errors.is_empty() {
        return Err(SelectError::Invalid(errors));
    }
    Ok(Desired {
        partition: dp,
        servers,
        removed_units: vec![],
    })
}

/// Servers whose `partitionRef` names no partition in the input: an error each, never dropped
/// in silence. (A server of another node's partition in the input is not this host's concern.)
fn unknown_partitions(m: &Manifests) -> Vec<SpecError> {
    let names: Vec<&str> = m
        .partitions
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    m.servers
        .iter()
        .filter(|s| !names.contains(&s.spec.partition_ref.name.as_str()))
        .map(|s| SpecError {
            resource: crate::resource_key::ResourceKey::server(
                s.metadata.namespace.as_deref().unwrap_or("default"),
                s.metadata.name.as_deref().unwrap_or("<unnamed>"),
            ),
            field: "spec.partitionRef.name".into(),
            message: format!(
                "names GpuPartition {:?}, which is not in the input (partitions: {})",
                s.spec.partition_ref.name,
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ),
        })
        .collect()
}
