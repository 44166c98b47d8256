//! The partition's kernel arguments (`spec.host.kernelArgs`, issue 25 part 3): the bootloader's
//! config edited until it holds them, the bootloader refreshed, and what a pending reboot holds
//! up. Pure: decided on the observed `BootFacts`; `status/kernel_args.rs` reads the same
//! [`judge`] for `RebootRequired`.
//!
//! # Decisions
//! - The config lacks a `present` word or holds an `absent` one: `SetKernelArgs` with exactly
//!   those words, then `RefreshBootloader`. They go first in the plan (nothing on the GPUs
//!   depends on them), and only in a plan nothing else blocks.
//! - The config is as the agent last wrote it (its hash is the record's `written`) but the
//!   agent's record says no refresh followed (the agent was killed in between):
//!   `RefreshBootloader` again. A config a person changed since is never refreshed by the agent.
//! - `/proc/cmdline` differs from the desired words: a reboot is pending. The partition is
//!   blocked with `RebootRequired` (kstatus Stalled: a person reboots, `reboot: Manual`), and
//!   every `vfio-pci` slice that still has a GPU to bind waits (planned as if it were not
//!   there): passthrough is what such arguments are for (`vfio-pci.disable_idle_d3`, the IOMMU's
//!   mode). Everything else goes on: slices already in place, `nvidia` slices, their servers.
//! - The host booted since the agent refreshed the bootloader with the arguments, and
//!   `/proc/cmdline` still lacks them: `KernelArgsNotBooted`, with the difference. Nothing is
//!   written again and the agent does not reboot again (not even with `reboot: Auto`); the same
//!   slices wait.
//! - `reboot: Auto` ([`crate::desired::reboot::RebootGate`]): once the config holds the words
//!   and the agent itself refreshed the bootloader from exactly it (in this boot: an older
//!   refresh is `NotBooted`), and the gate is open, the plan is only this: stop the partition's
//!   running servers, then its running containers, then `Reboot` (the blocker's reason
//!   `Rebooting`, a wait, not a stall). The agent's record holds the boot it asked from: in
//!   that boot it never asks again, and plans nothing more (the boot is ending). A config that holds the words but that the agent did not
//!   refresh is refreshed first (the agent reboots only into entries it made). The gate closed:
//!   as `Manual`, with reason `WaitingForMaintenanceWindow` (a wait) and why. VMs are not
//!   stopped by the agent: Proxmox's own shutdown (`pve-guests.service`) stops its guests.

use super::{Blocker, PlannedStep, Reason, Step};
use crate::bootloader::difference;
use crate::desired::reboot::RebootGate;
use crate::desired::{Desired, ResolvedConsumer, ResolvedSlice};
use crate::host::model::{HostState, RunState};
use gpuplane_crds::GpuDriver;
use std::collections::BTreeSet;

/// Where the host stands with the desired kernel arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// `/proc/cmdline` holds every `present` word and no `absent` one.
    Booted,
    /// A reboot is pending; the config is (or is about to be) written and refreshed.
    RebootPending,
    /// The host booted after the agent refreshed the bootloader with the arguments, without them.
    NotBooted,
    /// Neither `/etc/kernel/cmdline` nor `/etc/default/grub` exists.
    NoBootloader,
    /// The config cannot be read or edited with certainty: why.
    ConfigProblem(String),
    /// `/proc/cmdline` could not be read.
    Unknown,
}

/// The judgement on the kernel arguments, shared by the planner and the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub standing: Standing,
    /// `present` words the running kernel lacks.
    pub missing: Vec<String>,
    /// `absent` words the running kernel has.
    pub unwanted: Vec<String>,
    /// What the config needs: (words to add, words to remove); empty when it holds them.
    pub config_add: Vec<String>,
    pub config_remove: Vec<String>,
    /// The agent was killed between its write and the refresh: refresh again.
    pub refresh_pending: bool,
    /// The config holds the words and the agent refreshed the bootloader from exactly it.
    pub refreshed_by_agent: bool,
}

impl Judgement {
    /// "lacks a, b and still has c" for messages.
    pub fn difference(&self) -> String {
        let mut parts = vec![];
        if !self.missing.is_empty() {
            parts.push(format!("lacks {}", self.missing.join(" ")));
        }
        if !self.unwanted.is_empty() {
            parts.push(format!("still has {}", self.unwanted.join(" ")));
        }
        parts.join(" and ")
    }
}

