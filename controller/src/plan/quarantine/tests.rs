//! The quarantine on the simulated reference host (an LXC slice of four GPUs with one tp=4
//! server in container 129, a VM slice of four on `vfio-pci` for VM 200): one sick GPU costs
//! its one consumer, never the others; repaired by a reset where that helps, escalated where
//! not; a replaced board starts clean.

use crate::converge::{converge, Options, Report};
use crate::door::Door;
use crate::host::model::RunState;
use crate::host::sim::SimHost;
use crate::host::Host;
use crate::manifests::Manifests;
use crate::plan::layout_guard::tests::mapping;
use crate::step::Step;
use crate::testutil::{manifests, twin};
use gpuplane_crds::QuarantineStage;

const SERVER_UNIT: &str = "sglang-qwen.service";

fn run(h: &mut SimHost, m: &Manifests) -> Report {
    let st = h.observe().unwrap();
    let mut d = crate::desired::select::for_host(m, &st, "10de", "nvidia").expect("valid");
    if let Some(t) = &mut d.partition.layout {
        t.now = Some("2026-12-05T10:00:00Z".into());
    }
    // As every door: the backend reads the units and preflight facts of this desired state.
    crate::pass::watch::WatchSet::of(&d).install(h);
    converge(&d, &mut Door::new(h), &Options::default())
}

fn converged() -> (SimHost, Manifests) {
    let mut h = twin();
    let m = manifests();
    assert!(run(&mut h, &m).converged());
    (h, m)
}

fn xid(h: &mut SimHost, bus: &str, n: u32) {
    h.file.kernel_log.push(format!(
        "NVRM: Xid (PCI:{bus}): {n}, pid=4242, name=python3, (the driver's text)"
    ));
}

/// What the run stopped or started, in order: units and containers, and VMs' states after.
fn stops(r: &Report) -> Vec<String> {
    r.applied
        .iter()
        .filter(|a| {
            matches!(
                a.planned.step,
                Step::StopUnit { .. } | Step::StopContainer { .. }
            )
        })
        .map(|a| a.planned.step.to_string())
        .collect()
}

fn steps(r: &Report) -> Vec<String> {
    r.applied
        .iter()
        .map(|a| a.planned.step.to_string())
        .collect()
}

fn record(h: &SimHost, addr: &str) -> Option<gpuplane_crds::GpuQuarantine> {
    let l = h.file.gpu_ledger.as_ref()?;
    l.gpus
        .iter()
        .find(|g| g.address == addr && !g.missing)?
        .quarantine
        .clone()
}

#[test]
fn a_reset_fault_stops_only_its_server_resets_the_gpu_and_serves_again() {
    let (mut h, m) = converged();
    h.file.vms.get_mut(&200).unwrap().state = RunState::Running;
    let mapped = mapping(&mut h);
    xid(&mut h, "0000:11:00", 48);
    let r = run(&mut h, &m);
    assert!(r.converged(), "{:?} {:?}", r.stop, steps(&r));
    assert_eq!(
        stops(&r),
        [
            format!("stop unit {SERVER_UNIT} on container 129"),
            "stop container 129".to_string()
        ],
        "one consumer: the slice's server and its container, nothing else"
    );
    let s = steps(&r);
    let pos = |x: &str| {
        s.iter()
            .position(|y| y == x)
            .unwrap_or_else(|| panic!("{x}: {s:?}"))
    };
    let narrowed =
        pos("set GPU devices of container 129 to [/dev/nvidia0, /dev/nvidia2, /dev/nvidia3]");
    let reset = pos("reset GPU 0000:11:00.0 (its function only) and record it");
    let back = pos("set GPU devices of container 129 to [/dev/nvidia0, /dev/nvidia1, /dev/nvidia2, /dev/nvidia3]");
    let started = pos(&format!("start unit {SERVER_UNIT} on container 129"));
    assert!(narrowed < reset && reset < back && back < started, "{s:?}");
    assert_eq!(mapping(&mut h), mapped, "the VM's slice is not touched");
    assert_eq!(h.file.vms[&200].state, RunState::Running);
    assert_eq!(record(&h, "0000:11:00.0"), None, "proved and back");
    let e = h
        .file
        .gpu_ledger
        .as_ref()
        .unwrap()
        .gpus
        .iter()
        .find(|g| g.address == "0000:11:00.0")
        .unwrap();
    assert_eq!(e.resets, 1);
    assert!(e.accepted_health.is_some());
    // Status: Healthy again, the evidence kept under the line that says it was accepted.
    let st = h.observe().unwrap();
    let d = crate::desired::select::for_host(&m, &st, "10de", "nvidia").unwrap();
    let (rows, _) = crate::status::gpus::table(&d.partition, &st);
    let row = rows.iter().find(|g| g.address == "0000:11:00.0").unwrap();
    assert_eq!(row.health, Some(gpuplane_crds::GpuHealthState::Healthy));
    assert!(
        row.evidence[0].starts_with("evidence accepted ("),
        "{:?}",
        row.evidence
    );
    assert!(row.evidence[1].starts_with("Xid 48 "), "{:?}", row.evidence);
    assert_eq!(run(&mut h, &m).writes, 0, "settled");
}

