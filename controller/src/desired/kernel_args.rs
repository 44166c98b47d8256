//! `spec.host` of a partition: its kernel arguments and its reboot policy, checked strictly
//! (issue 25, part 3). Every rule here depends on the spec alone, so the admission webhook
//! refuses the same things the agent does.
//!
//! # Rules
//! - each argument is one word the agent can write without quoting
//!   ([`crate::bootloader::check_arg`]); at most [`KERNEL_ARGS_MAX`] in all;
//! - no argument is listed twice, nor both `present` and `absent`;
//! - `reboot: Auto` needs a pool (the label `gpuplane.dev/pool`: the agent holds one of its
//!   disruption slots while it reboots) or `maintenanceWindow` (or both); a window is two
//!   `HH:MM` times that differ. `Manual` (the default) needs nothing; a window with `Manual`
//!   is refused as meaningless (it would read as if the agent rebooted).

use super::Problems;
use gpuplane_crds::{GpuPartitionSpec, KernelArgs, RebootPolicy, KERNEL_ARGS_MAX, POOL_LABEL};
use std::collections::BTreeSet;

/// Records every problem of `spec.host`; `pool` is the partition's `gpuplane.dev/pool` label.
pub(super) fn check(spec: &GpuPartitionSpec, pool: Option<&str>, problems: &mut Problems<'_>) {
    let Some(host) = &spec.host else {
        return;
    };
    if let Some(w) = &host.maintenance_window {
        if let Err(e) = super::reboot::parse_window(w) {
            problems.add("spec.host.maintenanceWindow", e);
        }
    }
    match host.reboot {
        RebootPolicy::Auto if pool.is_none() && host.maintenance_window.is_none() => problems.add(
            "spec.host.reboot",
            format!("Auto needs permission to disrupt the host: label the partition {POOL_LABEL}=<pool> (the agent then holds a disruption slot of that GpuNodePool while it reboots) or set spec.host.maintenanceWindow (e.g. {{start: \"02:00\", end: \"04:00\"}}, UTC); or use Manual (the default): the agent reports RebootRequired=True and a person reboots"),
        ),
        RebootPolicy::Manual if host.maintenance_window.is_some() => problems.add(
            "spec.host.maintenanceWindow",
            "is only read with reboot: Auto (with Manual a person decides when to reboot); remove it or set reboot: Auto",
        ),
        _ => {}
    }
    let Some(k) = &host.kernel_args else {
        return;
    };
    if k.present.len() + k.absent.len() > KERNEL_ARGS_MAX {
        problems.add(
            "spec.host.kernelArgs",
            format!(
                "lists {} arguments; at most {KERNEL_ARGS_MAX} (present and absent together)",
                k.present.len() + k.absent.len()
            ),
        );
        return;
    }
    let mut seen = BTreeSet::new();
    for (list, args) in [("present", &k.present), ("absent", &k.absent)] {
        for (i, a) in args.iter().enumerate() {
            let field = format!("spec.host.kernelArgs.{list}[{i}]");
            if let Err(e) = crate::bootloader::check_arg(a) {
                problems.add(field, e);
                continue;
            }
            if !seen.insert(a.as_str()) {
                let both = k.present.contains(a) && k.absent.contains(a);
                problems.add(
                    field,
                    if both {
                        format!("{a:?} is both present and absent; list it once")
                    } else {
                        format!("{a:?} is listed twice")
                    },
                );
            }
        }
    }
}

/// The kernel arguments the agent manages; `None` when the spec lists none.
pub(super) fn resolved(spec: &GpuPartitionSpec) -> Option<KernelArgs> {
    spec.host
        .as_ref()
        .and_then(|h| h.kernel_args.clone())
        .filter(|k| !(k.present.is_empty() && k.absent.is_empty()))
}

#[cfg(test)]
mod tests;
