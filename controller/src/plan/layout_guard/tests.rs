//! The guard on the simulated reference host (eight identical GPUs, four per NUMA node, an LXC
//! slice with a server and a VM slice): renumberings followed or stopped, GPUs swapped,
//! replaced, gone; the acknowledgement; and the ledger's own fixpoint.

use super::{Reason, GPU_MISSING, GPU_REPLACED, LAYOUT_CHANGED};
use crate::converge::{converge, Options, Report, Stop};
use crate::door::Door;
use crate::host::ledger::Ledger;
use crate::host::model::{GpuIdentity, HostState, PciDevice, RunState};
use crate::host::sim::SimHost;
use crate::host::Host;
use crate::layout::matching::match_gpus;
use crate::layout::ACCEPT_ANNOTATION;
use crate::manifests::Manifests;
use crate::step::Step;
use crate::testutil::{manifests, twin};

/// Resolves `m` on `h` and converges it.
fn run(h: &mut SimHost, m: &Manifests) -> Report {
    let st = h.observe().unwrap();
    let d = crate::desired::select::for_host(m, &st, "10de", "nvidia").expect("valid");
    converge(&d, &mut Door::new(h), &Options::default())
}

/// The twin converged to the reference split, and its manifests.
fn converged() -> (SimHost, Manifests) {
    let mut h = twin();
    let m = manifests();
    let r = run(&mut h, &m);
    assert!(r.converged(), "{:?}", r.stop);
    assert!(
        h.file.gpu_ledger.is_some(),
        "the first converge records the GPUs"
    );
    let again = run(&mut h, &m);
    assert_eq!(again.writes, 0, "{:?}", steps(&again));
    (h, m)
}

fn steps(r: &Report) -> Vec<String> {
    r.applied
        .iter()
        .map(|a| a.planned.step.to_string())
        .collect()
}

/// The blockers' reasons and messages of a blocked run.
fn blocked(r: &Report) -> Vec<(Reason, String)> {
    match &r.stop {
        Some(Stop::Blocked { blockers }) => blockers
            .iter()
            .map(|b| (b.reason, b.message.clone()))
            .collect(),
        other => panic!("not blocked: {other:?} after {:?}", steps(r)),
    }
}

/// The why of `r`'s one write besides container narrowings (`stalled_containers.rs`), which
/// must take `path` (and only it) out of the VM's mapping because it names another GPU than
/// the one there now.
fn only_narrowing(r: &Report, path: &str) -> String {
    let s = steps(r);
    let others: Vec<_> = r
        .applied
        .iter()
        .filter(|a| !matches!(a.planned.step, Step::SetContainerGpus { .. }))
        .collect();
    assert_eq!(others.len(), 1, "one write while stalled: {s:?}");
    let a = others[0];
    let Step::SetPciMapping { mapping, entries } = &a.planned.step else {
        panic!("the mapping alone: {s:?}");
    };
    assert_eq!(mapping, "pro6000-vm");
    assert!(
        entries.iter().all(|e| !e.paths.contains(&path.to_string())),
        "{s:?}"
    );
    assert!(
        a.planned.why.contains("no longer at their paths"),
        "{}",
        a.planned.why
    );
    a.planned.why.clone()
}

/// Moves the device at `from` to address `to` (a renumbering: slot, path, identity stay).
fn readdress(h: &mut SimHost, from: &str, to: &str) {
    let d = h
        .file
        .pci_devices
        .iter_mut()
        .find(|d| d.address == from)
        .unwrap();
    d.address = to.into();
}

fn device<'a>(h: &'a mut SimHost, addr: &str) -> &'a mut crate::host::sim::SimDevice {
    h.file
        .pci_devices
        .iter_mut()
        .find(|d| d.address == addr)
        .unwrap()
}

/// The `accept-layout` hash a stall message offers.
fn offered_hash(message: &str) -> String {
    let at = message
        .find(&format!("{ACCEPT_ANNOTATION}="))
        .expect("the message says how to accept")
        + ACCEPT_ANNOTATION.len()
        + 1;
    message[at..]
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect()
}

fn annotate(m: &mut Manifests, hash: &str) {
    m.partitions[0]
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ACCEPT_ANNOTATION.into(), hash.into());
}

/// The paths of VM 200's mapping `pro6000-vm`, sorted.
pub(in crate::plan) fn mapping(h: &mut SimHost) -> Vec<String> {
    let st = h.observe().unwrap();
    let mut v: Vec<String> = st.pci_mappings["pro6000-vm"]
        .iter()
        .flat_map(|e| e.paths.clone())
        .collect();
    v.sort();
    v
}

