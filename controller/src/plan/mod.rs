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
//!   is half-changed — but for the narrowing writes a layout stall allows (a stalled slice's
//!   container config loses the lines that now name a GPU it does not own,
//!   `stalled_containers.rs`), which come first in any plan.
//! - When a server the plan would stop, rebind or restart failed preflight (`preflight.rs`),
//!   the plan has no steps at all: the old server keeps serving.
//! - When later steps depend on an earlier step's outcome (device minors after binding to
//!   `nvidia`, the P2P probe's result), the plan ends there and says so in `continues_after`;
//!   the converge loop re-observes and re-plans.
//! - Kernel arguments (`kernel_args.rs`): the bootloader's config is edited and refreshed first
//!   in a plan nothing else blocks; while a reboot is pending the partition carries a
//!   `RebootRequired` blocker and its `vfio-pci` slices that still have GPUs to bind wait, while
//!   the rest of the plan goes on.

mod binding;
pub mod companions;
mod containers;
pub mod disruption;
mod holders;
pub mod kernel_args;
pub mod layout_guard;
mod mappings;
mod occupants;
mod output;
mod preflight;
mod quarantine;
pub mod servers;
mod stalled_containers;

pub use crate::step::Step;
pub use gpuplane_crds::reason::Reason;
pub use output::{Blocker, Note, Plan, PlannedStep};

use crate::desired::Desired;
use crate::host::model::{HostState, RunState};
use std::collections::{BTreeMap, BTreeSet};

/// Target of one GPU.
#[derive(Debug, Clone)]
struct GpuTarget {
    driver: String,
    slice: String,
}

/// Plans the steps from `host` to `desired`.
///
/// The layout guard (`layout/guard.rs`) decides first: slices it freezes are planned as if
/// they were not there (nothing for their GPUs, consumer or servers) and reported as blockers;
/// GPUs of unknown identity bound for a VM go to the host driver first. The ledger write, when
/// due, is the plan's first step (so identities are recorded while the GPUs are still on
/// `nvidia`), and only in a plan nothing else blocks.
pub fn plan(desired: &Desired, host: &HostState) -> Plan {
    let mut verdict = layout_guard::check(&desired.partition, host);
    let mut q = health_decision(desired, host, verdict.next.take());
    let narrowing = stalled_containers::narrow(&desired.partition, host, &verdict);
    let view = layout_view(desired, &verdict);
    let d = view.as_ref().unwrap_or(desired);
    let q_view = quarantine::view(d, host, &q);
    let (q_stops, q_blockers, q_notes) = quarantine::consumers(d, q_view.as_ref(), host, &q);
    let d = q_view.as_ref().unwrap_or(d);
    let boot = kernel_args::check(d, host);
    let boot_view = without_slices(d, &boot.frozen);
    let d = boot_view.as_ref().unwrap_or(d);
    let mut p = Planner {
        d,
        h: host,
        plan: Plan::default(),
        known: verdict.known.take(),
    };
    p.run();
    preflight::gate(d, host, &mut p.plan);
    let res = crate::resource_key::ResourceKey::partition(desired.partition.name.as_str());
    // The quarantine's steps come first: they only take a sick GPU from its one consumer. A
    // reset stores the ledger itself (with its record), so no separate write precedes it.
    let mut first = q_stops;
    let clear = p.plan.blockers.is_empty();
    match quarantine::reset(&q) {
        Some(r) if clear || verdict.write.is_none() => first.push(r),
        Some(_) => {}
        None => {
            if let Some(w) = ledger_write(host, verdict.write, &mut q, clear) {
                first.insert(0, w);
            }
        }
    }
    let n_first = first.len();
    p.plan.steps.splice(0..0, first);
    if p.plan.blockers.is_empty() && !boot.steps.is_empty() {
        p.plan.steps.splice(n_first..n_first, boot.steps);
    }
    for s in verdict.stalls {
        p.plan.blockers.push(Blocker {
            resource: res.clone(),
            reason: s.reason,
            message: s.message,
        });
    }
    p.plan.blockers.extend(boot.blockers);
    if let Some(steps) = boot
        .reboot
        .or_else(|| quarantine::reboot(desired, host, &q))
    {
        // reboot: Auto reboots now: nothing else starts in a boot that is about to end.
        p.plan.steps = steps;
        p.plan.continues_after = None;
    }
    // A stalled slice's container loses the lines that now name a GPU it does not own: first,
    // whatever else is planned (a reboot included), as it only narrows.
    p.plan.steps.splice(0..0, narrowing);
    p.plan.blockers.extend(q_blockers);
    p.plan.notes.extend(q_notes);
    p.plan
}

