//! A record's life, decided purely: quarantined, waiting for its consumer to let go, reset,
//! proved or escalated, accepted, cleared by a reboot; the rule's three settings.

use super::*;
use crate::host::health::GpuEvent;
use crate::host::model::PciDevice;
use gpuplane_crds::HealthPolicy;

const GPU: &str = "0000:81:00.0";
const OTHER: &str = "0000:91:00.0";

fn host(events: &[(&str, u32)]) -> HostState {
    let mut h = HostState::default();
    for a in [GPU, OTHER] {
        h.pci_devices.insert(
            a.into(),
            PciDevice {
                address: a.into(),
                vendor: "10de".into(),
                class: "030200".into(),
                ..Default::default()
            },
        );
    }
    h.gpu_events = events
        .iter()
        .map(|(a, n)| GpuEvent {
            address: a.to_string(),
            xid: Some(*n),
            line: format!("NVRM: Xid (PCI:{}): {n}, pid=1, name=python3", &a[..10]),
        })
        .collect();
    h.boot.boot_id = Some("boot-1".into());
    h
}

fn ledger() -> Ledger {
    let gpu = |a: &str| LedgerGpu {
        address: a.into(),
        owner: Some("inference".into()),
        ..Default::default()
    };
    Ledger {
        partition: "p".into(),
        spec_hash: "h".into(),
        gpus: vec![gpu(GPU), gpu(OTHER)],
    }
}

fn terms(edit: impl FnOnce(&mut Terms)) -> Terms {
    let mut t = Terms {
        now: Some("2026-12-05T10:00:00Z".into()),
        ..Default::default()
    };
    edit(&mut t);
    t
}

fn free(_: &str) -> bool {
    false
}

/// One decision on `l`; returns it and the ledger it leaves.
fn run(t: &Terms, h: &HostState, l: Ledger, in_use: &dyn Fn(&str) -> bool) -> (Decision, Ledger) {
    let d = decide(t, h, Some(l), in_use);
    let l = d.ledger.clone().unwrap();
    (d, l)
}

fn record(l: &Ledger, a: &str) -> Option<GpuQuarantine> {
    l.gpus.iter().find(|g| g.address == a)?.quarantine.clone()
}

#[test]
fn a_reset_fault_is_quarantined_waits_for_its_consumer_then_is_reset_and_proved() {
    let t = terms(|_| {});
    let h = host(&[(GPU, 48)]);
    // First: out of its slice, nothing reset while its consumer still has it.
    let busy = |a: &str| a == GPU;
    let (d, l) = run(&t, &h, ledger(), &busy);
    let r = record(&l, GPU).expect("quarantined");
    assert_eq!(r.stage, QuarantineStage::Quarantined);
    assert_eq!(r.since, "2026-12-05T10:00:00Z");
    assert_eq!(r.repair, Some(GpuRepair::ResetGpu));
    assert!(r.evidence[0].starts_with("Xid 48 "), "{:?}", r.evidence);
    assert_eq!(d.out.keys().collect::<Vec<_>>(), [GPU], "only the sick GPU");
    assert_eq!(d.reset, None);
    assert!(
        d.changes[0].contains("quarantined (Unhealthy: Xid 48"),
        "{:?}",
        d.changes
    );
    assert!(record(&l, OTHER).is_none());
    // Still used: still waiting, nothing changes.
    let (d, l) = run(&t, &h, l, &busy);
    assert_eq!(d.reset, None);
    assert!(d.changes.is_empty());
    // Its consumer let go: reset (the record says so in the ledger the reset step stores).
    let (d, l) = run(&t, &h, l, &free);
    assert_eq!(d.reset.as_deref(), Some(GPU));
    let r = record(&l, GPU).unwrap();
    assert_eq!((r.stage, r.resets), (QuarantineStage::Reset, 1));
    // After the reset: it answers and nothing new was logged: proved, back in its slice.
    let (d, l) = run(&t, &h, l, &free);
    assert!(d.out.is_empty(), "{:?}", d.out);
    assert!(record(&l, GPU).is_none());
    let e = l.gpus.iter().find(|g| g.address == GPU).unwrap();
    assert_eq!(e.accepted_health.as_deref(), Some(r.hash.as_str()));
    assert_eq!(e.resets, 1, "the reset is remembered");
    // The same evidence (the log keeps the line) quarantines it no more.
    let (d, _) = run(&t, &h, l, &free);
    assert!(d.out.is_empty() && d.changes.is_empty(), "{:?}", d.changes);
}

