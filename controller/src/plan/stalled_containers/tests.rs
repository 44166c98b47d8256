//! Two container slices on the twin's NUMA node 0 (`inference` by addresses in LXC 129, `side`
//! by UUIDs in LXC 130), the VM slice as in the reference: after a boot renumbers the minors,
//! the stalled slice's container names none of the other slice's GPUs.

use crate::converge::{converge, Options, Report, Stop};
use crate::door::Door;
use crate::host::model::RunState;
use crate::host::sim::SimHost;
use crate::host::Host;
use crate::manifests::Manifests;
use crate::step::Step;
use crate::testutil::{manifests, twin};
use gpuplane_crds::{GpuSelector, PciAddress};
use std::collections::BTreeSet;

fn run(h: &mut SimHost, m: &Manifests) -> Report {
    let st = h.observe().unwrap();
    let d = crate::desired::select::for_host(m, &st, "10de", "nvidia").expect("valid");
    converge(&d, &mut Door::new(h), &Options::default())
}

/// The twin without its server, container 130 beside 129, and the partition split three ways.
fn two_containers() -> (SimHost, Manifests) {
    let mut h = twin();
    h.file.units.clear();
    h.file.holders.clear();
    let mut ct = h.file.containers[&129].clone();
    ct.config = "arch: amd64\nhostname: side\nonboot: 1\nunprivileged: 0\n".into();
    h.file.containers.insert(130, ct);
    let mut m = manifests();
    // A GPU that falls off the bus stalls its slice here (the quarantine would take it out).
    crate::testutil::without_quarantine(&mut m);
    m.servers.clear();
    let uuid = |a: &str| {
        h.file
            .pci_devices
            .iter()
            .find(|d| d.address == a)
            .and_then(|d| d.identity.uuid.clone())
            .unwrap()
    };
    let mut side = m.partitions[0].spec.slices[0].clone();
    side.name = "side".into();
    side.servers = None;
    side.gpus = GpuSelector {
        uuids: Some(vec![uuid("0000:61:00.0"), uuid("0000:71:00.0")]),
        ..Default::default()
    };
    side.consumer.as_mut().unwrap().lxc.as_mut().unwrap().vmid = 130;
    let inference = &mut m.partitions[0].spec.slices[0];
    inference.gpus = GpuSelector {
        addresses: Some(vec![
            PciAddress("0000:01:00.0".into()),
            PciAddress("0000:11:00.0".into()),
        ]),
        ..Default::default()
    };
    m.partitions[0].spec.slices.push(side);
    (h, m)
}

fn minors(h: &mut SimHost, vmid: u32) -> BTreeSet<u32> {
    h.observe().unwrap().containers[&vmid]
        .gpu_mounts
        .minors
        .clone()
}

/// The minor `addr` has now.
fn minor_of(h: &SimHost, addr: &str) -> u32 {
    let d = h.file.pci_devices.iter().find(|d| d.address == addr);
    d.and_then(|d| d.minor).unwrap()
}

#[test]
fn a_stalled_slice_container_loses_the_line_that_now_names_another_slice_gpu() {
    let (mut h, m) = two_containers();
    let r = run(&mut h, &m);
    assert!(r.converged(), "{:?}", r.stop);
    assert_eq!(minors(&mut h, 129), BTreeSet::from([0, 1]));
    assert_eq!(minors(&mut h, 130), BTreeSet::from([2, 3]));
    // 0000:11:00.0 falls off the bus; the boot numbers 61:00.0 as minor 1.
    h.file.pci_devices.retain(|d| d.address != "0000:11:00.0");
    h.boot_every_gpu_on_nvidia();
    assert_eq!(minor_of(&h, "0000:61:00.0"), 1);
    let r = run(&mut h, &m);
    let Some(Stop::Blocked { blockers }) = &r.stop else {
        panic!("inference stalls: {:?}", r.stop);
    };
    assert!(
        blockers
            .iter()
            .any(|b| b.reason == "GpuMissing" && b.message.starts_with("slice inference:")),
        "{blockers:?}"
    );
    // The UUID slice follows its GPUs to minors 1 and 2; the stalled slice keeps only 01:00.0.
    assert_eq!(minors(&mut h, 130), BTreeSet::from([1, 2]));
    assert_eq!(minors(&mut h, 129), BTreeSet::from([0]));
    let why = r
        .applied
        .iter()
        .find(|a| matches!(a.planned.step, Step::SetContainerGpus { vmid: 129, .. }))
        .map(|a| a.planned.why.clone())
        .expect("the stalled container is narrowed");
    assert!(
        why.contains("/dev/nvidia1 (now GPU 0000:61:00.0 of slice side)"),
        "{why}"
    );
    // Nothing else was done for the stalled slice: its container was not stopped or started.
    assert!(
        !r.applied.iter().any(|a| matches!(
            a.planned.step,
            Step::StopContainer { vmid: 129 } | Step::StartContainer { vmid: 129 }
        )),
        "{:?}",
        r.applied
    );
    assert_eq!(h.file.containers[&129].state, RunState::Running);
    assert_eq!(run(&mut h, &m).writes, 0, "and then nothing");
}

#[test]
fn a_replaced_board_is_taken_out_of_the_stalled_container_and_every_gpu_cgroup_too() {
    let (mut h, m) = two_containers();
    assert!(run(&mut h, &m).converged());
    // The container's device cgroup was widened by hand to every GPU of the host.
    let c = h.file.containers.get_mut(&129).unwrap();
    c.config
        .push_str("lxc.cgroup2.devices.allow: c 195:* rwm\n");
    // 11:00.0 is replaced in place by another board (an RMA): same slot, other identity.
    let d = h
        .file
        .pci_devices
        .iter_mut()
        .find(|d| d.address == "0000:11:00.0")
        .unwrap();
    d.identity.dsn = Some("77000000000000aa".into());
    d.identity.uuid = Some("GPU-99999999-0000-0000-0000-0000000000aa".into());
    d.identity.serial = Some("99aa".into());
    let r = run(&mut h, &m);
    assert!(matches!(r.stop, Some(Stop::Blocked { .. })), "{:?}", r.stop);
    assert_eq!(minors(&mut h, 129), BTreeSet::from([0]));
    let st = h.observe().unwrap();
    assert!(
        !st.containers[&129]
            .gpu_mounts
            .cgroup_allow_any_minor
            .contains(&crate::proxmox::lxc_conf::NVIDIA_MAJOR),
        "{}",
        h.file.containers[&129].config
    );
    assert_eq!(minors(&mut h, 130), BTreeSet::from([2, 3]));
    assert_eq!(run(&mut h, &m).writes, 0);
}
