//! What a command works on: the host backend (`--host`) and the validated manifests (`-f`).

use super::args::{HostArgs, InputArgs};
use super::failure::Failure;
use crate::desired::{resolve_partition, resolve_server, Desired, SpecError};
use crate::host::sim::SimHost;
use crate::host::Host;
use crate::manifests::Manifests;

/// Opens the host backend named by `--host`.
pub fn open_host(args: &HostArgs) -> Result<Box<dyn Host + Send>, Failure> {
    let spec = args.host.as_str();
    if spec == "local" {
        let mut h = crate::host::local::LocalHost::new(&args.host_root, &args.gpu_vendor);
        h.node_name = args.node_name.clone();
        return Ok(Box::new(h));
    }
    match spec.split_once(':') {
        Some(("sim", "embedded")) => Ok(Box::new(
            SimHost::from_yaml(crate::EMBEDDED_HOST, "embedded examples/hosts/kpro6.yaml")
                .map_err(|e| Failure::input(e.to_string()))?,
        )),
        // The file is the host: every write lands in it as it happens.
        Some(("sim", path)) => Ok(Box::new(
            SimHost::open(path).map_err(|e| Failure::input(e.to_string()))?,
        )),
        _ => Err(Failure::input(format!(
            "--host {spec:?}: use sim:FILE, sim:embedded or local"
        ))),
    }
}

/// Reads the manifests, picks the partition for the host's node and validates everything.
pub fn load_desired(input: &InputArgs, host: &mut dyn Host) -> Result<Desired, Failure> {
    let manifests = match &input.file {
        Some(p) => Manifests::load(p).map_err(|e| Failure::input(e.to_string()))?,
        None => {
            let mut m = Manifests::default();
            for (name, text) in crate::EMBEDDED_MANIFESTS {
                m.add_text(text, name)
                    .map_err(|e| Failure::input(e.to_string()))?;
            }
            m
        }
    };
    desired_for_host(
        &manifests,
        host,
        &input.host.gpu_vendor,
        &input.host.gpu_driver,
    )
}

/// Picks the partition for the host's node from `manifests` and validates everything against
/// the observed host: the one decision made before any host write.
pub fn desired_for_host(
    manifests: &Manifests,
    host: &mut dyn Host,
    gpu_vendor: &str,
    gpu_driver: &str,
) -> Result<Desired, Failure> {
    let observed = host.observe()?;
    let mine: Vec<_> = manifests
        .partitions
        .iter()
        .filter(|p| p.spec.node_name == observed.node_name)
        .collect();
    let partition = match mine.as_slice() {
        [p] => *p,
        [] => {
            let others: Vec<String> = manifests
                .partitions
                .iter()
                .map(|p| {
                    format!(
                        "{} (nodeName {})",
                        p.metadata.name.as_deref().unwrap_or("?"),
                        p.spec.node_name
                    )
                })
                .collect();
            return Err(Failure::input(format!(
                "no GpuPartition has spec.nodeName {:?} (this host); found: {}",
                observed.node_name,
                if others.is_empty() {
                    "none".to_string()
                } else {
                    others.join(", ")
                }
            )));
        }
        many => {
            let names: Vec<&str> = many
                .iter()
                .map(|p| p.metadata.name.as_deref().unwrap_or("?"))
                .collect();
            return Err(Failure::input(format!(
                "{} GpuPartitions name node {:?} ({}); one host has one partition",
                many.len(),
                observed.node_name,
                names.join(", ")
            )));
        }
    };
    let dp =
        resolve_partition(partition, &observed, gpu_vendor, gpu_driver).map_err(spec_failure)?;
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
    errors.extend(crate::desired::check_servers_together(&servers));
    if !errors.is_empty() {
        return Err(spec_failure(errors));
    }
    let units: Vec<_> = servers.iter().map(|s| s.unit.clone()).collect();
    host.watch_units(&units);
    Ok(Desired {
        partition: dp,
        servers,
        removed_units: vec![],
    })
}

pub(super) fn spec_failure(errors: Vec<SpecError>) -> Failure {
    let lines: Vec<String> = errors.iter().map(|e| format!("  - {e}")).collect();
    Failure::input(format!(
        "invalid spec (reason InvalidSpec), nothing was changed:\n{}",
        lines.join("\n")
    ))
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
            resource: format!(
                "InferenceServer/{}/{}",
                s.metadata.namespace.as_deref().unwrap_or("default"),
                s.metadata.name.as_deref().unwrap_or("<unnamed>")
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