#[test]
fn a_renumbering_that_keeps_every_gpu_with_its_slice_is_followed_and_reported() {
    let (mut h, m) = converged();
    // Two NUMA-0 GPUs trade addresses (a riser reseated): each keeps its slot and identity.
    readdress(&mut h, "0000:01:00.0", "0000:aa:00.0");
    readdress(&mut h, "0000:11:00.0", "0000:01:00.0");
    readdress(&mut h, "0000:aa:00.0", "0000:11:00.0");
    let r = run(&mut h, &m);
    assert!(r.converged(), "{:?} {:?}", r.stop, steps(&r));
    let why: Vec<&str> = r
        .applied
        .iter()
        .filter(|a| matches!(a.planned.step, Step::WriteLedger { .. }))
        .map(|a| a.planned.why.as_str())
        .collect();
    assert_eq!(why.len(), 1, "{:?}", steps(&r));
    assert!(
        why[0].contains(
            "slot 1 (GPU-6f2c1e00-5a3b-4c1d-9e8f-0a1b2c3d4e00) 0000:01:00.0 → 0000:11:00.0"
        ),
        "{}",
        why[0]
    );
    assert!(why[0].contains("0000:11:00.0 → 0000:01:00.0"), "{}", why[0]);
    assert_eq!(run(&mut h, &m).writes, 0);
}

#[test]
fn gpus_that_would_change_owner_under_an_unchanged_spec_stall_both_slices_until_accepted() {
    let (mut h, mut m) = converged();
    let mapped = mapping(&mut h);
    // The GPU of slot 1 (NUMA 0, the container's) and that of slot 5 (NUMA 1, the VM's) trade
    // places: a numaNode selector would hand the container's GPU to the confidential VM.
    let a = device(&mut h, "0000:01:00.0").identity.clone();
    let b = device(&mut h, "0000:81:00.0").identity.clone();
    let keep_place = |mut id: GpuIdentity, at: &GpuIdentity| {
        (id.slot, id.path) = (at.slot.clone(), at.path.clone());
        id
    };
    device(&mut h, "0000:01:00.0").identity = keep_place(b.clone(), &a);
    device(&mut h, "0000:81:00.0").identity = keep_place(a.clone(), &b);
    let before = h.file.clone();
    let r = run(&mut h, &m);
    let b = blocked(&r);
    // Nothing changes while stalled but the one safety write: the VM's mapping entry at
    // 81:00.0 names slot 5's GPU, and the container's GPU sits there now.
    assert_eq!(h.file.pci_devices, before.pci_devices);
    let narrowing = only_narrowing(&r, "0000:81:00.0");
    assert!(
        narrowing.contains("0000:81:00.0 (dsn 48b02d9c5ccf047c → 48b02d9c5ccf0078)"),
        "{narrowing}"
    );
    let narrowed: Vec<String> = mapped
        .iter()
        .filter(|p| *p != "0000:81:00.0")
        .cloned()
        .collect();
    assert_eq!(mapping(&mut h), narrowed);
    // The container's /dev/nvidia0 is the VM slice's board now: taken out of its config too.
    let ct = h.observe().unwrap().containers[&129]
        .gpu_mounts
        .minors
        .clone();
    assert_eq!(ct, std::collections::BTreeSet::from([1, 2, 3]));
    assert_eq!(run(&mut h, &m).writes, 0, "and then nothing");
    assert_eq!(b.len(), 2, "{b:?}");
    assert!(
        b.iter().all(|(reason, _)| *reason == LAYOUT_CHANGED),
        "{b:?}"
    );
    let msg = &b[0].1;
    assert!(
        msg.contains(
            "0000:01:00.0 → 0000:81:00.0: was slice inference, would be slice confidential-vm"
        ),
        "{msg}"
    );
    // The server on the frozen slice keeps running.
    let st: HostState = h.observe().unwrap();
    assert!(st.units.values().any(|u| u.is_active()));
    // Acknowledged with the offered hash: the agent proceeds, then rests.
    annotate(&mut m, &offered_hash(msg));
    let r = run(&mut h, &m);
    assert!(r.converged(), "{:?} {:?}", r.stop, steps(&r));
    assert_ne!(mapping(&mut h), Vec::<String>::new());
    assert_eq!(
        mapped,
        mapping(&mut h),
        "numaNode 1 is still these addresses"
    );
    assert_eq!(run(&mut h, &m).writes, 0);
}