/// The judgement for `d` on `h`; `None` when the partition sets no kernel arguments.
pub fn judge(d: &Desired, h: &HostState) -> Option<Judgement> {
    let k = d.partition.kernel_args.as_ref()?;
    let b = &h.boot;
    let (missing, unwanted) = match &b.running {
        Some(r) => difference(r, &k.present, &k.absent),
        None => (vec![], vec![]),
    };
    let mut j = Judgement {
        standing: Standing::Booted,
        missing,
        unwanted,
        config_add: vec![],
        config_remove: vec![],
        refresh_pending: false,
        refreshed_by_agent: false,
    };
    let differs = !j.missing.is_empty() || !j.unwanted.is_empty();
    match &b.config {
        None => {
            if differs {
                j.standing = Standing::NoBootloader;
            }
        }
        Some(c) if c.problem.is_some() => {
            if differs {
                j.standing = Standing::ConfigProblem(c.problem.clone().unwrap_or_default());
            }
        }
        Some(c) if from_drop_in(c, &k.absent).is_some() => {
            if differs {
                j.standing =
                    Standing::ConfigProblem(from_drop_in(c, &k.absent).unwrap_or_default());
            }
        }
        Some(c) => {
            (j.config_add, j.config_remove) = difference(&c.args, &k.present, &k.absent);
            let config_holds = j.config_add.is_empty() && j.config_remove.is_empty();
            let rec = b.record.as_ref().filter(|r| r.path == c.path);
            j.refreshed_by_agent =
                config_holds && rec.is_some_and(|r| r.refreshed.as_ref() == Some(&c.sha256));
            j.refresh_pending = config_holds
                && rec.is_some_and(|r| {
                    r.written == c.sha256 && r.refreshed.as_ref() != Some(&c.sha256)
                });
            if differs {
                let booted_since = rec.is_some_and(|r| {
                    r.refreshed.as_ref() == Some(&c.sha256)
                        && r.boot_id.is_some()
                        && b.boot_id.is_some()
                        && r.boot_id != b.boot_id
                });
                j.standing = if config_holds && booted_since {
                    Standing::NotBooted
                } else {
                    Standing::RebootPending
                };
            }
        }
    }
    if b.running.is_none() {
        j.standing = Standing::Unknown;
    }
    Some(j)
}

/// A word of `absent` that a GRUB drop-in gives the boot: the agent edits only
/// `/etc/default/grub`, so removing it is a person's edit of that drop-in.
fn from_drop_in(c: &crate::host::model::BootConfig, absent: &[String]) -> Option<String> {
    c.drop_ins.iter().find_map(|(path, words)| {
        let w = absent.iter().find(|a| words.contains(a))?;
        Some(format!("{w} must be absent, but {path} adds it (grub-mkconfig reads it after {}); the agent edits only {}: remove it from {path}", c.path, c.path))
    })
}

/// What the planner does about the kernel arguments.
#[derive(Debug, Default)]
pub(super) struct Verdict {
    /// Edit and refresh steps, in order.
    pub steps: Vec<PlannedStep>,
    /// Why the partition is not done (the reboot, the failed boot, no bootloader).
    pub blockers: Vec<Blocker>,
    /// `vfio-pci` slices that wait for the reboot.
    pub frozen: BTreeSet<String>,
    /// `reboot: Auto` reboots now: the whole plan (stops, then `Reboot`); empty once the reboot
    /// was asked from this boot.
    pub reboot: Option<Vec<PlannedStep>>,
}

/// Whether a blocker's `reason` is a reboot that comes by itself (`reboot: Auto`): `Rebooting`
/// or `WaitingForMaintenanceWindow`, which the status reads as work in progress
/// (`Reconciling`), not a stall (their standing is `Working`).
pub fn is_reboot_wait(reason: Reason) -> bool {
    matches!(
        reason,
        Reason::Rebooting | Reason::WaitingForMaintenanceWindow
    )
}