#[test]
fn a_fault_that_returns_after_the_reset_escalates_and_is_never_reset_twice() {
    let t = terms(|_| {});
    let (_, l) = run(&t, &host(&[(GPU, 48)]), ledger(), &free);
    let (_, l) = run(&t, &host(&[(GPU, 48)]), l, &free);
    assert_eq!(record(&l, GPU).unwrap().stage, QuarantineStage::Reset);
    // The fault again after the reset.
    let again = host(&[(GPU, 48), (GPU, 48)]);
    let (d, l) = run(&t, &again, l, &free);
    let r = record(&l, GPU).unwrap();
    assert_eq!(r.stage, QuarantineStage::Escalated);
    assert!(
        d.changes[0].contains("the fault returned after its reset"),
        "{:?}",
        d.changes
    );
    assert!(d.out.contains_key(GPU) && d.reset.is_none());
    // Escalated stays, whatever else comes.
    let (d, l2) = run(&t, &again, l.clone(), &free);
    assert_eq!(d.reset, None);
    assert_eq!(record(&l2, GPU), Some(r));
    // A person accepts it: back in its slice, and the resets count is cleared (a later fault
    // is reset once again).
    let accepted = terms(|t| t.accept_health = Some(record(&l, GPU).unwrap().hash));
    let (d, l) = run(&accepted, &again, l, &free);
    assert!(d.out.is_empty());
    assert_eq!(l.gpus.iter().find(|g| g.address == GPU).unwrap().resets, 0);
}

#[test]
fn a_fault_that_returns_after_a_proved_reset_escalates_without_a_second_reset() {
    let t = terms(|_| {});
    let h = host(&[(GPU, 48)]);
    let (_, l) = run(&t, &h, ledger(), &free);
    let (_, l) = run(&t, &h, l, &free);
    let (d, l) = run(&t, &h, l, &free);
    assert!(d.out.is_empty(), "proved and back");
    // Later, the same fault once more: quarantined, and escalated rather than reset again.
    let again = host(&[(GPU, 48), (GPU, 48)]);
    let (d, l) = run(&t, &again, l, &free);
    assert_eq!(record(&l, GPU).unwrap().stage, QuarantineStage::Quarantined);
    assert_eq!(d.reset, None);
    let (d, l) = run(&t, &again, l, &free);
    assert_eq!(d.reset, None);
    let r = record(&l, GPU).unwrap();
    assert_eq!(r.stage, QuarantineStage::Escalated);
    assert!(
        d.changes[0].contains("it was reset once already since a person last accepted it"),
        "{:?}",
        d.changes
    );
}

#[test]
fn a_lost_gpu_is_escalated_with_its_board_and_never_reset() {
    let t = terms(|_| {});
    let mut h = host(&[]);
    h.pci_devices.get_mut(GPU).unwrap().health.not_responding = true;
    let mut l = ledger();
    l.gpus[0].identity.slot = Some("7".into());
    l.gpus[0].identity.serial = Some("1650124000001".into());
    let (_, l) = run(&t, &h, l, &free);
    let (d, l) = run(&t, &h, l, &free);
    let r = record(&l, GPU).unwrap();
    assert_eq!(r.stage, QuarantineStage::Escalated);
    assert_eq!(r.repair, Some(GpuRepair::RebootNode));
    assert!(
        d.changes[0].contains("does not answer on the bus"),
        "{:?}",
        d.changes
    );
    assert_eq!(
        d.out[GPU].board,
        "slot 7, serial 1650124000001, 0000:81:00.0"
    );
    assert_eq!(d.reset, None);
}

#[test]
fn a_gpu_gone_from_the_bus_is_quarantined_from_the_ledger() {
    let t = terms(|_| {});
    let mut h = host(&[]);
    h.pci_devices.remove(GPU);
    // An acknowledged loss (missing in the stored ledger too) is nobody's quarantine.
    let mut l = ledger();
    l.gpus[0].missing = true;
    h.gpu_ledger = Some(l.clone());
    let (d, _) = run(&t, &h, l.clone(), &free);
    assert!(d.out.is_empty(), "{:?}", d.changes);
    // Gone since the stored ledger was written: quarantined, then escalated.
    h.gpu_ledger = Some(ledger());
    let (d, l) = run(&t, &h, l, &free);
    assert!(d.out.contains_key(GPU));
    assert!(
        d.changes[0].contains("Lost: gone from the bus"),
        "{:?}",
        d.changes
    );
    let (_, l) = run(&t, &h, l, &free);
    assert_eq!(record(&l, GPU).unwrap().stage, QuarantineStage::Escalated);
    // A board in its place (another entry on the bus at that address): the guard's to judge.
    let mut replaced = l.clone();
    replaced.gpus[0].quarantine = None;
    replaced.gpus.push(LedgerGpu {
        address: GPU.into(),
        owner: Some("inference".into()),
        ..Default::default()
    });
    let (d, _) = run(&t, &host(&[]), replaced, &free);
    assert!(d.out.is_empty(), "{:?}", d.changes);
}