#[test]
fn an_acknowledgement_covers_only_the_layout_it_names() {
    let (mut h, mut m) = converged();
    crate::testutil::without_quarantine(&mut m);
    annotate(&mut m, "000000000000");
    h.file.pci_devices.retain(|d| d.address != "0000:91:00.0");
    let r = run(&mut h, &m);
    assert_eq!(blocked(&r)[0].0, GPU_MISSING);
    assert_eq!(r.writes, 0);
}

#[test]
fn a_slots_slice_follows_its_gpus_to_their_new_addresses() {
    let mut h = twin();
    let mut m = manifests();
    m.partitions[0].spec.slices[1].gpus = gpuplane_crds::GpuSelector {
        slots: Some(["5", "6", "7", "8"].map(String::from).to_vec()),
        ..Default::default()
    };
    assert!(run(&mut h, &m).converged());
    assert_eq!(
        mapping(&mut h),
        [
            "0000:81:00.0",
            "0000:91:00.0",
            "0000:e1:00.0",
            "0000:f1:00.0"
        ]
    );
    // A firmware update renumbers NUMA node 1's buses.
    for (from, to) in [("81", "a1"), ("91", "b1"), ("e1", "c1"), ("f1", "d1")] {
        readdress(
            &mut h,
            &format!("0000:{from}:00.0"),
            &format!("0000:{to}:00.0"),
        );
    }
    let r = run(&mut h, &m);
    assert!(r.converged(), "{:?} {:?}", r.stop, steps(&r));
    assert_eq!(
        mapping(&mut h),
        [
            "0000:a1:00.0",
            "0000:b1:00.0",
            "0000:c1:00.0",
            "0000:d1:00.0"
        ]
    );
    let ledger = r
        .applied
        .iter()
        .find(|a| matches!(a.planned.step, Step::WriteLedger { .. }))
        .expect("the change is recorded");
    assert!(
        ledger.planned.why.contains(
            "slot 5 (GPU-6f2c1e04-5a3b-4c1d-9e8f-0a1b2c3d4e04) 0000:81:00.0 → 0000:a1:00.0"
        ),
        "{}",
        ledger.planned.why
    );
    assert_eq!(run(&mut h, &m).writes, 0);
}

#[test]
fn a_missing_gpu_stalls_only_its_slice_and_the_others_keep_converging_without_quarantine() {
    let (mut h, mut m) = converged();
    crate::testutil::without_quarantine(&mut m);
    let mapped = mapping(&mut h);
    h.file.pci_devices.retain(|d| d.address != "0000:91:00.0");
    // The other slice has work to do: its container was stopped.
    h.file.containers.get_mut(&129).unwrap().state = RunState::Stopped;
    let r = run(&mut h, &m);
    let b = blocked(&r);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0].0, GPU_MISSING);
    assert!(b[0].1.starts_with("slice confidential-vm:"), "{}", b[0].1);
    assert!(b[0].1.contains("slot 6 (GPU-6f2c1e05-5a3b-4c1d-9e8f-0a1b2c3d4e05) at 0000:91:00.0 is gone from the bus"), "{}", b[0].1);
    assert_eq!(
        h.file.containers[&129].state,
        RunState::Running,
        "{:?}",
        steps(&r)
    );
    assert_eq!(
        mapping(&mut h),
        mapped,
        "the stalled slice's mapping is not touched"
    );
}

