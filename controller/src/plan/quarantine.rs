//! The planner's side of the quarantine (`health/quarantine.rs` decides the records): the
//! desired state without the GPUs that are out, the stop of exactly the servers that use one,
//! their `GpuQuarantined` blockers, and the reset of a GPU whose record says so.
//!
//! What the rest of the planner then does with the view is what it does for any slice that
//! loses a GPU, touching only that slice's consumer: its container is stopped, loses exactly
//! that device node and starts again (LXC applies device lines only at start, so the slice's
//! other servers in it restart with it); its VM's PCI mapping loses that entry (a running VM
//! keeps the device until it stops, and the GPU is not reset under it). Every other slice,
//! server, container and VM is planned as before.
//!
//! # Guarantees
//! - A GPU out of its slice gets no step of its own but its reset, and the reset only when
//!   nothing uses it (no process, no running container that mounts it, no running VM that maps
//!   it), one GPU per plan, in the same step as the ledger that records it.
//! - Pure.

use super::{Blocker, Note, PlannedStep, Reason, Step};
use crate::desired::Desired;
use crate::health::quarantine::{Decision, Out};
use crate::host::model::HostState;
use crate::resource_key::ResourceKey;
use std::collections::BTreeMap;

/// `d` without the GPUs that are out, and the servers that use one either shrunk onto their
/// remaining GPUs ([`shrink`]) or gone; `None` when none is out.
pub(super) fn view(d: &Desired, h: &HostState, q: &Decision) -> Option<Desired> {
    if q.out.is_empty() {
        return None;
    }
    let mut v = d.clone();
    for s in &mut v.partition.slices {
        s.gpus.retain(|g| !q.out.contains_key(g));
    }
    v.servers = d
        .servers
        .iter()
        .filter_map(|s| match uses(&s.gpus, &q.out) {
            None => Some(s.clone()),
            Some(_) => shrink(d, h, s, q),
        })
        .collect();
    Some(v)
}

/// `s` on its GPUs that are not out, at the largest tensor-parallel size below its own that
/// divides it (the model's attention and KV heads divided the old size, so they divide this
/// one too) and that the remaining GPUs can give; `None` (it stops) unless its slice's admin
/// allows `servers.onGpuQuarantine: Shrink`, when no such size exists, or when the server's
/// preflight facts are not read or refuse that size (weights that no longer fit).
fn shrink(
    d: &Desired,
    h: &HostState,
    s: &crate::desired::DesiredServer,
    q: &Decision,
) -> Option<crate::desired::DesiredServer> {
    let allows = d
        .partition
        .slice(&s.spec.partition_ref.slice)
        .and_then(|sl| sl.servers.as_ref())
        .is_some_and(|p| p.on_gpu_quarantine == gpuplane_crds::OnGpuQuarantine::Shrink);
    if !allows {
        return None;
    }
    let left: Vec<String> = s
        .gpus
        .iter()
        .filter(|g| !q.out.contains_key(*g))
        .cloned()
        .collect();
    let tp = s.spec.tensor_parallel_size;
    let to = (1..tp)
        .rev()
        .find(|t| tp.is_multiple_of(*t) && (*t as usize) <= left.len())?;
    let mut small = s.clone();
    small.gpus = left.into_iter().take(to as usize).collect();
    small.spec.tensor_parallel_size = to;
    // Only a size the server's preflight read and accepts (weights per GPU, heads): facts not
    // read yet (its container is stopped for the device change) stop it first; the next plan,
    // with the container running and the facts read, starts it shrunk.
    let accepted = h.preflight.get(&s.id).is_some_and(|f| {
        crate::desired::preflight::judge(&small, f)
            .problems
            .is_empty()
    });
    accepted.then_some(small)
}

/// The servers of `d` that [`view`] shrank, by id, with their size now.
fn shrunk<'a>(d: &'a Desired, v: Option<&'a Desired>) -> impl Iterator<Item = (&'a str, u32)> {
    v.into_iter().flat_map(move |v| {
        v.servers.iter().filter_map(move |s| {
            d.servers
                .iter()
                .find(|o| {
                    o.id == s.id && o.spec.tensor_parallel_size != s.spec.tensor_parallel_size
                })
                .map(|_| (s.id.as_str(), s.spec.tensor_parallel_size))
        })
    })
}

/// The first GPU of `gpus` that is out, with its record.
fn uses<'a>(gpus: &'a [String], out: &'a BTreeMap<String, Out>) -> Option<(&'a str, &'a Out)> {
    gpus.iter()
        .find_map(|g| out.get(g).map(|o| (g.as_str(), o)))
}

