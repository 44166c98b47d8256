//! Proxmox PCI mappings: a VM slice's mapping lists exactly its GPUs; no other mapping of this
//! node may hand out a GPU the partition gives to someone else.

use super::{companions, GpuTarget, Planner, Step};
use crate::desired::ResolvedConsumer;
use crate::host::model::HostState;
use crate::proxmox::pci_cfg::MapEntry;
use std::collections::{BTreeMap, BTreeSet};

impl Planner<'_> {
    pub(super) fn plan_mappings(&mut self, targets: &BTreeMap<String, GpuTarget>) {
        let h = self.h;
        let mut wanted: BTreeMap<String, (Vec<MapEntry>, String)> = BTreeMap::new();
        for s in &self.d.partition.slices {
            let Some(ResolvedConsumer::Vm { vmid, mapping }) = &s.consumer else {
                continue;
            };
            let entries = s
                .gpus
                .iter()
                .filter_map(|g| h.pci_devices.get(g))
                .map(|d| MapEntry {
                    node: h.node_name.clone(),
                    id: format!("{}:{}", d.vendor, d.device),
                    paths: vec![mapping_path(h, &d.address)],
                    iommugroup: d.iommu_group,
                    subsystem_id: d.subsystem.clone(),
                    description: None,
                })
                .collect();
            wanted.insert(
                mapping.clone(),
                (
                    entries,
                    format!("slice {} passes exactly these GPUs to VM {vmid}", s.name),
                ),
            );
        }
        // Other mappings of this node must not hand out GPUs this partition gives to someone else.
        for (name, entries) in &h.pci_mappings {
            if wanted.contains_key(name) {
                continue;
            }
            let (keep, drop): (Vec<MapEntry>, Vec<MapEntry>) = entries
                .iter()
                .cloned()
                .partition(|e| !e.paths.iter().any(|p| owner(targets, p).is_some()));
            if !drop.is_empty() {
                let owners: BTreeSet<String> = drop
                    .iter()
                    .flat_map(|e| e.paths.iter())
                    .filter_map(|p| owner(targets, p).map(|t| format!("{p} (slice {})", t.slice)))
                    .collect();
                let owners: Vec<String> = owners.into_iter().collect();
                wanted.insert(
                    name.clone(),
                    (keep, format!("mapping {name} lists GPUs this partition gives to other consumers: {}; a VM using {name} would take them", owners.join(", "))),
                );
            }
        }
        for (name, (entries, why)) in wanted {
            let current = h.pci_mappings.get(&name).cloned().unwrap_or_default();
            if !same_entries(&current, &entries) {
                self.push(
                    Step::SetPciMapping {
                        mapping: name,
                        entries,
                    },
                    why,
                );
            }
        }
    }
}

/// The partition GPU a mapping path names: the function itself, or its whole slot.
fn owner<'t>(targets: &'t BTreeMap<String, GpuTarget>, path: &str) -> Option<&'t GpuTarget> {
    targets.get(path).or_else(|| {
        targets
            .iter()
            .find(|(a, _)| companions::slot(a) == path)
            .map(|(_, t)| t)
    })
}

/// The mapping path of a GPU: the whole slot (`0000:81:00`, all functions) when it has
/// same-slot functions in its IOMMU group (its audio function), else the function itself.
fn mapping_path(h: &HostState, addr: &str) -> String {
    let group = h.pci_devices.get(addr).and_then(|d| d.iommu_group);
    let slot = companions::slot(addr);
    let shared = h.pci_devices.values().any(|m| {
        m.address != addr
            && group.is_some()
            && m.iommu_group == group
            && companions::slot(&m.address) == slot
    });
    if shared {
        slot.to_string()
    } else {
        addr.to_string()
    }
}

/// Map entries equal ignoring order of entries.
fn same_entries(a: &[MapEntry], b: &[MapEntry]) -> bool {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort();
    b.sort();
    a == b
}