/// The kernel-argument steps and blockers for `d` on `h`.
pub(super) fn check(d: &Desired, h: &HostState) -> Verdict {
    let mut v = Verdict::default();
    let Some(j) = judge(d, h) else {
        return v;
    };
    if let (Some(c), false) = (
        &h.boot.config,
        j.config_add.is_empty() && j.config_remove.is_empty(),
    ) {
        v.steps.push(PlannedStep {
            step: Step::SetKernelArgs {
                bootloader: c.bootloader,
                present: j.config_add.clone(),
                absent: j.config_remove.clone(),
            },
            why: format!("spec.host.kernelArgs: {} {}", c.path, config_gap(&j)),
        });
    }
    let auto = d.partition.reboot.is_auto();
    let unrefreshed = auto
        && j.standing == Standing::RebootPending
        && j.config_add.is_empty()
        && j.config_remove.is_empty()
        && !j.refreshed_by_agent;
    if let Some(c) = &h.boot.config {
        if !v.steps.is_empty() || j.refresh_pending || unrefreshed {
            v.steps.push(PlannedStep {
                step: Step::RefreshBootloader {
                    bootloader: c.bootloader,
                },
                why: if unrefreshed && !j.refresh_pending && v.steps.is_empty() {
                    format!("{} holds the arguments, but the agent did not refresh the bootloader from it: reboot: Auto reboots only into boot entries the agent made", c.path)
                } else if j.refresh_pending {
                    format!("{} was written by the agent and the bootloader is not yet refreshed from it (the refresh follows the write, or was interrupted): the next boot would not see it", c.path)
                } else {
                    format!("the bootloader reads {} only when refreshed", c.path)
                },
            });
        }
    }
    if j.standing == Standing::Booted {
        return v;
    }
    v.frozen = d
        .partition
        .slices
        .iter()
        .filter(|s| waits_for_reboot(d, s, h))
        .map(|s| s.name.clone())
        .collect();
    let waiting = if v.frozen.is_empty() {
        String::new()
    } else {
        format!(
            "; slices {} wait (their GPUs go to vfio-pci only on a kernel booted with the partition's arguments); everything else goes on",
            v.frozen.iter().cloned().collect::<Vec<_>>().join(", ")
        )
    };
    if v.steps.is_empty() {
        v.reboot = reboot_now(d, h, &j);
    }
    let (reason, message) = blocker_text(d, &j, h);
    v.blockers.push(Blocker {
        resource: crate::resource_key::ResourceKey::partition(d.partition.name.as_str()),
        reason,
        message: format!("{message}{waiting}"),
    });
    v
}

/// "lacks a; has b" of the config, for a step's why.
fn config_gap(j: &Judgement) -> String {
    let mut parts = vec![];
    if !j.config_add.is_empty() {
        parts.push(format!("lacks {}", j.config_add.join(" ")));
    }
    if !j.config_remove.is_empty() {
        parts.push(format!("has {}", j.config_remove.join(" ")));
    }
    parts.join("; ")
}

/// `reboot: Auto` with its gate open and the arguments written and refreshed by the agent in
/// this boot: stop the servers, the containers, reboot; nothing at all once the reboot was
/// asked from this boot.
fn reboot_now(d: &Desired, h: &HostState, j: &Judgement) -> Option<Vec<PlannedStep>> {
    let RebootGate::Now(by) = &d.partition.reboot else {
        return None;
    };
    if j.standing != Standing::RebootPending || !j.refreshed_by_agent {
        return None;
    }
    reboot_steps(
        d,
        h,
        by,
        format!(
            "the running kernel {} (/proc/cmdline); the bootloader was refreshed with them; reboot: Auto, {by}",
            j.difference()
        ),
    )
}

/// The steps of a reboot under `reboot: Auto` (`by`: its authority): the partition's servers
/// stopped, then its containers, then the reboot (`why`); nothing at all once the reboot was
/// asked from this boot (the host is on its way down). `None` without a boot id. Shared by the
/// kernel arguments and the quarantine's escalation (`quarantine.rs`).
pub(super) fn reboot_steps(
    d: &Desired,
    h: &HostState,
    by: &str,
    reboot_why: String,
) -> Option<Vec<PlannedStep>> {
    let boot_id = h.boot.boot_id.as_ref()?;
    if asked_in_this_boot(h) {
        // The host is on its way down: nothing more starts in this boot.
        return Some(vec![]);
    }
    let why = |what: &str| format!("reboot: Auto ({by}) stops {what} before the reboot");
    let mut steps: Vec<PlannedStep> = d
        .servers
        .iter()
        .filter(|s| h.unit(&s.unit).is_some_and(|u| u.is_active()))
        .map(|s| PlannedStep {
            step: Step::StopUnit {
                unit: s.unit.clone(),
            },
            why: why("the partition's servers"),
        })
        .collect();
    for s in &d.partition.slices {
        if let Some(ResolvedConsumer::Lxc(vmid)) = s.consumer {
            if h.containers
                .get(&vmid)
                .is_some_and(|c| c.state == RunState::Running)
            {
                steps.push(PlannedStep {
                    step: Step::StopContainer { vmid },
                    why: why("the partition's containers, after their servers,"),
                });
            }
        }
    }
    steps.push(PlannedStep {
        step: Step::Reboot {
            boot_id: boot_id.clone(),
        },
        why: reboot_why,
    });
    Some(steps)
}