#[test]
fn a_vm_gpu_fault_takes_only_its_mapping_entry_and_is_not_reset_under_the_running_vm() {
    let (mut h, m) = converged();
    h.file.vms.get_mut(&200).unwrap().state = RunState::Running;
    xid(&mut h, "0000:e1:00", 48);
    let r = run(&mut h, &m);
    assert!(r.converged(), "{:?} {:?}", r.stop, steps(&r));
    assert!(
        stops(&r).is_empty(),
        "no server or container stops: {:?}",
        steps(&r)
    );
    assert_eq!(
        mapping(&mut h),
        ["0000:81:00.0", "0000:91:00.0", "0000:f1:00.0"],
        "the VM's mapping loses exactly that entry"
    );
    assert_eq!(h.file.vms[&200].state, RunState::Running);
    let st = h.observe().unwrap();
    let server = st
        .units
        .iter()
        .find(|(k, _)| k.ends_with(SERVER_UNIT))
        .map(|(_, u)| u)
        .unwrap();
    assert!(server.is_active(), "the other slice's server keeps serving");
    let q = record(&h, "0000:e1:00.0").expect("quarantined");
    assert_eq!(
        q.stage,
        QuarantineStage::Quarantined,
        "the running VM still has it"
    );
    assert!(
        !steps(&r).iter().any(|s| s.starts_with("reset GPU")),
        "{:?}",
        steps(&r)
    );
    // The VM's owner stops it: the GPU is reset, proved, and its entry comes back.
    h.file.vms.get_mut(&200).unwrap().state = RunState::Stopped;
    let r = run(&mut h, &m);
    assert!(
        steps(&r).contains(&"reset GPU 0000:e1:00.0 (its function only) and record it".to_string()),
        "{:?}",
        steps(&r)
    );
    assert_eq!(record(&h, "0000:e1:00.0"), None);
    assert_eq!(mapping(&mut h).len(), 4);
}

#[test]
fn a_gpu_gone_from_the_bus_is_quarantined_and_its_slice_goes_on_without_it() {
    let (mut h, m) = converged();
    h.file.pci_devices.retain(|d| d.address != "0000:91:00.0");
    let r = run(&mut h, &m);
    assert!(r.converged(), "not stalled: {:?} {:?}", r.stop, steps(&r));
    assert!(stops(&r).is_empty(), "{:?}", steps(&r));
    assert_eq!(
        mapping(&mut h),
        ["0000:81:00.0", "0000:e1:00.0", "0000:f1:00.0"]
    );
    let l = h.file.gpu_ledger.clone().unwrap();
    let gone = l.gpus.iter().find(|g| g.address == "0000:91:00.0").unwrap();
    assert!(gone.missing);
    let q = gone.quarantine.clone().expect("recorded");
    assert_eq!(q.stage, QuarantineStage::Escalated);
    assert_eq!(q.since, "2026-12-05T10:00:00Z");
    assert_eq!(run(&mut h, &m).writes, 0, "settled");
}