/// The quarantine's decision on the ledger the guard made (`health/quarantine.rs`).
fn health_decision(
    desired: &Desired,
    host: &HostState,
    next: Option<crate::host::ledger::Ledger>,
) -> crate::health::quarantine::Decision {
    let Some(t) = &desired.partition.layout else {
        return Default::default();
    };
    let in_use =
        |a: &str| disruption::gpu_in_use(host, a).is_some() || in_running_vm(desired, host, a);
    crate::health::quarantine::decide(t, host, next, &in_use)
}

/// Whether the GPU at `a`, on `vfio-pci`, belongs by the spec to a slice whose VM runs: qemu
/// attached it at the VM's start and keeps it whatever the mapping says now.
fn in_running_vm(desired: &Desired, host: &HostState, a: &str) -> bool {
    let on_vfio = host
        .pci_devices
        .get(a)
        .is_some_and(|d| d.driver.as_deref() == Some("vfio-pci"));
    on_vfio
        && desired.partition.slices.iter().any(|s| {
            s.gpus.iter().any(|g| g == a)
                && matches!(&s.consumer, Some(crate::desired::ResolvedConsumer::Vm { vmid, .. })
                    if host.vms.get(vmid).is_some_and(|vm| vm.state == RunState::Running))
        })
}

/// The ledger write this plan makes first, if any: the guard's (only in a plan nothing else
/// blocks, `clear`) with the quarantine's records, or the records alone when they are all that
/// changed (a quarantine is recorded whatever else waits). The step takes `q`'s ledger (nothing
/// after it reads that ledger: no reset is planned when this is asked, and `quarantine::reboot`
/// reads the host's ledger and `q.out`).
fn ledger_write(
    host: &HostState,
    guard: Option<String>,
    q: &mut crate::health::quarantine::Decision,
    clear: bool,
) -> Option<PlannedStep> {
    let records = q.changes.join("; ");
    let why = match (guard, &q.ledger) {
        (Some(why), Some(_)) if clear => join(why, &records),
        (Some(_), _) => return None,
        (None, Some(_)) if !q.changes.is_empty() => format!("GPU health: {records}"),
        _ => return None,
    };
    let ledger = q.ledger.take()?;
    let same = host
        .gpu_ledger
        .as_ref()
        .is_some_and(|old| old.same_stored(&ledger));
    (!same).then_some(PlannedStep {
        step: Step::WriteLedger { ledger },
        why,
    })
}

fn join(why: String, records: &str) -> String {
    if records.is_empty() {
        why
    } else {
        format!("{why}; GPU health: {records}")
    }
}

/// `desired` without the slices `frozen` (and their servers); `None` when there are none.
fn without_slices(d: &Desired, frozen: &BTreeSet<String>) -> Option<Desired> {
    if frozen.is_empty() {
        return None;
    }
    let mut d = d.clone();
    d.partition.slices.retain(|s| !frozen.contains(&s.name));
    d.servers
        .retain(|s| !frozen.contains(&s.spec.partition_ref.slice));
    Some(d)
}

