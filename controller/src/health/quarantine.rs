//! Quarantine (issue 40): a GPU judged sick by the admin's rule (`spec.health`) leaves its
//! slice; where the evidence calls for a reset it is reset once, proved and returned; else, or
//! when the fault returns, it waits for a person with the board's identity in its record.
//!
//! The records live in the GPU ledger (`host/ledger.rs`), which the layout guard rewrites for
//! the same GPU with its memory carried over (a replaced board starts clean): the kernel log
//! that showed an Xid rotates, and a restarted agent must not hand the GPU back. Pure: decides
//! on the ledger the guard made; the planner (`plan/quarantine.rs`) turns the decision into the
//! view without the GPU, the consumer's stop and the reset.
//!
//! A record's life, one decision per plan:
//! - **new**: the GPU is owned by a slice, judged at or beyond the rule's state, and its
//!   evidence is not the one last accepted → `Quarantined` (since the pass's time);
//! - `Quarantined` → `Reset` once nothing uses the GPU any more (its consumer stopped), where
//!   the rule allows a reset, the evidence calls for one (`repair: ResetGpu`), the GPU is on
//!   the bus and the agent has not reset it since a person last accepted it; the plan resets
//!   it right after writing the record. Where no reset applies → `Escalated`;
//! - `Reset` → released when the GPU answers and its evidence is what it was before the reset
//!   (the kernel's counters and log lines stay, so "no new fault" is "the same evidence"): the
//!   evidence becomes the accepted one, the GPU rejoins its slice and its server proves it
//!   (readiness, smoke test). A new fault → `Escalated`;
//! - `Escalated` stays until `gpuplane.dev/accept-health: <hash>`, or a later boot in which the
//!   GPU is judged healthy where the evidence called for no more than a reboot.
//!
//! Any record ends at once with `gpuplane.dev/accept-health: <its hash>` (the resets count is
//! cleared too).

use crate::host::ledger::{Ledger, LedgerGpu};
use crate::host::model::HostState;
use crate::layout::Terms;
use gpuplane_crds::{
    GpuHealthState, GpuQuarantine, GpuRepair, QuarantinePolicy, QuarantineStage, ResetPolicy,
};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The evidence lines a record keeps.
const RECORD_EVIDENCE: usize = 3;

/// A GPU out of its slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Out {
    /// The slice it belongs to by the spec.
    pub slice: String,
    pub record: GpuQuarantine,
    /// How a person tells the board (slot, serials, UUID, address).
    pub board: String,
    /// What the evidence calls for.
    pub repair: Option<GpuRepair>,
}

/// The quarantine's answer for one plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// The GPUs out of their slice now, by address.
    pub out: BTreeMap<String, Out>,
    /// The GPU to reset in this plan (at most one: its record says `Reset` in `ledger`, which
    /// the reset step stores with it).
    pub reset: Option<String>,
    /// What changed in the records, one line each.
    pub changes: Vec<String>,
    /// The ledger with the records decided.
    pub ledger: Option<Ledger>,
}

/// Decides every GPU's record on `next`, the ledger the guard made (`None`: no guard, no
/// quarantine). `in_use(address)`: something still uses the GPU (a process, a running
/// container that mounts it, a running VM that maps it): it is not reset under them. One reset
/// per decision, so no record says `Reset` before its own reset step.
pub fn decide(
    t: &Terms,
    host: &HostState,
    next: Option<Ledger>,
    in_use: &dyn Fn(&str) -> bool,
) -> Decision {
    let mut d = Decision::default();
    let Some(mut l) = next else {
        return d;
    };
    let on_bus: std::collections::BTreeSet<String> = l
        .gpus
        .iter()
        .filter(|g| !g.missing)
        .map(|g| g.address.clone())
        .collect();
    for e in &mut l.gpus {
        let Some(slice) = e.owner.clone() else {
            continue;
        };
        if e.missing
            && (on_bus.contains(&e.address) || (e.quarantine.is_none() && !just_lost(host, e)))
        {
            // A board replaced in place (its address holds the new one: the guard's to judge),
            // or a loss acknowledged before: nothing to take out.
            continue;
        }
        let j = judgment(e, host);
        if e.quarantine.is_none() && !quarantines(t.health.quarantine, j.state) {
            // Healthy enough and never out: nothing to record (what `step` would answer),
            // found without hashing the evidence or asking who uses the GPU.
            continue;
        }
        let h = evidence_hash(&j.evidence);
        let may_reset = d.reset.is_none() && !in_use(&e.address);
        let (change, reset) = step(t, host, e, &j, &h, may_reset);
        d.changes
            .extend(change.map(|c| format!("{}: {c}", e.describe())));
        if reset {
            d.reset = Some(e.address.clone());
        }
        if let Some(r) = &e.quarantine {
            d.out.insert(
                e.address.clone(),
                Out {
                    slice,
                    record: r.clone(),
                    board: board(e),
                    repair: j.repair,
                },
            );
        }
    }
    d.ledger = Some(l);
    d
}

