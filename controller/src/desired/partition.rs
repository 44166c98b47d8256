//! Validation and GPU selection of a `GpuPartition`.

use super::{err, DesiredPartition, ResolvedConsumer, ResolvedSlice, SpecError};
use crate::host::model::HostState;
use gpuplane_crds::{GpuDriver, GpuPartition, IommuModeExpectation};
use std::collections::{BTreeMap, BTreeSet};

/// Validates `p` and resolves its selectors against `host`, whose GPUs are the display-class
/// devices of `gpu_vendor`; `gpu_driver` is the kernel driver that `driver: nvidia` means
/// there (`nvidia`, or the display driver of emulated GPUs in tests).
///
/// # Guarantees
/// On `Ok`, every slice has at least one GPU, no GPU is in two slices, and consumers fit
/// their driver (LXC needs `nvidia`, VM needs `vfio-pci`).
pub fn resolve_partition(
    p: &GpuPartition,
    host: &HostState,
    gpu_vendor: &str,
    gpu_driver: &str,
) -> Result<DesiredPartition, Vec<SpecError>> {
    let res = format!(
        "GpuPartition/{}",
        p.metadata.name.as_deref().unwrap_or("<unnamed>")
    );
    let mut errors = Vec::new();
    let spec = &p.spec;
    if spec.node_name.is_empty() {
        errors.push(err(
            &res,
            "spec.nodeName",
            "must name the host this partition is for",
        ));
    }
    if spec.slices.is_empty() {
        errors.push(err(&res, "spec.slices", "needs at least one slice"));
    }
    let host_gpus: Vec<&str> = host.gpus(gpu_vendor).map(|d| d.address.as_str()).collect();
    let mut names = BTreeSet::new();
    let mut mappings = BTreeMap::new();
    let mut vmids: BTreeMap<u32, String> = BTreeMap::new();
    // First pass: explicit selectors (addresses, NUMA); count selectors take what is left.
    let mut chosen: Vec<Option<Vec<String>>> = vec![None; spec.slices.len()];
    let mut claimed: BTreeMap<String, String> = BTreeMap::new();
    for (i, s) in spec.slices.iter().enumerate() {
        let f = |x: &str| format!("spec.slices[{i}].{x}");
        if !is_dns_label(&s.name) {
            errors.push(err(
                &res,
                f("name"),
                format!(
                    "{:?} is not a DNS label (lower-case letters, digits and '-', at most 63)",
                    s.name
                ),
            ));
        }
        if !names.insert(s.name.clone()) {
            errors.push(err(
                &res,
                f("name"),
                format!(
                    "slice name {:?} is used twice; slice names must be unique",
                    s.name
                ),
            ));
        }
        let g = &s.gpus;
        let set = [
            g.addresses.is_some(),
            g.numa_node.is_some(),
            g.count.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if set != 1 {
            errors.push(err(
                &res,
                f("gpus"),
                "set exactly one of addresses, numaNode or count",
            ));
            continue;
        }
        if let Some(c) = &s.consumer {
            match (&c.lxc, &c.vm) {
                (Some(l), None) => {
                    if s.driver != GpuDriver::Nvidia {
                        errors.push(err(&res, f("driver"), format!("an LXC consumer (container {}) needs driver nvidia; vfio-pci GPUs can only be passed to a VM", l.vmid)));
                    }
                    if let Some(other) = vmids.insert(l.vmid, s.name.clone()) {
                        errors.push(err(&res, f("consumer.lxc.vmid"), format!("vmid {} is already the consumer of slice {other:?}; give one consumer one slice", l.vmid)));
                    }
                }
                (None, Some(v)) => {
                    if s.driver != GpuDriver::VfioPci {
                        errors.push(err(
                            &res,
                            f("driver"),
                            format!("a VM consumer (VM {}) needs driver vfio-pci", v.vmid),
                        ));
                    }
                    if !is_pve_configid(&v.pci_mapping) {
                        errors.push(err(&res, f("consumer.vm.pciMapping"), format!("{:?} is not a valid Proxmox mapping ID (letter first, then letters, digits, '-' or '_', 2 to 40 characters)", v.pci_mapping)));
                    }
                    if let Some(other) = mappings.insert(v.pci_mapping.clone(), s.name.clone()) {
                        errors.push(err(&res, f("consumer.vm.pciMapping"), format!("mapping {:?} is already used by slice {other:?}; each slice needs its own mapping", v.pci_mapping)));
                    }
                    if let Some(other) = vmids.insert(v.vmid, s.name.clone()) {
                        errors.push(err(
                            &res,
                            f("consumer.vm.vmid"),
                            format!("vmid {} is already the consumer of slice {other:?}", v.vmid),
                        ));
                    }
                }
                _ => errors.push(err(
                    &res,
                    f("consumer"),
                    "set exactly one of lxc or vm (or omit consumer)",
                )),
            }
        }
        let picked: Option<Vec<String>> = if let Some(addrs) = &g.addresses {
            let mut v = Vec::new();
            for (j, a) in addrs.iter().enumerate() {
                let full = a.full();
                if !is_pci_address(&full) {
                    errors.push(err(
                        &res,
                        format!("spec.slices[{i}].gpus.addresses[{j}]"),
                        format!(
                            "{:?} is not a PCI address; write it as 0000:01:00.0 (lower-case hex)",
                            a.0
                        ),
                    ));
                } else if !host_gpus.contains(&full.as_str()) {
                    errors.push(err(
                        &res,
                        format!("spec.slices[{i}].gpus.addresses[{j}]"),
                        format!(
                            "no GPU at {full} on this host; GPUs here: {}",
                            host_gpus.join(", ")
                        ),
                    ));
                } else if v.contains(&full) {
                    errors.push(err(
                        &res,
                        format!("spec.slices[{i}].gpus.addresses[{j}]"),
                        format!("{full} is listed twice"),
                    ));
                } else {
                    v.push(full);
                }
            }
            Some(v)
        } else if let Some(n) = g.numa_node {
            let v: Vec<String> = host
                .gpus(gpu_vendor)
                .filter(|d| d.numa_node == n)
                .map(|d| d.address.clone())
                .collect();
            if v.is_empty() {
                let nodes: BTreeSet<i32> = host.gpus(gpu_vendor).map(|d| d.numa_node).collect();
                errors.push(err(
                    &res,
                    f("gpus.numaNode"),
                    format!("no GPU on NUMA node {n}; this host has GPUs on NUMA nodes {nodes:?}"),
                ));
            }
            Some(v)
        } else {
            None
        };
        if let Some(v) = &picked {
            for a in v {
                if let Some(other) = claimed.insert(a.clone(), s.name.clone()) {
                    errors.push(err(&res, f("gpus"), format!("GPU {a} is also in slice {other:?}; a GPU may belong to one slice only")));
                }
            }
        }
        chosen[i] = picked;
    }
    // Second pass: count selectors. Prefer GPUs already in place (driver and consumer), then by address.
    for (i, s) in spec.slices.iter().enumerate() {
        let Some(n) = s.gpus.count else { continue };
        let mut free: Vec<&str> = host_gpus
            .iter()
            .copied()
            .filter(|a| !claimed.contains_key(*a))
            .collect();
        free.sort_by_key(|a| (!already_serves(host, a, s), a.to_string()));
        if (free.len() as u32) < n {
            errors.push(err(
                &res,
                format!("spec.slices[{i}].gpus.count"),
                format!(
                    "wants {n} GPUs but only {} are not claimed by other slices",
                    free.len()
                ),
            ));
            continue;
        }
        let v: Vec<String> = free
            .iter()
            .take(n as usize)
            .map(|a| a.to_string())
            .collect();
        for a in &v {
            claimed.insert(a.clone(), s.name.clone());
        }
        chosen[i] = Some(v);
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let slices = spec
        .slices
        .iter()
        .zip(chosen)
        .map(|(s, g)| {
            let mut gpus = g.unwrap_or_default();
            gpus.sort();
            ResolvedSlice {
                name: s.name.clone(),
                gpus,
                driver: s.driver,
                consumer: s.consumer.as_ref().and_then(|c| match (&c.lxc, &c.vm) {
                    (Some(l), None) => Some(ResolvedConsumer::Lxc(l.vmid)),
                    (None, Some(v)) => Some(ResolvedConsumer::Vm {
                        vmid: v.vmid,
                        mapping: v.pci_mapping.clone(),
                    }),
                    _ => None,
                }),
            }
        })
        .collect();
    Ok(DesiredPartition {
        name: p.metadata.name.clone().unwrap_or_default(),
        node_name: spec.node_name.clone(),
        slices,
        iommu: spec
            .iommu
            .as_ref()
            .map(|i| i.mode)
            .unwrap_or(IommuModeExpectation::Any),
        host_driver: gpu_driver.into(),
    })
}

/// Whether GPU `a` already has the slice's driver (and, for LXC, is mounted in its container).
fn already_serves(host: &HostState, a: &str, s: &gpuplane_crds::GpuSlice) -> bool {
    let Some(d) = host.pci_devices.get(a) else {
        return false;
    };
    if d.driver.as_deref() != Some(s.driver.sysfs_name()) {
        return false;
    }
    match s.consumer.as_ref().and_then(|c| c.lxc.as_ref()) {
        Some(l) => d.nvidia_minor.is_some_and(|m| {
            host.containers
                .get(&l.vmid)
                .is_some_and(|c| c.gpu_mounts.minors.contains(&m))
        }),
        None => true,
    }
}

/// `dddd:bb:dd.f`, lower-case hex.
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| {
        b[r].iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && hex(0..4)
        && hex(5..7)
        && hex(8..10)
        && (b'0'..=b'7').contains(&b[11])
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Proxmox `pve-configid`: letter first, then letters, digits, `-`, `_`; 2..=40 characters.
fn is_pve_configid(s: &str) -> bool {
    (2..=40).contains(&s.len())
        && s.as_bytes()[0].is_ascii_alphabetic()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}
