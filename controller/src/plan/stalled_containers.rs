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
use crate::host::ledger::{Ledger, LedgerGpu};
use crate::host::model::{HostState, PciDevice};
use crate::layout::matching::{match_gpus, Matching};
use crate::proxmox::lxc_conf::NVIDIA_MAJOR;
use std::collections::BTreeSet;

/// The writes that narrow each frozen LXC slice's container to the GPUs the ledger gave it.
pub(super) fn narrow(d: &DesiredPartition, host: &HostState, v: &Verdict) -> Vec<PlannedStep> {
    let mut out = Vec::new();
    // Matched once, and only when some slice is frozen (`plan()` runs on every step).
    let mut bus: Option<Bus> = None;
    for s in d.slices.iter().filter(|s| v.frozen(&s.name)) {
        let Some(ResolvedConsumer::Lxc(vmid)) = s.consumer else {
            continue;
        };
        let Some(c) = host.containers.get(&vmid) else {
            continue;
        };
        let bus = bus.get_or_insert_with(|| Bus::new(d, host));
        let have = &c.gpu_mounts.minors;
        let keep: BTreeSet<u32> = have
            .iter()
            .copied()
            .filter(|m| bus.owned_by(*m, &s.name))
            .collect();
        let any_minor = c.gpu_mounts.cgroup_allow_any_minor.contains(&NVIDIA_MAJOR);
        if &keep == have && !any_minor {
            continue;
        }
        let dropped: Vec<String> = have
            .difference(&keep)
            .map(|m| format!("/dev/nvidia{m} ({})", bus.describe(*m)))
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

/// The GPUs on the bus, matched once against this partition's ledger: which physical GPU each
/// NVIDIA minor names now.
struct Bus<'a> {
    /// The ledger and its matching; `None`: no ledger of this partition (nothing vouches for
    /// any line).
    ledger: Option<(&'a Ledger, Matching)>,
    observed: Vec<&'a PciDevice>,
    host_driver: &'a str,
}

impl<'a> Bus<'a> {
    fn new(d: &'a DesiredPartition, host: &'a HostState) -> Bus<'a> {
        let vendor = d.layout.as_ref().map(|t| t.gpu_vendor.as_str());
        let observed: Vec<_> = vendor.map(|v| host.gpus(v).collect()).unwrap_or_default();
        let ledger = vendor
            .and(host.gpu_ledger.as_ref())
            .filter(|l| l.partition == d.name)
            .map(|l| (l, match_gpus(l, &observed)));
        Bus {
            ledger,
            observed,
            host_driver: &d.host_driver,
        }
    }

    /// The GPU at `minor` now, and the ledger's entry for it when it is the same physical GPU.
    fn at(&self, minor: u32) -> (Option<&'a PciDevice>, Option<&'a LedgerGpu>) {
        let g = self
            .observed
            .iter()
            .copied()
            .find(|g| g.nvidia_minor == Some(minor));
        let l = self.ledger.as_ref().and_then(|(l, m)| {
            let li = m.was(&g?.address)?;
            Some(&l.gpus[li])
        });
        (g, l)
    }

    /// Whether `minor` names, on the host driver, a GPU the ledger gave `slice`.
    fn owned_by(&self, minor: u32, slice: &str) -> bool {
        match self.at(minor) {
            (Some(g), Some(l)) => {
                g.driver.as_deref() == Some(self.host_driver) && l.owner.as_deref() == Some(slice)
            }
            _ => false,
        }
    }

    /// What `/dev/nvidia<minor>` is now, for the step's reason.
    fn describe(&self, minor: u32) -> String {
        if self.ledger.is_none() {
            return "no ledger vouches for it".into();
        }
        match self.at(minor) {
            (None, _) => "no GPU has this minor now".into(),
            (Some(g), Some(l)) => match &l.owner {
                Some(o) => format!("now GPU {} of slice {o}", g.address),
                None => format!("now GPU {}, in no slice", g.address),
            },
            (Some(g), None) => format!("now GPU {}, not one this slice had", g.address),
        }
    }
}

#[cfg(test)]
mod tests;