/// Whether the missing entry `e` was on the bus when the stored ledger was written: it went
/// missing now, a fault to quarantine for.
fn just_lost(host: &HostState, e: &LedgerGpu) -> bool {
    host.gpu_ledger.as_ref().is_some_and(|old| {
        old.gpus
            .iter()
            .any(|g| !g.missing && g.address == e.address && g.identity == e.identity)
    })
}

/// The judgment of a ledger entry: on the bus, or remembered and gone.
fn judgment(e: &LedgerGpu, host: &HostState) -> crate::health::Judgment {
    match host.pci_devices.get(&e.address).filter(|_| !e.missing) {
        Some(dev) => crate::health::judge(dev, &host.gpu_events),
        None => crate::health::missing(),
    }
}

/// One GPU's record moved one step: what changed (for the ledger write's why), and whether
/// the plan resets it now.
fn step(
    t: &Terms,
    host: &HostState,
    e: &mut LedgerGpu,
    j: &crate::health::Judgment,
    h: &str,
    may_reset: bool,
) -> (Option<String>, bool) {
    let Some(mut r) = e.quarantine.take() else {
        if !quarantines(t.health.quarantine, j.state) || e.accepted_health.as_deref() == Some(h) {
            return (None, false);
        }
        e.quarantine = Some(GpuQuarantine {
            since: t.now.clone().unwrap_or_default(),
            stage: QuarantineStage::Quarantined,
            hash: h.to_string(),
            evidence: j.evidence.iter().take(RECORD_EVIDENCE).cloned().collect(),
            resets: 0,
            repair: j.repair,
            boot_id: host.boot.boot_id.clone(),
        });
        let first = j.evidence.first().map(String::as_str).unwrap_or("-");
        return (Some(format!("quarantined ({:?}: {first})", j.state)), false);
    };
    if t.accept_health.as_deref() == Some(r.hash.as_str()) {
        e.accepted_health = Some(h.to_string());
        e.resets = 0;
        return (
            Some(format!(
                "returned to its slice ({}={})",
                crate::layout::ACCEPT_HEALTH_ANNOTATION,
                r.hash
            )),
            false,
        );
    }
    let dev = host.pci_devices.get(&e.address).filter(|_| !e.missing);
    let answers = dev.is_some_and(|d| !d.health.not_responding);
    let offers_reset = dev.is_some_and(|d| !d.health.no_reset);
    match r.stage {
        QuarantineStage::Quarantined => {
            let resettable = t.health.reset == ResetPolicy::Auto
                && j.repair == Some(GpuRepair::ResetGpu)
                && answers
                && offers_reset
                && e.resets == 0;
            if resettable && !may_reset {
                e.quarantine = Some(r);
                return (None, false);
            }
            if resettable {
                r.stage = QuarantineStage::Reset;
                r.hash = h.to_string();
                r.resets += 1;
                e.resets += 1;
                e.quarantine = Some(r);
                return (Some("reset (its function only), then proved".into()), true);
            }
            r.stage = QuarantineStage::Escalated;
            let why = escalation(t, j, answers, offers_reset, e.resets);
            e.quarantine = Some(r);
            (Some(format!("escalated: {why}")), false)
        }
        QuarantineStage::Reset if answers && h == r.hash => {
            e.accepted_health = Some(h.to_string());
            (
                Some(
                    "proved after its reset (it answers, no new fault): returned to its slice"
                        .into(),
                ),
                false,
            )
        }
        QuarantineStage::Reset => {
            r.stage = QuarantineStage::Escalated;
            r.hash = h.to_string();
            r.evidence = j.evidence.iter().take(RECORD_EVIDENCE).cloned().collect();
            e.quarantine = Some(r);
            (
                Some("escalated: the fault returned after its reset".into()),
                false,
            )
        }
        QuarantineStage::Escalated if cleared_by_reboot(host, &r, j) => {
            e.accepted_health = Some(h.to_string());
            e.resets = 0;
            (
                Some(
                    "healthy after a reboot, which its evidence called for: returned to its slice"
                        .into(),
                ),
                false,
            )
        }
        QuarantineStage::Escalated => {
            e.quarantine = Some(r);
            (None, false)
        }
    }
}