#[test]
fn a_gpu_replaced_in_place_is_seen_on_nvidia_before_it_reaches_the_vm() {
    let (mut h, mut m) = converged();
    // An RMA: slot 6 holds another board now, still on vfio-pci (so NVML cannot name it).
    let d = device(&mut h, "0000:91:00.0");
    assert_eq!(d.driver.as_deref(), Some("vfio-pci"));
    d.identity.dsn = Some("48b02d9c5ccf99aa".into());
    d.identity.uuid = Some("GPU-0e0e0e0e-1111-2222-3333-444455556666".into());
    d.identity.serial = Some("1654924069999".into());
    let r = run(&mut h, &m);
    let b = blocked(&r);
    // The VM's mapping loses 91:00.0 (it names the board that was there), nothing else moves.
    let narrowing = only_narrowing(&r, "0000:91:00.0");
    assert!(
        narrowing.contains("0000:91:00.0 (dsn 48b02d9c5ccf057d → 48b02d9c5ccf99aa)"),
        "{narrowing}"
    );
    assert_eq!((b.len(), b[0].0), (1, GPU_REPLACED), "{b:?}");
    assert!(
        b[0].1.contains("replaced by another GPU at 0000:91:00.0"),
        "{}",
        b[0].1
    );
    annotate(&mut m, &offered_hash(&b[0].1));
    let r = run(&mut h, &m);
    assert!(r.converged(), "{:?} {:?}", r.stop, steps(&r));
    let s = steps(&r);
    let to_host = s
        .iter()
        .position(|x| x == "set driver_override of 0000:91:00.0 to nvidia")
        .unwrap_or_else(|| panic!("identified on nvidia first: {s:?}"));
    let to_vfio = s
        .iter()
        .rposition(|x| x == "set driver_override of 0000:91:00.0 to vfio-pci")
        .expect("then to the VM");
    assert!(to_host < to_vfio, "{s:?}");
    let l = h.file.gpu_ledger.clone().unwrap();
    let e = l.gpus.iter().find(|g| g.address == "0000:91:00.0").unwrap();
    assert_eq!(
        e.identity.uuid.as_deref(),
        Some("GPU-0e0e0e0e-1111-2222-3333-444455556666"),
        "remembered from nvidia"
    );
    assert!(!e.unverified);
    assert_eq!(
        h.observe().unwrap().pci_devices["0000:91:00.0"]
            .driver
            .as_deref(),
        Some("vfio-pci")
    );
    assert_eq!(run(&mut h, &m).writes, 0);
}

#[test]
fn a_vfio_gpu_is_selected_by_the_uuid_the_ledger_remembers() {
    let (mut h, mut m) = converged();
    // 0000:81:00.0 is on vfio-pci now: NVML cannot name it, the ledger can.
    let st = h.observe().unwrap();
    assert_eq!(st.pci_devices["0000:81:00.0"].identity.uuid, None);
    m.partitions[0].spec.slices[1].gpus = gpuplane_crds::GpuSelector {
        uuids: Some(vec!["GPU-6f2c1e04-5a3b-4c1d-9e8f-0a1b2c3d4e04".into()]),
        ..Default::default()
    };
    let d = crate::desired::select::for_host(&m, &st, "10de", "nvidia").expect("valid");
    assert_eq!(d.partition.slices[1].gpus, ["0000:81:00.0"]);
    m.partitions[0].spec.slices[1].gpus.uuids = Some(vec!["GPU-nope".into()]);
    let e = crate::desired::select::for_host(&m, &st, "10de", "nvidia").unwrap_err();
    assert!(
        e.to_string()
            .contains("spec.slices[1].gpus.uuids[0]: no GPU on this host has uuid \"GPU-nope\""),
        "{e}"
    );
}

#[test]
fn matching_tells_a_moved_gpu_from_a_replaced_one_and_from_a_gone_one() {
    let gpu = |addr: &str, slot: Option<&str>, dsn: Option<&str>| PciDevice {
        address: addr.into(),
        identity: GpuIdentity {
            slot: slot.map(String::from),
            dsn: dsn.map(String::from),
            ..Default::default()
        },
        ..Default::default()
    };
    let old = [
        gpu("0000:01:00.0", Some("1"), Some("aa")),
        gpu("0000:02:00.0", Some("2"), Some("bb")),
        gpu("0000:03:00.0", Some("3"), None),
        gpu("0000:04:00.0", None, None),
    ];
    let ledger = Ledger {
        partition: "p".into(),
        spec_hash: "h".into(),
        gpus: old
            .iter()
            .map(|d| super::ledger_entry(d, d.identity.clone(), None))
            .collect(),
    };
    let now = [
        gpu("0000:09:00.0", Some("1"), Some("aa")), // renumbered
        gpu("0000:02:00.0", Some("2"), Some("cc")), // replaced in place
        gpu("0000:07:00.0", Some("3"), None),       // renumbered, known by its slot only
        gpu("0000:05:00.0", None, None),            // new; 0000:04:00.0 is gone
    ];
    let refs: Vec<&PciDevice> = now.iter().collect();
    let m = match_gpus(&ledger, &refs);
    assert_eq!(
        m.same,
        [
            (0, "0000:09:00.0".to_string()),
            (2, "0000:07:00.0".to_string())
        ]
    );
    assert_eq!(m.replaced, [(1, "0000:02:00.0".to_string())]);
    assert_eq!(m.missing, [3]);
    assert_eq!(m.added, ["0000:05:00.0"]);
}

