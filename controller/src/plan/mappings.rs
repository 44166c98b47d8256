//! Proxmox PCI mappings: a VM slice's mapping lists exactly its GPUs, each entry naming the GPU
//! it means (`layout/mapping_note.rs`); no other mapping of this node may hand out a GPU the
//! partition gives to someone else, nor keep an entry whose path now holds another GPU than
//! the one it names.
//!
//! The last rule holds for the mappings of slices the layout guard froze too: taking such an
//! entry out is the one write a stall allows, because it only narrows what a VM start may take
//! (Proxmox's own start check compares model IDs and the IOMMU group, which identical GPUs
//! share, so it would hand the VM whichever GPU sits at the path now).

use super::{companions, GpuTarget, Planner, Step};
use crate::desired::ResolvedConsumer;
use crate::host::model::{HostState, PciDevice};
use crate::layout::mapping_note;
use crate::layout::matching::{known_identities, Known};
use crate::proxmox::pci_cfg::MapEntry;
use std::collections::{BTreeMap, BTreeSet};

impl Planner<'_> {
    /// `groups`: the host's devices by IOMMU group (`HostState::by_iommu_group`).
    pub(super) fn plan_mappings(
        &mut self,
        targets: &BTreeMap<String, GpuTarget>,
        groups: &BTreeMap<u32, Vec<&PciDevice>>,
    ) {
        let h = self.h;
        let computed;
        let known = match &self.known {
            Some(k) => k,
            None => {
                computed = self.known_identities();
                &computed
            }
        };
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
                    id: d.model_id(),
                    paths: vec![mapping_path(h, groups, &d.address)],
                    iommugroup: d.iommu_group,
                    subsystem_id: d.subsystem.clone(),
                    description: known
                        .get(d.address.as_str())
                        .and_then(|id| mapping_note::describe(id)),
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
        // Other mappings of this node must not hand out GPUs this partition gives to someone
        // else, nor a GPU that is not the one their entry names.
        for (name, entries) in &h.pci_mappings {
            if wanted.contains_key(name) {
                continue;
            }
            let mut keep = Vec::new();
            let mut owners = BTreeSet::new();
            let mut strangers = BTreeSet::new();
            for e in entries {
                let taken: Vec<String> = e
                    .paths
                    .iter()
                    .filter_map(|p| owner(targets, p).map(|t| format!("{p} (slice {})", t.slice)))
                    .collect();
                let other = stranger(h, e);
                if taken.is_empty() && other.is_none() {
                    keep.push(e.clone());
                }
                owners.extend(taken);
                strangers.extend(other);
            }
            let mut why = Vec::new();
            if !owners.is_empty() {
                let owners: Vec<String> = owners.into_iter().collect();
                why.push(format!("mapping {name} lists GPUs this partition gives to other consumers: {}; a VM using {name} would take them", owners.join(", ")));
            }
            if !strangers.is_empty() {
                let rows: Vec<String> = strangers.into_iter().collect();
                why.push(format!("mapping {name} names GPUs that are no longer at their paths: {}; a VM using {name} would take the GPU there now", rows.join(", ")));
            }
            if !why.is_empty() {
                wanted.insert(name.clone(), (keep, why.join("; ")));
            }
        }
        for (name, (entries, why)) in wanted {
            let current = h.pci_mappings.get(&name).map_or(&[][..], Vec::as_slice);
            if !same_entries(current, &entries) {
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

impl Planner<'_> {
    /// Each GPU's identity as far as it is known now: observed, and the UUID and serial the
    /// ledger remembers for a GPU that cannot tell them now (on `vfio-pci`).
    fn known_identities(&self) -> Known<'_> {
        let h = self.h;
        let vendor = self
            .d
            .partition
            .layout
            .as_ref()
            .map(|t| t.gpu_vendor.as_str());
        let observed: Vec<_> = match vendor {
            Some(v) => h.gpus(v).collect(),
            None => h.pci_devices.values().filter(|d| d.is_display()).collect(),
        };
        let ledger = h
            .gpu_ledger
            .as_ref()
            .filter(|l| l.partition == self.d.partition.name);
        known_identities(ledger, &observed)
    }
}

/// `path → the GPU there now`, when entry `e` names (in its description) a GPU that is not
/// the one observed at one of its paths; judged on what can be read of the GPU now, so a GPU
/// on `vfio-pci` is judged by its serial number capability.
fn stranger(h: &HostState, e: &MapEntry) -> Option<String> {
    let named = e.description.as_deref().and_then(mapping_note::parse)?;
    e.paths.iter().find_map(|p| {
        // A path without a function is the whole slot; Proxmox checks its function 0.
        let function = if p.contains('.') {
            p.clone()
        } else {
            format!("{p}.0")
        };
        let d = h.pci_devices.get(&function)?;
        mapping_note::contradiction(&named, &d.identity).map(|why| format!("{p} ({why})"))
    })
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
fn mapping_path(h: &HostState, groups: &BTreeMap<u32, Vec<&PciDevice>>, addr: &str) -> String {
    let group = h.pci_devices.get(addr).and_then(|d| d.iommu_group);
    let slot = companions::slot(addr);
    let shared = group.and_then(|g| groups.get(&g)).is_some_and(|mates| {
        mates
            .iter()
            .any(|m| m.address != addr && companions::slot(&m.address) == slot)
    });
    if shared {
        slot.to_string()
    } else {
        addr.to_string()
    }
}

/// Map entries equal ignoring order of entries.
fn same_entries(a: &[MapEntry], b: &[MapEntry]) -> bool {
    a.len() == b.len() && sorted(a) == sorted(b)
}

fn sorted(x: &[MapEntry]) -> Vec<&MapEntry> {
    let mut v: Vec<&MapEntry> = x.iter().collect();
    v.sort();
    v
}
