//! The pure planner: `plan(desired, observed) -> Plan`.
//!
//! Knows the desired state (resolved from the CRD types) and the host model only:
//! no backend, no client, no runtime. It derives the safe order itself:
//! servers stop before their container, containers stop before their GPUs are
//! rebound, nothing is rebound while a process we do not manage holds it, and
//! consumers start only after their GPUs are in place.
//!
//! # Guarantees
//! - Converged means an empty plan: `plan(d, observe())` after a full converge has no steps.
//! - When anything blocks a rebind (`GpuInUse`), the plan has no steps at all, so nothing
//!   is half-changed.
//! - When later steps depend on an earlier step's outcome (device minors after binding to
//!   `nvidia`, the P2P probe's result), the plan ends there and says so in `continues_after`;
//!   the converge loop re-observes and re-plans.

pub mod companions;
pub mod servers;
pub mod step;

pub use step::{Blocker, Note, Plan, PlannedStep, Step};

use crate::desired::{Desired, ResolvedConsumer};
use crate::host::model::{HostState, Location, RunState, UnitRef};
use crate::proxmox::pci_cfg::MapEntry;
use std::collections::{BTreeMap, BTreeSet};

/// Target of one GPU.
#[derive(Debug, Clone)]
struct GpuTarget {
    driver: String,
    slice: String,
}

/// Plans the steps from `host` to `desired`.
pub fn plan(desired: &Desired, host: &HostState) -> Plan {
    let mut p = Planner {
        d: desired,
        h: host,
        plan: Plan::default(),
    };
    p.run();
    p.plan
}

struct Planner<'a> {
    d: &'a Desired,
    h: &'a HostState,
    plan: Plan,
}

