//! IOMMU-group companions: devices that share a GPU's IOMMU group.
//!
//! VFIO passes whole groups: every device of a GPU's group must be on `vfio-pci` (or have no
//! driver) before the VM can use it. A companion in the same slot (the GPU's HDMI audio
//! function) belongs to the GPU and moves with it, both ways. A device of another slot that no
//! slice owns makes passthrough impossible without taking it from whoever uses it: that is
//! refused with `IommuGroupShared`, never done silently. A bridge in the group is fine unbound
//! or on `pcieport` (VFIO's own rule); on any other driver it blocks too.

use super::{Planner, Step};
use crate::desired::Desired;
use crate::host::model::{HostState, PciDevice};
use gpuplane_crds::GpuDriver;
use std::collections::{BTreeMap, BTreeSet};

/// A companion and where it must go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Companion {
    pub address: String,
    pub gpu: String,
    pub slice: String,
    /// `true`: to vfio-pci with the GPU; `false`: back to its host driver.
    pub to_vfio: bool,
}

impl Companion {
    /// Whether the companion is not where it must be. Returning: unbound from vfio-pci while
    /// still pinned, then cleared and probed in one step.
    pub fn must_move(&self, h: &HostState) -> bool {
        let d = h.pci_devices.get(&self.address);
        let on_vfio = d.and_then(|d| d.driver.as_deref()) == Some("vfio-pci");
        let pinned = d.and_then(|d| d.driver_override.as_deref()) == Some("vfio-pci");
        if self.to_vfio {
            !on_vfio || !pinned
        } else {
            on_vfio || d.is_some_and(|d| d.driver_override.is_some())
        }
    }
}

/// `dddd:bb:dd` of `dddd:bb:dd.f`.
pub fn slot(addr: &str) -> &str {
    addr.rsplit_once('.').map(|(s, _)| s).unwrap_or(addr)
}

fn is_bridge(d: &PciDevice) -> bool {
    d.class.starts_with("0604")
}

/// Companions of the partition's GPUs, and messages for groups shared with foreign devices.
/// `groups`: the host's devices by IOMMU group (`HostState::by_iommu_group`).
pub fn find(
    d: &Desired,
    h: &HostState,
    groups: &BTreeMap<u32, Vec<&PciDevice>>,
) -> (Vec<Companion>, Vec<String>) {
    let partition: BTreeSet<&str> = d
        .partition
        .slices
        .iter()
        .flat_map(|s| s.gpus.iter().map(String::as_str))
        .collect();
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for s in &d.partition.slices {
        for g in &s.gpus {
            let Some(group) = h.pci_devices.get(g).and_then(|x| x.iommu_group) else {
                continue;
            };
            for m in groups.get(&group).into_iter().flatten() {
                if m.address == *g || partition.contains(m.address.as_str()) {
                    continue;
                }
                if is_bridge(m) {
                    // VFIO accepts a bridge in the group only when it is unbound or on pcieport.
                    let ok = matches!(m.driver.as_deref(), None | Some("pcieport"));
                    if s.driver == GpuDriver::VfioPci && !ok {
                        problems.push(format!(
                            "GPU {g} (slice {}) shares IOMMU group {group} with bridge {} bound to {}; VFIO cannot use the group while that bridge has a driver other than pcieport",
                            s.name,
                            m.address,
                            m.driver.as_deref().unwrap_or("none")
                        ));
                    }
                    continue;
                }
                if slot(&m.address) == slot(g) {
                    out.push(Companion {
                        address: m.address.clone(),
                        gpu: g.clone(),
                        slice: s.name.clone(),
                        to_vfio: s.driver == GpuDriver::VfioPci,
                    });
                } else if s.driver == GpuDriver::VfioPci {
                    problems.push(format!(
                        "GPU {g} (slice {}) shares IOMMU group {group} with {} (class {}, driver {}), which no slice owns; VFIO passes whole groups, so either add that device to the slice's consumer or give the GPU its own group (its own root port, or ACS)",
                        s.name,
                        m.address,
                        m.class,
                        m.driver.as_deref().unwrap_or("none")
                    ));
                }
            }
        }
    }
    (out, problems)
}

impl Planner<'_> {
    /// Moves one companion: to vfio-pci with its GPU, or back to its host driver.
    pub(super) fn plan_companion(&mut self, c: &Companion) {
        let Some(d) = self.h.pci_devices.get(&c.address) else {
            return;
        };
        let a = c.address.clone();
        if c.to_vfio {
            if d.driver_override.as_deref() != Some("vfio-pci") {
                let why = format!(
                    "{a} shares slot and IOMMU group with GPU {}, so it goes to the VM with it",
                    c.gpu
                );
                self.push(
                    Step::SetDriverOverride {
                        address: a.clone(),
                        driver: Some("vfio-pci".into()),
                    },
                    why,
                );
            }
            if d.driver.as_deref() != Some("vfio-pci") {
                if let Some(cur) = &d.driver {
                    self.push(
                        Step::Unbind {
                            address: a.clone(),
                            driver: cur.clone(),
                        },
                        format!("{a} is bound to {cur}; VFIO needs the whole IOMMU group"),
                    );
                }
                self.push(
                    Step::Probe { address: a.clone() },
                    format!("bind {a} to vfio-pci with GPU {}", c.gpu),
                );
            }
        } else {
            if d.driver.as_deref() == Some("vfio-pci") {
                self.push(
                    Step::Unbind {
                        address: a.clone(),
                        driver: "vfio-pci".into(),
                    },
                    format!(
                        "GPU {} returns to nvidia, so {a} leaves vfio-pci too",
                        c.gpu
                    ),
                );
            }
            if d.driver_override.is_some() {
                self.push(
                    Step::ReturnToHostDriver { address: a.clone() },
                    format!("let the kernel bind {a} to its default driver"),
                );
            }
        }
    }
}
