//! The container of a slice the layout guard froze keeps only the device lines of GPUs the
//! ledger gave that slice, matched by identity, not by minor.
//!
//! Why: a boot numbers the NVIDIA minors in probe order. After a GPU is removed, replaced or
//! moved, `/dev/nvidia1` in a stalled slice's container config may now be another slice's GPU
//! (whose own container is rewritten to the same minor) or an unverified board. Proxmox's
//! `onboot`, or a person, starting that container would hand it a GPU it does not own. Taking
//! such lines out (device lines of both styles, `devN:` entries and the cgroup allow lines:
//! [`Step::SetContainerGpus`] writes them as one set) is the one container write a stall
//! allows, as it only narrows what the container may open; the same rule `mappings.rs` applies
//! to a stalled VM slice's PCI mapping. A device-cgroup line that allows every NVIDIA minor
//! (`c 195:* rwm`) is narrowed too.
//!
//! # Caveats
//! - A container already running keeps the devices it started with until it stops: the stall
//!   message says so; the agent does not stop a stalled slice's container on its own.
//! - A minor that names no GPU now is taken out too (the next boot may give it to anyone).
//!
//! Pure.

use super::layout_guard::Verdict;
use super::{PlannedStep, Step};
use crate::desired::{DesiredPartition, ResolvedConsumer};
use crate::host::model::HostState;
use crate::layout::matching::match_gpus;
use crate::proxmox::lxc_conf::NVIDIA_MAJOR;
use std::collections::BTreeSet;

/// The writes that narrow each frozen LXC slice's container to the GPUs the ledger gave it.
pub(super) fn narrow(d: &DesiredPartition, host: &HostState, v: &Verdict) -> Vec<PlannedStep> {
    let mut out = Vec::new();
    for s in d.slices.iter().filter(|s| v.frozen(&s.name)) {
        let Some(ResolvedConsumer::Lxc(vmid)) = s.consumer else {
            continue;
        };
        let Some(c) = host.containers.get(&vmid) else {
            continue;
        };
        let have = &c.gpu_mounts.minors;
        let keep = own_minors(d, host, &s.name, have);
        let any_minor = c.gpu_mounts.cgroup_allow_any_minor.contains(&NVIDIA_MAJOR);
        if &keep == have && !any_minor {
            continue;
        }
        let dropped: Vec<String> = have
            .difference(&keep)
            .map(|m| format!("/dev/nvidia{m} ({})", now_at(d, host, *m)))
            .collect();
        let mut why = format!(
            "slice {} is stalled: container {vmid} keeps only the GPUs the ledger gave it",
            s.name
        );
        if !dropped.is_empty() {
            why.push_str(&format!("; removed {}", dropped.join(", ")));
        }
        if any_minor {
            why.push_str("; its device cgroup no longer allows every GPU (c 195:* rwm)");
        }
        if c.state == crate::host::model::RunState::Running && !dropped.is_empty() {
            why.push_str(" (the running container keeps its devices until it stops)");
        }
        out.push(PlannedStep {
            step: Step::SetContainerGpus { vmid, minors: keep },
            why,
        });
    }
    out
}

/// The minors of `have` whose GPU now is one the ledger gave `slice` (the same physical GPU by
/// the ledger's matching, on the host driver).
fn own_minors(
    d: &DesiredPartition,
    host: &HostState,
    slice: &str,
    have: &BTreeSet<u32>,
) -> BTreeSet<u32> {
    let Some((ledger, m, observed)) = matched(d, host) else {
        // No ledger of this partition: nothing proves any line right.
        return BTreeSet::new();
    };
    have.iter()
        .copied()
        .filter(|minor| {
            observed
                .iter()
                .find(|g| {
                    g.nvidia_minor == Some(*minor) && g.driver.as_deref() == Some(&d.host_driver)
                })
                .and_then(|g| m.was(&g.address))
                .is_some_and(|li| ledger.gpus[li].owner.as_deref() == Some(slice))
        })
        .collect()
}

type Matched<'a> = (
    &'a crate::host::ledger::Ledger,
    crate::layout::matching::Matching,
    Vec<&'a crate::host::model::PciDevice>,
);

/// The ledger of this partition matched against the GPUs on the bus.
fn matched<'a>(d: &'a DesiredPartition, host: &'a HostState) -> Option<Matched<'a>> {
    let vendor = d.layout.as_ref()?.gpu_vendor.as_str();
    let ledger = host.gpu_ledger.as_ref().filter(|l| l.partition == d.name)?;
    let observed: Vec<_> = host.gpus(vendor).collect();
    let m = match_gpus(ledger, &observed);
    Some((ledger, m, observed))
}

/// What `/dev/nvidia<minor>` is now, for the step's reason.
fn now_at(d: &DesiredPartition, host: &HostState, minor: u32) -> String {
    let Some((ledger, m, observed)) = matched(d, host) else {
        return "no ledger vouches for it".into();
    };
    let Some(g) = observed.iter().find(|g| g.nvidia_minor == Some(minor)) else {
        return "no GPU has this minor now".into();
    };
    match m.was(&g.address).map(|li| &ledger.gpus[li]) {
        Some(l) => match &l.owner {
            Some(o) => format!("now GPU {} of slice {o}", g.address),
            None => format!("now GPU {}, in no slice", g.address),
        },
        None => format!("now GPU {}, not one this slice had", g.address),
    }
}

#[cfg(test)]
mod tests;