/// Whether the rule takes a GPU judged `state` out of its slice.
fn quarantines(p: QuarantinePolicy, state: GpuHealthState) -> bool {
    match p {
        QuarantinePolicy::Unhealthy => state >= GpuHealthState::Unhealthy,
        QuarantinePolicy::Lost => state == GpuHealthState::Lost,
        QuarantinePolicy::Never => false,
    }
}

/// Why no reset is tried.
fn escalation(
    t: &Terms,
    j: &crate::health::Judgment,
    answers: bool,
    offers_reset: bool,
    resets: u32,
) -> String {
    if !answers {
        "it does not answer on the bus: reboot the node, or reseat or replace the board".into()
    } else if resets > 0 {
        "it was reset once already since a person last accepted it".into()
    } else if j.repair != Some(GpuRepair::ResetGpu) {
        match j.repair {
            Some(GpuRepair::RebootNode) => "its evidence calls for a reboot of the node".into(),
            Some(GpuRepair::ContactSupport) => {
                "its evidence calls for NVIDIA's support (a field diagnostic or a new board)".into()
            }
            _ => "no repair is known for its evidence".into(),
        }
    } else if t.health.reset == ResetPolicy::Never {
        "spec.health.reset is Never: a person repairs it".into()
    } else if !offers_reset {
        "the kernel offers no reset of it (no sysfs reset file: no FLR, PM or bus reset it may use alone)".into()
    } else {
        "no reset applies".into()
    }
}

/// An escalated record made in an earlier boot, whose evidence called for no more than a
/// reboot, of a GPU judged Healthy now: the reboot was its repair.
fn cleared_by_reboot(host: &HostState, r: &GpuQuarantine, j: &crate::health::Judgment) -> bool {
    let later_boot = match (&r.boot_id, &host.boot.boot_id) {
        (Some(then), Some(now)) => then != now,
        _ => false,
    };
    later_boot
        && j.state == GpuHealthState::Healthy
        && r.repair.is_some_and(|rp| rp <= GpuRepair::RebootNode)
}

/// The hash a record stands for and `accept-health` takes: of the evidence lines, 12 hex
/// digits (the form of a layout hash).
pub fn evidence_hash(evidence: &[String]) -> String {
    let mut h = Sha256::new();
    for line in evidence {
        h.update(line.as_bytes());
        h.update(b"\n");
    }
    h.finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How a person tells the board: slot, serial, UUID and address, as far as known.
fn board(e: &LedgerGpu) -> String {
    let mut parts = vec![];
    if let Some(s) = &e.identity.slot {
        parts.push(format!("slot {s}"));
    }
    if let Some(s) = &e.identity.serial {
        parts.push(format!("serial {s}"));
    }
    if let Some(u) = &e.identity.uuid {
        parts.push(u.clone());
    }
    parts.push(e.address.clone());
    parts.join(", ")
}

#[cfg(test)]
mod tests;
