//! Which steps disrupt a host's users: what a pool member needs a disruption slot for
//! (`GpuNodePool`, ARCHITECTURE.md "Disruption budget").
//!
//! A step disrupts when it stops a server (a running unit stopped, removed or restarted), stops
//! a running container, reboots the host, or takes a GPU from its driver while a process, a container's config or
//! a VM uses it. Everything else (writing a unit file, starting what is stopped, binding a free
//! GPU, a ledger or mapping write, a probe) does not.
//!
//! # Guarantees
//! - Pure: the step and the host as observed decide; the same answer in the planner's tests,
//!   the converge loop's gate and the agent's decision to ask for a slot.
//! - When in doubt it says "disruptive": a GPU leaving its driver counts when anything at all
//!   is known to use it.

use crate::host::model::{HostState, RunState};
use crate::step::Step;

use super::Plan;

/// Why `step` disrupts the host's users as `host` stands, or `None` when it does not.
pub fn disruption(step: &Step, host: &HostState) -> Option<String> {
    match step {
        Step::StopUnit { unit } | Step::RemoveUnit { unit } => host
            .unit(unit)
            .filter(|u| u.is_active())
            .map(|_| format!("stops the server unit {unit}")),
        Step::StartUnit {
            unit,
            restart: true,
        } => host
            .unit(unit)
            .filter(|u| u.is_active())
            .map(|_| format!("restarts the server unit {unit}")),
        Step::StopContainer { vmid } => host
            .containers
            .get(vmid)
            .filter(|c| c.state == RunState::Running)
            .map(|_| format!("stops container {vmid}")),
        Step::Unbind { address, .. } | Step::ReturnToHostDriver { address } => {
            gpu_in_use(host, address).map(|who| format!("takes GPU {address} from {who}"))
        }
        Step::Reboot { .. } => {
            Some("reboots the host for spec.host.kernelArgs (reboot: Auto)".into())
        }
        _ => None,
    }
}

/// The first step of `plan` that disrupts, with why.
pub fn first_disruption(plan: &Plan, host: &HostState) -> Option<(String, String)> {
    plan.steps
        .iter()
        .find_map(|s| disruption(&s.step, host).map(|why| (s.step.to_string(), why)))
}

/// Who uses the GPU at `address`: a process holding it, a container whose config gives it, a
/// VM whose mapping names it.
pub(super) fn gpu_in_use(host: &HostState, address: &str) -> Option<String> {
    let dev = host.pci_devices.get(address)?;
    dev.driver.as_ref()?;
    if let Some(h) = dev.holders.first() {
        return Some(format!("process {} ({})", h.pid, h.command));
    }
    if let Some(minor) = dev.nvidia_minor {
        if let Some(c) = host
            .containers
            .values()
            .find(|c| c.gpu_mounts.minors.contains(&minor))
        {
            return Some(format!("container {}", c.vmid));
        }
    }
    let mapped: Vec<&String> = host
        .pci_mappings
        .iter()
        .filter(|(_, entries)| {
            entries
                .iter()
                .any(|e| e.paths.iter().any(|p| same_address(p, address)))
        })
        .map(|(name, _)| name)
        .collect();
    host.vms
        .values()
        .find(|vm| {
            vm.state == RunState::Running && vm.pci_mappings.iter().any(|m| mapped.contains(&m))
        })
        .map(|vm| format!("VM {}", vm.vmid))
}

/// Whether two PCI addresses are the same, in full or short (domain 0000) form.
fn same_address(a: &str, b: &str) -> bool {
    let short = |s: &str| s.strip_prefix("0000:").unwrap_or(s).to_ascii_lowercase();
    short(a) == short(b)
}

#[cfg(test)]
mod tests;
