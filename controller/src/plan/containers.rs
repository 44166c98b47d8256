//! LXC consumers: which containers must stop (their GPU lines change, or a GPU they mount is
//! rebound), their device lines, and starting them again once their GPUs are in place.

use super::{GpuTarget, Planner, Reason, Step};
use crate::desired::ResolvedConsumer;
use crate::host::model::{Location, RunState};
use std::collections::{BTreeMap, BTreeSet};

impl Planner<'_> {
    /// For each LXC consumer: the minors it must have, or `None` when some are unknown yet
    /// (the GPU is not bound to the host's GPU driver).
    ///
    /// The driver compared is the partition's host driver (`driver: nvidia` resolves to it:
    /// `nvidia` on a real host, the stand-in's DRM driver in the qemu test host), never the
    /// literal word, so a host whose NVIDIA driver has another module name still mounts its GPUs.
    pub(super) fn container_targets(
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
                    let host = self.d.partition.host_driver.as_str();
                    let on_host_driver = d.driver.as_deref() == Some(host)
                        && targets.get(g).is_some_and(|t| t.driver == host);
                    if on_host_driver {
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

    /// Running consumer containers that must stop, with why.
    pub(super) fn containers_to_stop(
        &self,
        container_targets: &BTreeMap<u32, Option<BTreeSet<u32>>>,
        rebind: &[(&String, &GpuTarget)],
    ) -> BTreeMap<u32, String> {
        let h = self.h;
        let mut stop_containers: BTreeMap<u32, String> = BTreeMap::new();
        for (vmid, want) in container_targets {
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
        for (addr, t) in rebind {
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

        stop_containers
    }

    /// Device lines of each consumer. Returns `true` when some minors are not known yet (the GPU
    /// is not bound to nvidia), so the plan must stop here.
    pub(super) fn plan_container_lines(
        &mut self,
        container_targets: &BTreeMap<u32, Option<BTreeSet<u32>>>,
    ) -> bool {
        let h = self.h;
        let mut minors_pending = false;
        for (vmid, want) in container_targets {
            let Some(c) = h.containers.get(vmid) else {
                self.block(
                    self.resource(),
                    Reason::ConsumerNotFound,
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
                Some(want)
                    if c.gpu_mounts
                        .cgroup_allow_any_minor
                        .contains(&crate::proxmox::lxc_conf::NVIDIA_MAJOR) =>
                {
                    // Least privilege: `c 195:* rwm` lets the container open every GPU of the
                    // host through a node it makes itself. A write only: the running container
                    // keeps its device cgroup until its next start, and is not restarted for this.
                    let why = format!("container {vmid}'s device cgroup allows every GPU of the host (c 195:* rwm); narrowed to its slice's GPUs (from its next start)");
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
        minors_pending
    }

    /// Consumer containers are kept running: start those that are (or will be) stopped.
    pub(super) fn plan_container_starts(
        &mut self,
        container_targets: &BTreeMap<u32, Option<BTreeSet<u32>>>,
        stop_containers: &BTreeMap<u32, String>,
    ) {
        let h = self.h;
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
    }
}

/// `-/dev/nvidia4 +/dev/nvidia0`: the device lines a container loses, then those it gains (or
/// `no change`), for a step's reason. Written into one buffer (it is made twice a plan per
/// container that changes).
pub(super) fn minors_diff(have: &BTreeSet<u32>, want: &BTreeSet<u32>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let rm = have.difference(want).map(|m| ('-', m));
    let add = want.difference(have).map(|m| ('+', m));
    for (sign, m) in rm.chain(add) {
        if !out.is_empty() {
            out.push(' ');
        }
        // Writing to a String cannot fail.
        let _ = write!(out, "{sign}/dev/nvidia{m}");
    }
    if out.is_empty() {
        out.push_str("no change");
    }
    out
}