/// `desired` without the slices the guard froze (and their servers), and with the GPUs to
/// identify first moved to a slice of the host driver; `None` when the guard changes nothing.
fn layout_view(desired: &Desired, v: &layout_guard::Verdict) -> Option<Desired> {
    if v.stalls.is_empty() && v.identify_first.is_empty() {
        return None;
    }
    let mut d = desired.clone();
    d.partition.slices.retain(|s| !v.frozen(&s.name));
    d.servers.retain(|s| !v.frozen(&s.spec.partition_ref.slice));
    if !v.identify_first.is_empty() {
        for s in &mut d.partition.slices {
            s.gpus.retain(|g| !v.identify_first.contains_key(g));
        }
        d.partition.slices.push(crate::desired::ResolvedSlice {
            name: "(identify)".into(),
            gpus: v.identify_first.keys().cloned().collect(),
            driver: gpuplane_crds::GpuDriver::Nvidia,
            consumer: None,
            servers: None,
        });
    }
    Some(d)
}

struct Planner<'a> {
    d: &'a Desired,
    h: &'a HostState,
    plan: Plan,
    /// The GPUs' identities as the layout guard knew them (`None`: no layout terms).
    known: Option<crate::layout::matching::Known<'a>>,
}

impl Planner<'_> {
    fn resource(&self) -> crate::resource_key::ResourceKey {
        crate::resource_key::ResourceKey::partition(self.d.partition.name.as_str())
    }

    fn push(&mut self, step: Step, why: impl Into<String>) {
        self.plan.steps.push(PlannedStep {
            step,
            why: why.into(),
        });
    }

    fn block(
        &mut self,
        resource: crate::resource_key::ResourceKey,
        reason: Reason,
        message: String,
    ) {
        self.plan.blockers.push(Blocker {
            resource,
            reason,
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
        let stop_containers = self.containers_to_stop(&container_targets, &rebind);

        // Companions in the GPUs' IOMMU groups move with them; foreign group members block passthrough.
        // The host's devices by IOMMU group, once a plan (the companions and the mapping paths).
        let groups = h.by_iommu_group();
        let (companions, shared) = companions::find(self.d, h, &groups);
        for msg in shared {
            self.block(self.resource(), Reason::IommuGroupShared, msg);
        }
        let companion_moves: Vec<&companions::Companion> =
            companions.iter().filter(|c| c.must_move(h)).collect();
        // Everything that gets unbound: (address, where it goes, slice).
        let mut moving: Vec<(&str, &str, &str)> = rebind
            .iter()
            .map(|(a, t)| (a.as_str(), t.driver.as_str(), t.slice.as_str()))
            .collect();
        for c in &companion_moves {
            let to = if c.to_vfio {
                "vfio-pci"
            } else {
                "its host driver"
            };
            moving.push((c.address.as_str(), to, c.slice.as_str()));
        }
        let mut stop_units = self.check_holders(&moving, &stop_containers);
        if !self.plan.blockers.is_empty() {
            // Nothing is half-changed: a refusal plans no step at all.
            return;
        }
        self.stop_units_in(&stop_containers, &mut stop_units);
        for (_, (unit, why)) in stop_units {
            self.push(Step::StopUnit { unit }, why);
        }
        for (vmid, why) in &stop_containers {
            self.push(
                Step::StopContainer { vmid: *vmid },
                format!("container {vmid} must stop: {why}"),
            );
        }
        self.plan_bindings(&targets, &rebind);
        for c in companion_moves {
            self.plan_companion(c);
        }
        self.plan_mappings(&targets, &groups);
        if self.plan_container_lines(&container_targets) {
            self.plan.continues_after =
                Some("the GPUs are bound to nvidia: their device minors decide the container's device lines".into());
            return;
        }
        self.plan_container_starts(&container_targets, &stop_containers);
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
        let ctx = servers::AfterPartition {
            targets: &targets_driver(&targets),
            container_minors: &container_targets,
            restarted: &restarted,
            rebound: &rebound,
        };
        servers::plan_servers(self, &ctx);
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
}

fn targets_driver(t: &BTreeMap<String, GpuTarget>) -> BTreeMap<String, String> {
    t.iter()
        .map(|(a, t)| (a.clone(), t.driver.clone()))
        .collect()
}

#[cfg(test)]
mod tests;