#[test]
fn the_rule_decides_which_states_quarantine_and_whether_a_reset_is_tried() {
    let h = host(&[(GPU, 48)]);
    let never = terms(|t| t.health.quarantine = QuarantinePolicy::Never);
    let (d, l) = run(&never, &h, ledger(), &free);
    assert!(
        d.out.is_empty() && record(&l, GPU).is_none(),
        "reported only"
    );
    let lost_only = terms(|t| t.health.quarantine = QuarantinePolicy::Lost);
    let (d, _) = run(&lost_only, &h, ledger(), &free);
    assert!(d.out.is_empty(), "Unhealthy is not Lost");
    let no_reset = terms(|t| {
        t.health = HealthPolicy {
            reset: ResetPolicy::Never,
            ..Default::default()
        }
    });
    let (_, l) = run(&no_reset, &h, ledger(), &free);
    let (d, l) = run(&no_reset, &h, l, &free);
    assert_eq!(d.reset, None);
    assert_eq!(record(&l, GPU).unwrap().stage, QuarantineStage::Escalated);
    assert!(
        d.changes[0].contains("spec.health.reset is Never"),
        "{:?}",
        d.changes
    );
    // A GPU the kernel cannot reset is escalated, not reset.
    let mut stuck = h.clone();
    stuck.pci_devices.get_mut(GPU).unwrap().health.no_reset = true;
    let (_, l) = run(&terms(|_| {}), &stuck, ledger(), &free);
    let (d, _) = run(&terms(|_| {}), &stuck, l, &free);
    assert_eq!(d.reset, None);
    assert!(d.changes[0].contains("offers no reset"), "{:?}", d.changes);
    // An application's Xid and a GPU in no slice are nobody's quarantine.
    let (d, _) = run(&terms(|_| {}), &host(&[(GPU, 13)]), ledger(), &free);
    assert!(d.out.is_empty());
    let mut unowned = ledger();
    unowned.gpus[0].owner = None;
    let (d, _) = run(&terms(|_| {}), &h, unowned, &free);
    assert!(d.out.is_empty());
}

#[test]
fn acceptance_names_the_record_and_covers_only_its_evidence() {
    let h = host(&[(GPU, 79)]);
    let t = terms(|_| {});
    let (_, l) = run(&t, &h, ledger(), &free);
    let hash = record(&l, GPU).unwrap().hash;
    assert_eq!(hash.len(), 12);
    assert!(
        crate::layout::is_layout_hash(&hash),
        "the annotation's form"
    );
    let wrong = terms(|t| t.accept_health = Some("000000000000".into()));
    let (d, l) = run(&wrong, &h, l, &free);
    assert!(d.out.contains_key(GPU), "another hash accepts nothing");
    let right = terms(|t| t.accept_health = Some(hash.clone()));
    let (d, l) = run(&right, &h, l, &free);
    assert!(d.out.is_empty());
    assert!(d.changes[0].contains(&format!("gpuplane.dev/accept-health={hash}")));
    // A new fault on the accepted GPU is a new quarantine.
    let (d, _) = run(&right, &host(&[(GPU, 79), (GPU, 48)]), l, &free);
    assert!(d.out.contains_key(GPU));
}

#[test]
fn one_reset_per_decision_so_no_record_says_reset_before_its_step() {
    let t = terms(|_| {});
    let h = host(&[(GPU, 48), (OTHER, 48)]);
    let (_, l) = run(&t, &h, ledger(), &free);
    let (d, l) = run(&t, &h, l, &free);
    assert_eq!(d.reset.as_deref(), Some(GPU));
    assert_eq!(
        record(&l, OTHER).unwrap().stage,
        QuarantineStage::Quarantined
    );
    let (d, _) = run(&t, &h, l, &free);
    assert_eq!(d.reset.as_deref(), Some(OTHER));
}

#[test]
fn a_reboot_clears_what_called_for_no_more_than_a_reboot() {
    let t = terms(|_| {});
    let mut h = host(&[]);
    h.pci_devices.get_mut(GPU).unwrap().health.not_responding = true;
    let (_, l) = run(&t, &h, ledger(), &free);
    let (_, l) = run(&t, &h, l, &free);
    assert_eq!(record(&l, GPU).unwrap().stage, QuarantineStage::Escalated);
    // Same boot, the log rotated: still out (the record outlives the evidence).
    h.pci_devices.get_mut(GPU).unwrap().health.not_responding = false;
    let (d, l) = run(&t, &h, l, &free);
    assert!(d.out.contains_key(GPU));
    // A later boot, the GPU answers and is healthy: back.
    h.boot.boot_id = Some("boot-2".into());
    let (d, _) = run(&t, &h, l.clone(), &free);
    assert!(d.out.is_empty(), "{:?}", d.changes);
    // Evidence that called for NVIDIA's support is not cleared by a reboot.
    let support = host(&[(GPU, 74)]);
    let (_, l) = run(&t, &support, ledger(), &free);
    let (_, l) = run(&t, &support, l, &free);
    let mut later = host(&[]);
    later.boot.boot_id = Some("boot-2".into());
    let (d, _) = run(&t, &later, l, &free);
    assert!(d.out.contains_key(GPU));
}