/// The agent asked for a reboot from the boot that runs now (it is on its way).
fn asked_in_this_boot(h: &HostState) -> bool {
    let b = &h.boot;
    b.boot_id.is_some()
        && b.record.as_ref().and_then(|r| r.reboot_from.as_ref()) == b.boot_id.as_ref()
}

/// What `reboot:` does about a pending reboot: the reason (when not `RebootRequired`) and the
/// end of the message.
fn policy_text(d: &Desired, j: &Judgement, h: &HostState) -> (Option<Reason>, String) {
    match &d.partition.reboot {
        RebootGate::Manual => (None, "reboot the host to boot with them (reboot: Manual: the agent never reboots)".into()),
        g if g.is_auto() && asked_in_this_boot(h) => (Some(Reason::Rebooting), "reboot: Auto: the agent asked for the reboot (systemctl reboot) from this boot and does not ask again in it; it verifies /proc/cmdline when the host is back".into()),
        RebootGate::Now(by) if j.refreshed_by_agent => (Some(Reason::Rebooting), format!("reboot: Auto: the agent stops the partition's servers and containers and reboots the host, {by}")),
        RebootGate::Now(by) => (Some(Reason::Rebooting), format!("reboot: Auto: the agent refreshes the bootloader, then reboots the host, {by}")),
        RebootGate::Later(why) => (Some(Reason::WaitingForMaintenanceWindow), format!("reboot: Auto: not now: {why}")),
        RebootGate::Cannot(why) => (None, format!("reboot: Auto cannot reboot: {why}; or reboot the host by hand")),
    }
}

/// The blocker's reason and message for a standing other than `Booted`.
pub fn blocker_text(d: &Desired, j: &Judgement, h: &HostState) -> (Reason, String) {
    let cfg = h.boot.config.as_ref();
    let path = cfg
        .map(|c| c.path.as_str())
        .unwrap_or("the bootloader config");
    let refresh = cfg
        .map(|c| c.bootloader.refresh_command().join(" "))
        .unwrap_or_default();
    match &j.standing {
        Standing::Booted => (Reason::KernelArgsBooted, String::new()),
        Standing::RebootPending => {
            let config = if j.refreshed_by_agent {
                format!("the agent wrote them to {path} and ran {refresh}")
            } else if j.config_add.is_empty() && j.config_remove.is_empty() && !j.refresh_pending {
                format!("{path} has them (not written by the agent: make sure {refresh} ran)")
            } else {
                format!("the agent writes them to {path} and runs {refresh}")
            };
            let (reason, policy) = policy_text(d, j, h);
            (reason.unwrap_or(Reason::RebootRequired), format!(
                "the running kernel {} (/proc/cmdline); {config}: {policy}",
                j.difference()
            ))
        }
        Standing::NotBooted => (Reason::KernelArgsNotBooted, format!(
            "the host booted after the agent wrote the kernel arguments to {path} and ran {refresh}, but the running kernel {} (/proc/cmdline): the bootloader did not boot what it was given (another boot entry or ESP, a drop-in overriding it, a kernel pinned by hand?); the agent does not reboot again: fix the boot and reboot",
            j.difference()
        )),
        Standing::NoBootloader => (Reason::BootloaderNotFound, format!(
            "the running kernel {} (/proc/cmdline) and the agent cannot write kernel arguments here: neither /etc/kernel/cmdline (proxmox-boot-tool) nor /etc/default/grub (GRUB) exists; set them by hand and reboot",
            j.difference()
        )),
        Standing::ConfigProblem(p) => (Reason::BootloaderConfigUnsupported, format!(
            "the running kernel {} (/proc/cmdline) and the agent does not edit {path}: {p}; set the arguments by hand (or simplify the line) and reboot",
            j.difference()
        )),
        Standing::Unknown => (Reason::KernelArgsUnknown, "/proc/cmdline could not be read: whether the kernel runs with spec.host.kernelArgs is unknown".into()),
    }
}

/// Whether slice `s` has a GPU still to bind to vfio-pci.
fn waits_for_reboot(d: &Desired, s: &ResolvedSlice, h: &HostState) -> bool {
    s.driver == GpuDriver::VfioPci
        && s.gpus.iter().any(|g| {
            h.pci_devices.get(g).and_then(|p| p.driver.as_deref())
                != Some(d.partition.driver_name(s.driver))
        })
}

#[cfg(test)]
mod tests;