/// For each server of `d` on a GPU that is out: shrunk (in `v`, the view), a note that says so;
/// else its unit's stop (while active) and its blocker.
pub(super) fn consumers(
    d: &Desired,
    v: Option<&Desired>,
    h: &HostState,
    q: &Decision,
) -> (Vec<PlannedStep>, Vec<Blocker>, Vec<Note>) {
    let mut steps = vec![];
    let mut blockers = vec![];
    let small: BTreeMap<&str, u32> = shrunk(d, v).collect();
    let mut notes = vec![];
    for s in &d.servers {
        let Some((addr, o)) = uses(&s.gpus, &q.out) else {
            continue;
        };
        if let Some(tp) = small.get(s.id.as_str()) {
            notes.push(Note {
                resource: ResourceKey::server_id(&s.id),
                reason: Reason::ShrunkForQuarantine,
                message: format!(
                    "GPU {addr} of slice {} is quarantined ({}); the slice allows servers.onGpuQuarantine: Shrink: the server serves on {tp} GPUs at tensor-parallel size {tp} (its spec: {}) until the GPU rejoins",
                    o.slice,
                    first(o),
                    s.spec.tensor_parallel_size
                ),
            });
            continue;
        }
        let what = format!("GPU {addr} of slice {} is quarantined", o.slice);
        if h.unit(&s.unit).is_some_and(|u| u.is_active()) {
            steps.push(PlannedStep {
                step: Step::StopUnit {
                    unit: s.unit.clone(),
                },
                why: format!("{what} ({}): only its server stops", first(o)),
            });
        }
        blockers.push(Blocker {
            resource: ResourceKey::server_id(&s.id),
            reason: Reason::GpuQuarantined,
            message: message(addr, o, d.partition.reboot.is_auto()),
        });
    }
    (steps, blockers, notes)
}

/// The reset the decision calls for (at most one per plan), as a step that also stores the
/// ledger recording it.
pub(super) fn reset(q: &Decision) -> Option<PlannedStep> {
    let (a, ledger) = (q.reset.as_ref()?, q.ledger.clone()?);
    Some(PlannedStep {
        why: format!(
            "GPU {a} is quarantined and its evidence calls for a reset; nothing uses it: reset its function only, then prove it"
        ),
        step: Step::ResetGpu {
            address: a.clone(),
            ledger,
        },
    })
}

/// Under `spec.host.reboot: Auto` with its gate open (`RebootGate::Now`): the reboot of the
/// node for a GPU whose quarantine escalated with evidence that calls for one (it does not
/// answer, it fell off the bus), once — only while the stored record is of this boot, so a GPU
/// still sick after the reboot waits for a person. The partition's servers and containers stop
/// first (`kernel_args::reboot_steps`, as for the kernel arguments); the disruption gate asks
/// the pool for a slot before the first of them.
pub(super) fn reboot(d: &Desired, h: &HostState, q: &Decision) -> Option<Vec<PlannedStep>> {
    let crate::desired::reboot::RebootGate::Now(by) = &d.partition.reboot else {
        return None;
    };
    let stored = |a: &str| {
        h.gpu_ledger
            .as_ref()?
            .gpus
            .iter()
            .find(|g| g.address == a)?
            .quarantine
            .clone()
    };
    let (addr, o) = q.out.iter().find(|(a, o)| {
        let r = &o.record;
        r.stage == gpuplane_crds::QuarantineStage::Escalated
            && r.repair == Some(gpuplane_crds::GpuRepair::RebootNode)
            && r.boot_id.is_some()
            && r.boot_id == h.boot.boot_id
            && stored(a).as_ref() == Some(r)
    })?;
    super::kernel_args::reboot_steps(
        d,
        h,
        by,
        format!(
            "GPU {addr} of slice {} is quarantined and its evidence calls for a reboot of the node ({}); reboot: Auto, {by}: the reboot is its repair, once (a GPU still sick after it waits for a person)",
            o.slice,
            first(o)
        ),
    )
}

/// The server's blocker message: which GPU, since when, for what, and the way out.
fn message(addr: &str, o: &Out, auto_reboot: bool) -> String {
    let r = &o.record;
    let since = if r.since.is_empty() {
        String::new()
    } else {
        format!(" since {}", r.since)
    };
    let next = match r.stage {
        gpuplane_crds::QuarantineStage::Quarantined => "the agent resets it once nothing uses it, where spec.health allows, or a person repairs it".to_string(),
        gpuplane_crds::QuarantineStage::Reset => "the agent reset it and proves it now".to_string(),
        gpuplane_crds::QuarantineStage::Escalated
            if auto_reboot && o.record.repair == Some(gpuplane_crds::GpuRepair::RebootNode) =>
        {
            "the agent reboots the node once (spec.host.reboot: Auto) when its gate opens; a GPU still sick after it waits for a person".to_string()
        }
        gpuplane_crds::QuarantineStage::Escalated => format!(
            "it needs a person: {} (board: {})",
            match o.repair.or(r.repair) {
                Some(gpuplane_crds::GpuRepair::RebootNode) => "reboot the node",
                Some(gpuplane_crds::GpuRepair::ContactSupport) => "contact NVIDIA's support or replace the board",
                _ => "repair the board",
            },
            o.board
        ),
    };
    crate::text::sanitize(
        &format!(
            "GPU {addr} of slice {} is quarantined{since} ({:?}: {}); this server is stopped, every other server keeps running. Next: {next}. It starts again when the GPU rejoins its slice: after the agent's reset, or when the admin annotates the partition {}={}",
            o.slice,
            r.stage,
            first(o),
            crate::layout::ACCEPT_HEALTH_ANNOTATION,
            r.hash
        ),
        1000,
    )
}

fn first(o: &Out) -> &str {
    o.record.evidence.first().map_or("-", String::as_str)
}

#[cfg(test)]
mod tests;