#[test]
fn the_stored_ledger_reads_back_and_junk_is_no_ledger() {
    let (h, _) = converged();
    let l = h.file.gpu_ledger.clone().unwrap();
    assert_eq!(l.gpus.len(), 8);
    assert_eq!(Ledger::parse(&l.render()), Some(l));
    assert_eq!(Ledger::parse("{\"gpus\": 3}"), None);
    assert_eq!(Ledger::parse("not json"), None);
}

#[test]
fn status_lists_every_gpu_with_its_remembered_identity_and_the_missing_one() {
    let (mut h, mut m) = converged();
    crate::testutil::without_quarantine(&mut m);
    h.file.pci_devices.retain(|d| d.address != "0000:91:00.0");
    let st = h.observe().unwrap();
    let d = crate::desired::select::for_host(&m, &st, "10de", "nvidia").expect("valid");
    let r = converge(&d, &mut Door::new(&mut h), &Options::default());
    let all = crate::status::compute(&d, &r, &Default::default(), &crate::clock::now());
    let ps = &all[&crate::resource_key::ResourceKey::partition("kpro6")];
    assert_eq!(ps.gpus.len(), 8, "{:?}", ps.gpus);
    let row = |a: &str| ps.gpus.iter().find(|g| g.address == a).unwrap();
    let vm = row("0000:81:00.0");
    assert_eq!(
        (vm.driver.as_str(), vm.owner.as_deref(), vm.slot.as_deref()),
        ("vfio-pci", Some("confidential-vm"), Some("5"))
    );
    assert_eq!(
        vm.uuid.as_deref(),
        Some("GPU-6f2c1e04-5a3b-4c1d-9e8f-0a1b2c3d4e04"),
        "remembered: NVML cannot read a vfio-pci GPU"
    );
    let gone = row("0000:91:00.0");
    assert!(gone.missing);
    assert_eq!(gone.owner.as_deref(), Some("confidential-vm"));
    let hash = ps.layout_hash.clone().unwrap();
    assert!(
        blocked(&r)[0].1.contains(&hash),
        "the status shows the hash the message offers"
    );
}

#[test]
fn a_swap_that_makes_two_selectors_pick_one_gpu_stalls_both_slices_instead_of_refusing_the_spec() {
    let mut h = twin();
    let mut m = manifests();
    // The VM slice by UUIDs, the container slice by NUMA node 0 (as in the reference).
    let uuids: Vec<String> = [
        "0000:81:00.0",
        "0000:91:00.0",
        "0000:e1:00.0",
        "0000:f1:00.0",
    ]
    .iter()
    .map(|a| device(&mut h, a).identity.uuid.clone().unwrap())
    .collect();
    m.partitions[0].spec.slices[1].gpus = gpuplane_crds::GpuSelector {
        uuids: Some(uuids),
        ..Default::default()
    };
    assert!(run(&mut h, &m).converged());
    // A technician swaps the boards of slot 1 (NUMA 0) and slot 5 (NUMA 1): the VM's board
    // now sits on NUMA node 0, where both selectors pick it.
    let a = device(&mut h, "0000:01:00.0").identity.clone();
    let b = device(&mut h, "0000:81:00.0").identity.clone();
    let keep_place = |mut id: GpuIdentity, at: &GpuIdentity| {
        (id.slot, id.path) = (at.slot.clone(), at.path.clone());
        id
    };
    device(&mut h, "0000:01:00.0").identity = keep_place(b.clone(), &a);
    device(&mut h, "0000:81:00.0").identity = keep_place(a, &b);
    let st = h.observe().unwrap();
    let d = crate::desired::select::for_host(&m, &st, "10de", "nvidia")
        .expect("a layout change is not a spec error before it is acknowledged");
    let r = converge(&d, &mut Door::new(&mut h), &Options::default());
    let b = blocked(&r);
    let slices: Vec<&str> = b
        .iter()
        .filter(|(reason, _)| *reason == LAYOUT_CHANGED)
        .filter_map(|(_, m)| m.strip_prefix("slice ")?.split(':').next())
        .collect();
    assert_eq!(slices, ["confidential-vm", "inference"], "{b:?}");
    let msg = &b[0].1;
    assert!(
        msg.contains("now at 0000:01:00.0 is picked by slice confidential-vm and slice inference (it was slice confidential-vm's)"),
        "{msg}"
    );
    // Acknowledged, the overlap is the spec's to fix: refused with the field, before any write.
    annotate(&mut m, &offered_hash(msg));
    let st = h.observe().unwrap();
    let err = crate::desired::select::for_host(&m, &st, "10de", "nvidia").unwrap_err();
    assert!(
        err.to_string()
            .contains("a GPU may belong to one slice only"),
        "{err}"
    );
}