#[test]
fn a_replaced_board_does_not_inherit_its_predecessors_quarantine() {
    let (mut h, mut m) = converged();
    fn dev(h: &mut SimHost) -> &mut crate::host::sim::SimDevice {
        h.file
            .pci_devices
            .iter_mut()
            .find(|d| d.address == "0000:91:00.0")
            .unwrap()
    }
    dev(&mut h).health.not_responding = true;
    run(&mut h, &m);
    assert_eq!(
        record(&h, "0000:91:00.0").unwrap().stage,
        QuarantineStage::Escalated
    );
    // The RMA: another board in slot 6, answering.
    let d = dev(&mut h);
    d.health.not_responding = false;
    d.identity.dsn = Some("48b02d9c5ccf99aa".into());
    d.identity.uuid = Some("GPU-0e0e0e0e-1111-2222-3333-444455556666".into());
    d.identity.serial = Some("1654924069999".into());
    let r = run(&mut h, &m);
    let Some(crate::converge::Stop::Blocked { blockers }) = &r.stop else {
        panic!("the guard asks about the new board: {:?}", r.stop);
    };
    let hash = crate::layout::layout_hash(&h.observe().unwrap().gpus("10de").collect::<Vec<_>>());
    assert!(blockers[0].message.contains(&hash), "{blockers:?}");
    m.partitions[0]
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::layout::ACCEPT_ANNOTATION.into(), hash);
    let r = run(&mut h, &m);
    assert!(r.converged(), "{:?} {:?}", r.stop, steps(&r));
    assert_eq!(
        record(&h, "0000:91:00.0"),
        None,
        "the new board starts clean"
    );
    let l = h.file.gpu_ledger.clone().unwrap();
    let old = l
        .gpus
        .iter()
        .find(|g| g.missing)
        .expect("the old board is remembered");
    assert!(old.quarantine.is_some(), "with its record, for the RMA");
    assert_eq!(mapping(&mut h).len(), 4, "the new board joins its slice");
}

#[test]
fn reboot_auto_reboots_once_for_a_gpu_that_does_not_answer_and_it_rejoins_after() {
    let (mut h, m) = converged();
    let dev = h
        .file
        .pci_devices
        .iter_mut()
        .find(|d| d.address == "0000:91:00.0")
        .unwrap();
    dev.health.not_responding = true;
    let st = h.observe().unwrap();
    let mut d = crate::desired::select::for_host(&m, &st, "10de", "nvidia").unwrap();
    if let Some(t) = &mut d.partition.layout {
        t.now = Some("2026-12-05T10:00:00Z".into());
    }
    d.partition.reboot = crate::desired::reboot::RebootGate::Now("inside the window".into());
    let r = converge(&d, &mut Door::new(&mut h), &Options::default());
    let s = steps(&r);
    assert_eq!(
        s.last().map(String::as_str),
        Some("reboot the host (systemctl reboot)"),
        "{s:?}"
    );
    let why = &r.applied.last().unwrap().planned.why;
    assert!(why.starts_with("GPU 0000:91:00.0 of slice confidential-vm is quarantined and its evidence calls for a reboot"), "{why}");
    assert_eq!(h.file.boot.as_ref().unwrap().reboots_asked, 1);
    // Still this boot: nothing more (the host is on its way down).
    let again = converge(&d, &mut Door::new(&mut h), &Options::default());
    assert_eq!(again.writes, 0, "{:?}", steps(&again));
    // The host is back and the GPU answers: healthy in a later boot, it rejoins by itself.
    h.reboot_host();
    h.file
        .pci_devices
        .iter_mut()
        .find(|d| d.address == "0000:91:00.0")
        .unwrap()
        .health
        .not_responding = false;
    let st = h.observe().unwrap();
    let mut d2 = crate::desired::select::for_host(&m, &st, "10de", "nvidia").unwrap();
    d2.partition.reboot = d.partition.reboot.clone();
    let r = converge(&d2, &mut Door::new(&mut h), &Options::default());
    assert!(r.converged(), "{:?} {:?}", r.stop, steps(&r));
    assert_eq!(record(&h, "0000:91:00.0"), None, "{:?}", steps(&r));
    assert_eq!(mapping(&mut h).len(), 4);
    assert_eq!(h.file.boot.as_ref().unwrap().reboots_asked, 1, "once");
}

#[test]
fn a_gpu_still_sick_after_the_reboot_waits_for_a_person() {
    let (mut h, m) = converged();
    h.file
        .pci_devices
        .iter_mut()
        .find(|d| d.address == "0000:91:00.0")
        .unwrap()
        .health
        .not_responding = true;
    let gate = crate::desired::reboot::RebootGate::Now("inside the window".into());
    let go = |h: &mut SimHost| {
        let st = h.observe().unwrap();
        let mut d = crate::desired::select::for_host(&m, &st, "10de", "nvidia").unwrap();
        d.partition.reboot = gate.clone();
        converge(&d, &mut Door::new(h), &Options::default())
    };
    go(&mut h);
    h.reboot_host();
    let r = go(&mut h);
    assert!(
        !steps(&r).iter().any(|s| s.starts_with("reboot")),
        "{:?}",
        steps(&r)
    );
    assert_eq!(h.file.boot.as_ref().unwrap().reboots_asked, 1);
    assert_eq!(
        record(&h, "0000:91:00.0").unwrap().stage,
        QuarantineStage::Escalated
    );
}

