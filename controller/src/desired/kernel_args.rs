//! `spec.host` of a partition: its kernel arguments and its reboot policy, checked strictly
//! (issue 25, part 3). Every rule here depends on the spec alone, so the admission webhook
//! refuses the same things the agent does.
//!
//! # Rules
//! - each argument is one word the agent can write without quoting, whose key is among those
//!   the agent manages with a value it writes (`absent`: the key alone), or a key the admin
//!   lists in `allowKeys` ([`crate::bootloader::check_arg`], the allow-list in
//!   `bootloader/policy.rs`); at most [`KERNEL_ARGS_MAX`] in all;
//! - `allowKeys` lists keys, each once, none that no opt-in opens (`init`, `systemd.*`, ...);
//! - no argument is listed twice, nor both `present` and `absent`;
//! - no argument switches off what a slice of the partition needs ([`check_prerequisites`]):
//!   the IOMMU, for every `vfio-pci` slice (host-independent: the webhook refuses it too), and
//!   what an SEV-SNP VM consumer needs (a translating IOMMU with the v1 page table, SEV in KVM,
//!   memory encryption, vfio-pci's `disable_idle_d3`), for a confidential slice, judged as
//!   `iommu.mode: Passthrough` is (`partition.rs`: the VM's config on the host says
//!   `amd-sev: type=snp`; the webhook cannot see it, the agent and the CLI refuse it);
//! - `reboot: Auto` needs a pool (the label `gpuplane.dev/pool`: the agent holds one of its
//!   disruption slots while it reboots) or `maintenanceWindow` (or both); a window is two
//!   `HH:MM` times that differ. `Manual` (the default) needs nothing; a window with `Manual`
//!   is refused as meaningless (it would read as if the agent rebooted).

use super::Problems;
use crate::bootloader::policy::{self, Needed, Side};
use crate::text::sanitize;
use gpuplane_crds::{
    GpuDriver, GpuPartitionSpec, KernelArgs, RebootPolicy, KERNEL_ARGS_MAX,
    KERNEL_ARG_ALLOW_KEYS_MAX, POOL_LABEL,
};
use std::collections::BTreeSet;

/// A slice whose consumer is a confidential (SEV-SNP) VM, as `partition.rs` judges it: its
/// index, name and the VM's id.
pub(super) struct ConfidentialSlice<'a> {
    pub index: usize,
    pub name: &'a str,
    pub vmid: u32,
}

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
    let allow_keys = checked_allow_keys(k, problems);
    let mut seen = BTreeSet::new();
    for (list, side, args) in [
        ("present", Side::Present, &k.present),
        ("absent", Side::Absent, &k.absent),
    ] {
        for (i, a) in args.iter().enumerate() {
            let field = format!("spec.host.kernelArgs.{list}[{i}]");
            if let Err(e) = crate::bootloader::check_arg(a, side, &allow_keys) {
                problems.add(field, e);
                continue;
            }
            if !seen.insert(a.as_str()) {
                let both = k.present.contains(a) && k.absent.contains(a);
                let shown = sanitize(a, 80);
                problems.add(
                    field,
                    if both {
                        format!("{shown:?} is both present and absent; list it once")
                    } else {
                        format!("{shown:?} is listed twice; list it once")
                    },
                );
            }
        }
    }
}

/// The keys of `allowKeys` that may be opted in; a problem for each that may not.
fn checked_allow_keys(k: &KernelArgs, problems: &mut Problems<'_>) -> Vec<String> {
    if k.allow_keys.len() > KERNEL_ARG_ALLOW_KEYS_MAX {
        problems.add(
            "spec.host.kernelArgs.allowKeys",
            format!(
                "lists {} keys; at most {KERNEL_ARG_ALLOW_KEYS_MAX}",
                k.allow_keys.len()
            ),
        );
        return vec![];
    }
    let mut ok = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, key) in k.allow_keys.iter().enumerate() {
        let field = format!("spec.host.kernelArgs.allowKeys[{i}]");
        if let Err(e) = policy::check_allow_key(key) {
            problems.add(field, e);
        } else if !seen.insert(policy::normalize(key)) {
            problems.add(
                field,
                format!(
                    "{:?} is listed twice ('-' and '_' are the same in a key); list it once",
                    sanitize(key, 64)
                ),
            );
        } else {
            ok.push(key.clone());
        }
    }
    ok
}

/// Records each argument that switches off what a slice of `spec` needs: the IOMMU, which
/// every `vfio-pci` slice needs (decided on the spec alone), and what the confidential slices
/// (`confidential`, judged on the host by the caller) need beyond it. Only arguments that pass
/// [`check`] are judged (the others have their own problem).
pub(super) fn check_prerequisites(
    spec: &GpuPartitionSpec,
    confidential: &[ConfidentialSlice<'_>],
    problems: &mut Problems<'_>,
) {
    let Some(k) = spec.host.as_ref().and_then(|h| h.kernel_args.as_ref()) else {
        return;
    };
    if k.present.len() + k.absent.len() > KERNEL_ARGS_MAX {
        return;
    }
    let vfio: Vec<(usize, &str)> = spec
        .slices
        .iter()
        .enumerate()
        .filter(|(_, s)| s.driver == GpuDriver::VfioPci)
        .map(|(i, s)| (i, s.name.as_str()))
        .collect();
    for (list, side, args) in [
        ("present", Side::Present, &k.present),
        ("absent", Side::Absent, &k.absent),
    ] {
        for (i, a) in args.iter().enumerate() {
            if crate::bootloader::check_arg(a, side, &k.allow_keys).is_err() {
                continue;
            }
            let Some((needed, what)) = policy::switches_off(a, side) else {
                continue;
            };
            let field = format!("spec.host.kernelArgs.{list}[{i}]");
            let fix = match side {
                Side::Present => "remove it from present",
                Side::Absent => "remove it from absent",
            };
            match needed {
                Needed::Iommu => {
                    if let Some((j, name)) = vfio.first() {
                        problems.add(field, format!(
                            "{a:?} {what}, and slice {name:?} (spec.slices[{j}], driver vfio-pci) needs it: vfio-pci passes GPUs to a VM only through the IOMMU; {fix} (or move the slice's GPUs to driver nvidia)"
                        ));
                    }
                }
                Needed::Confidential => {
                    if let Some(c) = confidential.first() {
                        problems.add(field, format!(
                            "{a:?} {what}: the confidential VM {} of spec.slices[{}] ({:?}; its config has amd-sev: type=snp) could not start; {fix}",
                            c.vmid, c.index, c.name
                        ));
                    }
                }
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
