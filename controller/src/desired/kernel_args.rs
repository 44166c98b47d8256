//! `spec.host` of a partition: its kernel arguments and its reboot policy, checked strictly
//! (issue 25, part 3). Every rule here depends on the spec alone, so the admission webhook
//! refuses the same things the agent does.
//!
//! # Rules
//! - each argument is one word the agent can write without quoting
//!   ([`crate::bootloader::check_arg`]); at most [`KERNEL_ARGS_MAX`] in all;
//! - no argument is listed twice, nor both `present` and `absent`;
//! - `reboot: Auto` is refused: rebooting by itself needs the fleet disruption budget (issue
//!   26), which does not exist yet. `Manual` (the default) needs nothing.

use super::Problems;
use gpuplane_crds::{GpuPartitionSpec, KernelArgs, RebootPolicy, KERNEL_ARGS_MAX};
use std::collections::BTreeSet;

/// Records every problem of `spec.host`.
pub(super) fn check(spec: &GpuPartitionSpec, problems: &mut Problems<'_>) {
    let Some(host) = &spec.host else {
        return;
    };
    if host.reboot == RebootPolicy::Auto {
        problems.add(
            "spec.host.reboot",
            "Auto is not available yet: a reboot the agent starts by itself must take a slot of the fleet's disruption budget (issue 26), which this version does not have; use Manual (the default): the agent reports RebootRequired=True and a person reboots the host",
        );
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