/// The reference manifests with the container slice's admin allowing
/// `servers.onGpuQuarantine: Shrink`.
fn shrinking() -> Manifests {
    let mut m = manifests();
    m.partitions[0].spec.slices[0]
        .servers
        .as_mut()
        .unwrap()
        .on_gpu_quarantine = gpuplane_crds::OnGpuQuarantine::Shrink;
    m
}

#[test]
fn a_slice_that_allows_shrink_restarts_its_server_on_the_remaining_gpus_and_grows_back() {
    let mut h = twin();
    // A model that fits two GPUs (the reference one, 234 GB, does not: see the next test).
    for model in h.file.files.as_mut().unwrap().models.values_mut() {
        model.shard_bytes = 1_000_000_000;
    }
    let m = shrinking();
    assert!(run(&mut h, &m).converged());
    xid(&mut h, "0000:11:00", 48);
    // Quarantined and shrunk in the same converge, then reset, proved and grown back: run the
    // two halves apart by keeping the GPU busy (no reset while a process holds it).
    hold(&mut h);
    let r = run(&mut h, &m);
    let s = steps(&r);
    assert!(
        s.iter()
            .any(|x| x.starts_with("write unit sglang-qwen.service")),
        "{s:?}"
    );
    let st = h.observe().unwrap();
    let unit = st
        .units
        .iter()
        .find(|(k, _)| k.ends_with(SERVER_UNIT))
        .and_then(|(_, u)| u.file.clone())
        .unwrap();
    assert!(unit.contains("--tp-size 2"), "{unit}");
    assert!(unit.contains("CUDA_VISIBLE_DEVICES=0,1"), "{unit}");
    let note = r
        .notes
        .iter()
        .find(|n| n.reason == gpuplane_crds::reason::Reason::ShrunkForQuarantine)
        .expect("the server says it was shrunk");
    assert!(
        note.message
            .contains("serves on 2 GPUs at tensor-parallel size 2 (its spec: 4)"),
        "{}",
        note.message
    );
    assert!(
        !steps(&r).iter().any(|x| x.starts_with("reset GPU")),
        "not reset while held"
    );
    // The holder lets go: reset, proved, back at its own size.
    h.file.holders.clear();
    let r = run(&mut h, &m);
    assert!(r.converged(), "{:?} {:?}", r.stop, steps(&r));
    let st = h.observe().unwrap();
    let unit = st
        .units
        .iter()
        .find(|(k, _)| k.ends_with(SERVER_UNIT))
        .and_then(|(_, u)| u.file.clone())
        .unwrap();
    assert!(unit.contains("--tp-size 4"), "{unit}");
}

#[test]
fn a_shrink_the_weights_would_not_fit_stops_the_server_instead() {
    let mut h = twin();
    let m = shrinking();
    assert!(run(&mut h, &m).converged());
    xid(&mut h, "0000:11:00", 48);
    hold(&mut h);
    let r = run(&mut h, &m);
    assert!(
        !r.notes
            .iter()
            .any(|n| n.reason == gpuplane_crds::reason::Reason::ShrunkForQuarantine),
        "{:?}",
        r.notes
    );
    let stop = r
        .applied
        .iter()
        .find(|a| a.planned.step.to_string() == format!("stop unit {SERVER_UNIT} on container 129"))
        .expect("the server stops");
    assert!(
        stop.planned.why.contains("only its server stops"),
        "{}",
        stop.planned.why
    );
    assert!(
        !steps(&r).iter().any(|x| x.starts_with("write unit")),
        "{:?}",
        steps(&r)
    );
    let Some(crate::converge::Stop::Blocked { blockers }) = &r.stop else {
        panic!("{:?}", r.stop);
    };
    assert_eq!(
        blockers[0].reason,
        gpuplane_crds::reason::Reason::GpuQuarantined
    );
}

/// A process nobody manages holds 0000:11:00.0 (a CUDA context left behind): no reset under it.
fn hold(h: &mut SimHost) {
    h.file.holders.push(crate::host::sim::SimHolder {
        address: "0000:11:00.0".into(),
        holder: crate::host::model::Holder {
            pid: 999,
            command: "stuck-cuda-context".into(),
            ..Default::default()
        },
    });
}