impl Planner<'_> {
    fn resource(&self) -> String {
        format!("GpuPartition/{}", self.d.partition.name)
    }

    fn push(&mut self, step: Step, why: impl Into<String>) {
        self.plan.steps.push(PlannedStep {
            step,
            why: why.into(),
        });
    }

    fn block(&mut self, resource: String, reason: &str, message: String) {
        self.plan.blockers.push(Blocker {
            resource,
            reason: reason.into(),
            message,
        });
    }

    fn run(&mut self) {
        let h = self.h;
        let targets = self.gpu_targets();
        // GPUs whose driver must change.
        let rebind: Vec<(&String, &GpuTarget)> = targets
            .iter()
            .filter(|(a, t)| {
                h.pci_devices.get(*a).and_then(|d| d.driver.as_deref()) != Some(t.driver.as_str())
            })
            .collect();
        let container_targets = self.container_targets(&targets);
        let server_units: BTreeSet<String> = self.d.servers.iter().map(|s| s.unit.key()).collect();

        // Containers that must stop: running, and their GPU lines change or a GPU they mount is rebound.
        let mut stop_containers: BTreeMap<u32, String> = BTreeMap::new();
        for (vmid, want) in &container_targets {
            let Some(c) = h.containers.get(vmid) else {
                continue;
            };
            if c.state != RunState::Running {
                continue;
            }
            if let Some(want) = want {
                if &c.gpu_mounts.minors != want {
                    stop_containers.insert(*vmid, format!("its GPU devices change ({}); device mounts apply only at container start", minors_diff(&c.gpu_mounts.minors, want)));
                }
            }
        }
        for (addr, t) in &rebind {
            let Some(minor) = h.pci_devices.get(*addr).and_then(|d| d.nvidia_minor) else {
                continue;
            };
            for (vmid, c) in &h.containers {
                if c.state == RunState::Running
                    && c.gpu_mounts.minors.contains(&minor)
                    && container_targets.contains_key(vmid)
                {
                    stop_containers
                        .entry(*vmid)
                        .or_insert_with(|| format!("it has GPU {addr} (/dev/nvidia{minor}), which moves to {} for slice {}", t.driver, t.slice));
                }
            }
        }

        // Companions in the GPUs' IOMMU groups move with them; foreign group members block passthrough.
        let (companions, shared) = companions::find(self.d, h);
        for msg in shared {
            self.block(self.resource(), "IommuGroupShared", msg);
        }
        let companion_moves: Vec<&companions::Companion> = companions
            .iter()
            .filter(|c| {
                let d = h.pci_devices.get(&c.address);
                let on_vfio = d.and_then(|d| d.driver.as_deref()) == Some("vfio-pci");
                let pinned = d.and_then(|d| d.driver_override.as_deref()) == Some("vfio-pci");
                // Returning: unbind from vfio-pci while still pinned, then clear and probe in one step.
                if c.to_vfio {
                    !on_vfio || !pinned
                } else {
                    on_vfio || d.is_some_and(|d| d.driver_override.is_some())
                }
            })
            .collect();
        // Everything that gets unbound: (address, where it goes, slice).
        let mut moving: Vec<(String, String, String)> = rebind
            .iter()
            .map(|(a, t)| ((*a).clone(), t.driver.to_string(), t.slice.clone()))
            .collect();
        for c in &companion_moves {
            let to = if c.to_vfio {
                "vfio-pci".to_string()
            } else {
                "its host driver".to_string()
            };
            moving.push((c.address.clone(), to, c.slice.clone()));
        }
        // Holders of devices to rebind: stoppable (our container / our host unit) or blocking.
        let mut stop_units: BTreeMap<String, (UnitRef, String)> = BTreeMap::new();
        for (addr, to, slice) in &moving {
            let Some(dev) = h.pci_devices.get(addr) else {
                continue;
            };
            if dev.driver.is_none() {
                continue;
            }
            for holder in &dev.holders {
                let ok = match (holder.container, holder.vm, &holder.unit) {
                    (Some(c), _, _) => stop_containers.contains_key(&c),
                    (None, None, Some(u)) => {
                        let r = UnitRef {
                            location: Location::Host,
                            name: u.clone(),
                        };
                        if server_units.contains(&r.key()) {
                            stop_units.insert(
                                r.key(),
                                (r, format!("it holds {addr}, which moves to {to}")),
                            );
                            true
                        } else {
                            false
                        }
                    }
                    _ => false,
                };
                if !ok {
                    let fix = if let Some(v) = holder.vm {
                        format!("stop VM {v} first (the agent never stops VMs)")
                    } else if let Some(c) = holder.container {
                        format!("container {c} is not a consumer in this partition; stop it or remove the GPU from it")
                    } else {
                        "stop that process first".to_string()
                    };
                    let msg = format!("{addr} must move from {} to {to} for slice {slice}, but {holder} holds it; {fix}", dev.driver.as_deref().unwrap_or("none"));
                    self.block(self.resource(), "GpuInUse", msg);
                }
            }
        }
        if !self.plan.blockers.is_empty() {
            return;
        }
        // Units inside containers that stop: stop them first, gracefully.
        for vmid in stop_containers.keys() {
            for (key, u) in &h.units {
                if key.starts_with(&format!("lxc-{vmid}/")) && u.is_active() {
                    if let Some(name) = key.split_once('/').map(|(_, n)| n.to_string()) {
                        let r = UnitRef {
                            location: Location::Container(*vmid),
                            name,
                        };
                        stop_units.insert(
                            r.key(),
                            (
                                r,
                                format!("container {vmid} must stop, so its server stops first"),
                            ),
                        );
                    }
                }
            }
        }
        for (_, (unit, why)) in std::mem::take(&mut stop_units) {
            self.push(Step::StopUnit { unit }, why);
        }
        for (vmid, why) in &stop_containers {
            self.push(
                Step::StopContainer { vmid: *vmid },
                format!("container {vmid} must stop: {why}"),
            );
        }

        // Drivers, overrides, rebinds.
        let needed: BTreeSet<&str> = rebind.iter().map(|(_, t)| t.driver.as_str()).collect();
        for driver in needed {
            if !h.pci_drivers.contains(driver) {
                self.push(
                    Step::LoadDriver {
                        driver: driver.into(),
                    },
                    format!("no PCI driver {driver} is registered, and GPUs must bind to it"),
                );
            }
        }
        for (addr, t) in &targets {
            let Some(dev) = h.pci_devices.get(addr) else {
                continue;
            };
            let wants_rebind = dev.driver.as_deref() != Some(t.driver.as_str());
            if dev.driver_override.as_deref() != Some(t.driver.as_str()) {
                let why = if wants_rebind {
                    format!("slice {} wants {}; driver_override makes the probe pick exactly this driver for this device (new_id would capture every GPU with the same ID)", t.slice, t.driver)
                } else {
                    format!(
                        "pins {addr} to {} for slice {}, so a VM start cannot take it",
                        t.driver, t.slice
                    )
                };
                self.push(
                    Step::SetDriverOverride {
                        address: addr.clone(),
                        driver: Some(t.driver.clone()),
                    },
                    why,
                );
            }
            if wants_rebind {
                if let Some(cur) = &dev.driver {
                    self.push(
                        Step::Unbind {
                            address: addr.clone(),
                            driver: cur.clone(),
                        },
                        format!(
                            "{addr} is bound to {cur}, slice {} wants {}",
                            t.slice, t.driver
                        ),
                    );
                }
                self.push(
                    Step::Probe {
                        address: addr.clone(),
                    },
                    format!("bind {addr} to {} through its driver_override", t.driver),
                );
            }
        }

        for c in companion_moves {
            self.plan_companion(c);
        }

        // PCI mappings.
        self.plan_mappings(&targets);

        // Container GPU lines. Minors are known only for GPUs bound to nvidia.
        let mut minors_pending = false;
        for (vmid, want) in &container_targets {
            let Some(c) = h.containers.get(vmid) else {
                self.block(
                    self.resource(),
                    "ConsumerNotFound",
                    format!(
                        "container {vmid} does not exist on {}; create it or fix consumer.lxc.vmid",
                        h.node_name
                    ),
                );
                continue;
            };
            match want {
                None => minors_pending = true,
                Some(want) if &c.gpu_mounts.minors != want => {
                    let why = format!(
                        "container {vmid} gets exactly its slice's GPUs: {}",
                        minors_diff(&c.gpu_mounts.minors, want)
                    );
                    self.push(
                        Step::SetContainerGpus {
                            vmid: *vmid,
                            minors: want.clone(),
                        },
                        why,
                    );
                }
                Some(_) => {}
            }
        }
        if minors_pending {
            self.plan.continues_after = Some("the GPUs are bound to nvidia: their device minors decide the container's device lines".into());
            return;
        }

        // Start consumer containers that we stop, or that host a server.
        let server_containers: BTreeSet<u32> = self
            .d
            .servers
            .iter()
            .filter_map(|s| match s.unit.location {
                Location::Container(v) => Some(v),
                Location::Host => None,
            })
            .collect();
        for vmid in container_targets.keys() {
            let Some(c) = h.containers.get(vmid) else {
                continue;
            };
            // A consumer container is kept running: it is what the slice's GPUs are for.
            let stopped_now = stop_containers.contains_key(vmid) || c.state != RunState::Running;
            if stopped_now {
                let why = if server_containers.contains(vmid) {
                    format!("container {vmid} has its GPUs in place and runs a server")
                } else {
                    format!("container {vmid} is a consumer of this partition and has its GPUs in place")
                };
                self.push(Step::StartContainer { vmid: *vmid }, why);
            }
        }
        let restarted: BTreeSet<u32> = container_targets
            .keys()
            .filter(|v| {
                stop_containers.contains_key(v)
                    || h.containers
                        .get(v)
                        .is_some_and(|c| c.state != RunState::Running)
            })
            .copied()
            .collect();
        let rebound: BTreeSet<String> = rebind.iter().map(|(a, _)| (*a).clone()).collect();
        let ctx = servers::Ctx {
            targets: &targets_driver(&targets),
            container_minors: &container_targets,
            restarted: &restarted,
            rebound: &rebound,
        };
        servers::plan_servers(self, &ctx);
    }

    /// Moves one companion: to vfio-pci with its GPU, or back to its host driver.
    fn plan_companion(&mut self, c: &companions::Companion) {
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

    /// Every partition GPU and the driver its slice wants.
    fn gpu_targets(&self) -> BTreeMap<String, GpuTarget> {
        let mut m = BTreeMap::new();
        for s in &self.d.partition.slices {
            for g in &s.gpus {
                m.insert(
                    g.clone(),
                    GpuTarget {
                        driver: self.d.partition.driver_name(s.driver).to_string(),
                        slice: s.name.clone(),
                    },
                );
            }
        }
        m
    }

    /// For each LXC consumer: the minors it must have, or `None` when some are unknown yet
    /// (the GPU is not bound to nvidia).
    fn container_targets(
        &self,
        targets: &BTreeMap<String, GpuTarget>,
    ) -> BTreeMap<u32, Option<BTreeSet<u32>>> {
        let mut m = BTreeMap::new();
        for s in &self.d.partition.slices {
            let Some(ResolvedConsumer::Lxc(vmid)) = &s.consumer else {
                continue;
            };
            let minors: Option<BTreeSet<u32>> = s
                .gpus
                .iter()
                .map(|g| {
                    let d = self.h.pci_devices.get(g)?;
                    let on_nvidia = d.driver.as_deref() == Some("nvidia")
                        && targets.get(g).is_some_and(|t| t.driver == "nvidia");
                    if on_nvidia {
                        d.nvidia_minor
                    } else {
                        None
                    }
                })
                .collect();
            m.insert(*vmid, minors);
        }
        m
    }

    fn plan_mappings(&mut self, targets: &BTreeMap<String, GpuTarget>) {
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

fn targets_driver(t: &BTreeMap<String, GpuTarget>) -> BTreeMap<String, String> {
    t.iter()
        .map(|(a, t)| (a.clone(), t.driver.clone()))
        .collect()
}

/// Map entries equal ignoring order of entries.
fn same_entries(a: &[MapEntry], b: &[MapEntry]) -> bool {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort();
    b.sort();
    a == b
}

fn minors_diff(have: &BTreeSet<u32>, want: &BTreeSet<u32>) -> String {
    let add: Vec<String> = want
        .difference(have)
        .map(|m| format!("+/dev/nvidia{m}"))
        .collect();
    let rm: Vec<String> = have
        .difference(want)
        .map(|m| format!("-/dev/nvidia{m}"))
        .collect();
    let all: Vec<String> = rm.into_iter().chain(add).collect();
    if all.is_empty() {
        "no change".into()
    } else {
        all.join(" ")
    }
}

#[cfg(test)]
mod tests;
