//! Issue 24's property test: the simulated reference host (eight identical GPUs, four per NUMA
//! node; two LXC slices on NUMA node 0, `inference` in container 129 and `side` in container 130,
//! and a VM slice, each selecting its GPUs by one of the selector kinds) converged, then its
//! layout changed under
//! an unchanged spec — addresses renumbered, GPUs swapped between slots, replaced in place,
//! removed, added, each followed by a reboot (every GPU back on nvidia, minors in probe order) —
//! and converged again. Invariants: no GPU changes owner by the agent's hand unless its ledger
//! owner is kept; identity selectors follow their GPUs; every change is reported old → new; no
//! write touches a stalled slice (none at all when every slice stalls, but the VM mapping
//! narrowed to the entries that still name the GPU at their path, and the containers to the
//! lines that still name a GPU of their own); no mapping entry names another GPU than the one at
//! its path, and no container line a GPU of another owner (issue 37: a stalled container slice
//! kept `/dev/nvidiaN` lines the boot gave to another slice's GPU), after any converge; a swap
//! that makes two selectors pick one GPU stalls like any other change; after the printed hash
//! is accepted the host converges and a further converge makes zero writes.
//!
//! At least 50 layouts in CI; `PROPTEST_CASES=2000 cargo test -p gpuplane --test layout_props`
//! for a long run. The figures are printed at the end (`--nocapture`).

use gpuplane::converge::{converge, Options, Report, Stop};
use gpuplane::desired::select::for_host;
use gpuplane::door::Door;
use gpuplane::host::model::HostState;
use gpuplane::host::sim::SimHost;
use gpuplane::host::Host;
use gpuplane::manifests::Manifests;
use gpuplane::step::Step;
use gpuplane_crds::GpuSelector;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::collections::{BTreeMap, BTreeSet};

/// How the VM slice selects its GPUs.
#[derive(Debug, Clone, Copy)]
enum Sel {
    Numa,
    Slots,
    Uuids,
    Addresses,
}

/// One change of the host's layout (indices are into the device list).
#[derive(Debug, Clone)]
enum Change {
    /// The buses renumbered: device i gets the address of device perm[i] (or a fresh one).
    Renumber(Vec<usize>, bool),
    /// Two GPUs trade slots (a technician moves boards).
    Swap(usize, usize),
    /// A board replaced in place (an RMA).
    Replace(usize),
    /// A GPU fell off the bus.
    Remove(usize),
    /// A GPU appears in a new slot on a NUMA node.
    Add(i32),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (Just((0..8).collect::<Vec<usize>>()).prop_shuffle(), any::<bool>()).prop_map(|(p, fresh)| Change::Renumber(p, fresh)),
        2 => (0..8usize, 0..8usize).prop_map(|(a, b)| Change::Swap(a, b)),
        2 => (0..8usize).prop_map(Change::Replace),
        2 => (0..8usize).prop_map(Change::Remove),
        1 => (0..2i32).prop_map(Change::Add),
    ]
}

/// The selectors of the VM slice, of `inference` and of `side` (the container slices share NUMA
/// node 0, so they never select by it), and the changes.
type Case = ((Sel, Sel, Sel), Vec<Change>);

fn case() -> impl Strategy<Value = Case> {
    let explicit = || prop_oneof![Just(Sel::Slots), Just(Sel::Uuids), Just(Sel::Addresses)];
    (
        (
            prop_oneof![
                Just(Sel::Numa),
                Just(Sel::Slots),
                Just(Sel::Uuids),
                Just(Sel::Addresses)
            ],
            explicit(),
            explicit(),
        ),
        prop::collection::vec(change(), 1..3),
    )
}

/// The selector `sel` for the twin's devices `picked`.
fn selector(sel: Sel, picked: &[&gpuplane::host::sim::SimDevice]) -> GpuSelector {
    let ids = |f: &dyn Fn(&gpuplane::host::sim::SimDevice) -> String| {
        picked.iter().map(|d| f(d)).collect::<Vec<_>>()
    };
    match sel {
        Sel::Numa => GpuSelector {
            numa_node: Some(picked[0].numa_node),
            ..Default::default()
        },
        Sel::Slots => GpuSelector {
            slots: Some(ids(&|d| d.identity.slot.clone().unwrap())),
            ..Default::default()
        },
        Sel::Uuids => GpuSelector {
            uuids: Some(ids(&|d| d.identity.uuid.clone().unwrap())),
            ..Default::default()
        },
        Sel::Addresses => GpuSelector {
            addresses: Some(
                ids(&|d| d.address.clone())
                    .into_iter()
                    .map(gpuplane_crds::PciAddress)
                    .collect(),
            ),
            ..Default::default()
        },
    }
}

/// The twin without its server (the partition alone is under test), container 130 beside 129,
/// quarantine off, and the reference partition split three ways: `inference` (LXC 129) and `side` (LXC 130)
/// take two NUMA-0 GPUs each, the VM slice NUMA node 1, each by its selector of `sels`.
fn start(sels: (Sel, Sel, Sel)) -> (SimHost, Manifests) {
    let mut h = SimHost::from_yaml(gpuplane::EMBEDDED_HOST, "twin").unwrap();
    h.file.units.clear();
    h.file.holders.clear();
    let mut ct = h.file.containers[&129].clone();
    ct.config = "arch: amd64\nhostname: side\nonboot: 1\nunprivileged: 0\n".into();
    h.file.containers.insert(130, ct);
    let mut m = Manifests::default();
    for (n, t) in gpuplane::EMBEDDED_MANIFESTS {
        m.add_text(t, n).unwrap();
    }
    m.servers.clear();
    // The guard's own answer to a GPU gone from the bus (GpuMissing) is under test: the
    // quarantine, which takes such a GPU out of its slice instead, has its own tests.
    m.partitions[0].spec.health = Some(gpuplane_crds::HealthPolicy {
        quarantine: gpuplane_crds::QuarantinePolicy::Never,
        ..Default::default()
    });
    let on = |numa: i32| -> Vec<&gpuplane::host::sim::SimDevice> {
        h.file
            .pci_devices
            .iter()
            .filter(|d| d.numa_node == numa)
            .collect()
    };
    let (numa0, numa1) = (on(0), on(1));
    let slices = &mut m.partitions[0].spec.slices;
    slices[1].gpus = selector(sels.0, &numa1);
    let mut side = slices[0].clone();
    slices[0].gpus = selector(sels.1, &numa0[..2]);
    side.name = "side".into();
    side.servers = None;
    side.gpus = selector(sels.2, &numa0[2..]);
    side.consumer.as_mut().unwrap().lxc.as_mut().unwrap().vmid = 130;
    slices.push(side);
    (h, m)
}

/// The container of each LXC slice.
const CONTAINERS: [(&str, u32); 2] = [("inference", 129), ("side", 130)];

fn run(h: &mut SimHost, m: &Manifests) -> Result<Report, String> {
    let st = h.observe().unwrap();
    let d = for_host(m, &st, "10de", "nvidia").map_err(|e| e.to_string())?;
    Ok(converge(&d, &mut Door::new(h), &Options::default()))
}

/// Which consumer has each physical GPU (by its serial number): `vm` (on vfio-pci and in the
/// mapping), `ct129`/`ct130` (on nvidia and named by that container's config; `ct129+ct130` when
/// both name it), `-` (none).
fn owners(st: &HostState) -> BTreeMap<String, String> {
    let mapped: BTreeSet<&String> = st
        .pci_mappings
        .get("pro6000-vm")
        .map(|es| es.iter().flat_map(|e| e.paths.iter()).collect())
        .unwrap_or_default();
    st.gpus("10de")
        .map(|d| {
            let mut o: Vec<String> = vec![];
            if d.driver.as_deref() == Some("vfio-pci") && mapped.contains(&d.address) {
                o.push("vm".into());
            }
            if d.driver.as_deref() == Some("nvidia") {
                for (_, vmid) in CONTAINERS {
                    let mounted = &st.containers[&vmid].gpu_mounts.minors;
                    if d.nvidia_minor.is_some_and(|n| mounted.contains(&n)) {
                        o.push(format!("ct{vmid}"));
                    }
                }
            }
            let o = if o.is_empty() {
                "-".into()
            } else {
                o.join("+")
            };
            (d.identity.dsn.clone().unwrap(), o)
        })
        .collect()
}

/// Container device lines that name a GPU (by the minor it has now) which was not that
/// container's when the host converged (`o0`): what a start of the container would hand it
/// unasked. Empty after every converge before an acknowledgement.
fn wrong_owner_lines(st: &HostState, o0: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = vec![];
    for (_, vmid) in CONTAINERS {
        for minor in &st.containers[&vmid].gpu_mounts.minors {
            let Some(d) = st.gpus("10de").find(|d| d.nvidia_minor == Some(*minor)) else {
                continue;
            };
            let dsn = d.identity.dsn.clone().unwrap();
            let was = o0.get(&dsn).map(String::as_str).unwrap_or("a new GPU");
            if was != format!("ct{vmid}") {
                out.push(format!(
                    "container {vmid}: /dev/nvidia{minor} is {} ({dsn}), which was {was}'s",
                    d.address
                ));
            }
        }
    }
    out
}

/// Applies `c` to the host's devices, then reboots: every GPU on nvidia, minors in probe order.
fn apply(h: &mut SimHost, c: &Change, fresh: &mut u32) {
    let devs = &mut h.file.pci_devices;
    let n = devs.len();
    match c {
        Change::Renumber(perm, new_buses) => {
            // The permutation of 0..8 restricted to the devices there are (more, after an Add,
            // keep their place): device i takes device p[i]'s address, or (new buses) that
            // address with its bus number moved up by 2, as a firmware update renumbers.
            let p: Vec<usize> = perm.iter().copied().filter(|x| *x < n).collect();
            let addrs: Vec<String> = devs.iter().map(|d| d.address.clone()).collect();
            for (i, d) in devs.iter_mut().enumerate() {
                let a = &addrs[p.get(i).copied().unwrap_or(i)];
                d.address = if *new_buses {
                    let bus = u8::from_str_radix(&a[5..7], 16).unwrap().wrapping_add(2);
                    format!("0000:{bus:02x}:00.0")
                } else {
                    a.clone()
                };
            }
        }
        Change::Swap(a, b) if a % n != b % n => {
            let (a, b) = (a % n, b % n);
            let (ia, ib) = (devs[a].identity.clone(), devs[b].identity.clone());
            devs[a].identity = gpuplane::host::model::GpuIdentity {
                slot: ia.slot.clone(),
                path: ia.path.clone(),
                ..ib.clone()
            };
            devs[b].identity = gpuplane::host::model::GpuIdentity {
                slot: ib.slot,
                path: ib.path,
                ..ia
            };
        }
        Change::Swap(..) => {}
        Change::Replace(i) => {
            *fresh += 1;
            let id = &mut devs[i % n].identity;
            id.dsn = Some(format!("77{:014x}", *fresh));
            id.uuid = Some(format!("GPU-99999999-0000-0000-0000-{:012x}", *fresh));
            id.serial = Some(format!("99{}", *fresh));
        }
        Change::Remove(i) => {
            if n > 1 {
                devs.remove(i % n);
            }
        }
        Change::Add(numa) => {
            *fresh += 1;
            let mut d = devs[0].clone();
            d.address = format!("0000:{:02x}:00.0", 0xc0 + *fresh % 0x30);
            if devs.iter().any(|x| x.address == d.address) {
                return;
            }
            d.numa_node = *numa;
            d.iommu_group = Some(40 + *fresh);
            d.identity.slot = Some(format!("{}", 20 + *fresh));
            d.identity.path = Some(format!("pci0000:c0/{:02x}.0/00.0", *fresh));
            d.identity.dsn = Some(format!("77{:014x}", *fresh));
            d.identity.uuid = Some(format!("GPU-99999999-0000-0000-0000-{:012x}", *fresh));
            d.identity.serial = Some(format!("99{}", *fresh));
            devs.push(d);
        }
    }
    // Reboot: the NVIDIA module probes every GPU, in address order.
    h.boot_every_gpu_on_nvidia();
    let groups: BTreeMap<u32, String> = h.file.iommu.group_types.clone();
    for g in h.file.pci_devices.iter().filter_map(|d| d.iommu_group) {
        h.file
            .iommu
            .group_types
            .entry(g)
            .or_insert_with(|| groups.values().next().cloned().unwrap_or_default());
    }
}

/// The slices a blocked run froze (its layout blockers name them first), and the messages.
fn stalled(r: &Report) -> Option<(BTreeSet<String>, Vec<String>)> {
    let Some(Stop::Blocked { blockers }) = &r.stop else {
        return None;
    };
    let layout = ["HostLayoutChanged", "GpuReplaced", "GpuMissing"];
    let mine: Vec<_> = blockers
        .iter()
        .filter(|b| layout.contains(&b.reason.as_str()))
        .collect();
    if mine.is_empty() {
        return None;
    }
    let slices = mine
        .iter()
        .filter_map(|b| {
            b.message
                .strip_prefix("slice ")
                .and_then(|m| m.split(':').next())
                .map(String::from)
        })
        .collect();
    Some((slices, mine.iter().map(|b| b.message.clone()).collect()))
}

/// What the host had before the converge, for judging narrowings: the VM mapping's entries'
/// paths and each container's minors.
struct Before {
    mapped: Vec<Vec<String>>,
    minors: BTreeMap<u32, BTreeSet<u32>>,
}

/// Whether `step` only takes entries out of the VM's mapping, or lines out of a container.
fn narrows(step: &Step, before: &Before) -> bool {
    match step {
        Step::SetPciMapping { mapping, entries } => {
            mapping == "pro6000-vm" && entries.iter().all(|e| before.mapped.contains(&e.paths))
        }
        Step::SetContainerGpus { vmid, minors } => {
            before.minors.get(vmid).is_some_and(|b| minors.is_subset(b))
        }
        _ => false,
    }
}

/// The VM mapping's entries whose description names another GPU than the one at their path
/// (by its serial number capability, which the twin's GPUs all have): what a VM start would
/// take unasked. Empty after every converge. A path with no device is not counted: Proxmox's
/// start check refuses it ("pci device '<path>' not found").
fn mislabelled(st: &HostState) -> Vec<String> {
    let entries = st
        .pci_mappings
        .get("pro6000-vm")
        .cloned()
        .unwrap_or_default();
    entries
        .iter()
        .filter_map(|e| {
            let named = e.description.as_deref()?;
            let dsn = named.split(' ').find_map(|w| w.strip_prefix("dsn="))?;
            let p = &e.paths[0];
            let function = if p.contains('.') {
                p.clone()
            } else {
                format!("{p}.0")
            };
            let there = st.pci_devices.get(&function)?.identity.dsn.as_deref();
            (there != Some(dsn)).then(|| format!("{} names {dsn}, holds {there:?}", e.paths[0]))
        })
        .collect()
}

/// Whether container `vmid` is the consumer of a slice in `stalled`.
fn stalled_container(stalled: &BTreeSet<String>, vmid: u32) -> bool {
    CONTAINERS
        .iter()
        .any(|(s, v)| *v == vmid && stalled.contains(*s))
}

#[derive(Default, Debug)]
struct Figures {
    layouts: u64,
    stalls: u64,
    follows: u64,
    refused: u64,
    wrong_owner_moves: u64,
    writes_while_stalled: u64,
    stale_entries_removed: u64,
    container_lines_removed: u64,
    wrong_owner_lines: u64,
}

fn one(sels: (Sel, Sel, Sel), changes: &[Change], f: &mut Figures) -> Result<(), TestCaseError> {
    let (mut h, mut m) = start(sels);
    let sel = sels.0;
    let r0 = run(&mut h, &m).map_err(TestCaseError::fail)?;
    prop_assert!(r0.converged(), "{:?}", r0.stop);
    let o0 = owners(&h.observe().unwrap());
    let before: BTreeMap<String, String> = h
        .file
        .pci_devices
        .iter()
        .map(|d| (d.identity.dsn.clone().unwrap(), d.address.clone()))
        .collect();
    let mut fresh = 0;
    for c in changes {
        apply(&mut h, c, &mut fresh);
    }
    f.layouts += 1;
    let o1 = owners(&h.observe().unwrap());
    let st1 = h.observe().unwrap();
    let prior = Before {
        mapped: st1.pci_mappings["pro6000-vm"]
            .iter()
            .map(|e| e.paths.clone())
            .collect(),
        minors: CONTAINERS
            .iter()
            .map(|(_, v)| (*v, st1.containers[v].gpu_mounts.minors.clone()))
            .collect(),
    };
    let mapped_before = &prior.mapped;
    // A layout change is never a spec error before it is acknowledged: two selectors that pick
    // one GPU after a swap stall like any other change (issue 37).
    let r = run(&mut h, &m).map_err(|e| TestCaseError::fail(format!("{e} {changes:?}")))?;
    let o2 = owners(&h.observe().unwrap());
    prop_assert_eq!(
        mislabelled(&h.observe().unwrap()),
        Vec::<String>::new(),
        "the mapping names the GPUs at its paths"
    );
    let wrong = wrong_owner_lines(&h.observe().unwrap(), &o0);
    f.wrong_owner_lines += wrong.len() as u64;
    prop_assert!(
        wrong.is_empty(),
        "no container names another owner's GPU: {:?} {:?}",
        wrong,
        changes
    );
    for (dsn, now) in &o2 {
        if let (Some(was), Some(then)) = (o0.get(dsn), o1.get(dsn)) {
            // Taking a GPU away (to no consumer) is never a wrong move: a reboot may have given
            // a container a minor that now names another slice's GPU.
            if now != then && now != was && *now != "-" {
                f.wrong_owner_moves += 1;
                prop_assert!(false, "GPU {dsn} moved by the agent from {then} to {now}; its ledger owner was {was}; {:?}", changes);
            }
        }
    }
    if let Some((slices, messages)) = stalled(&r) {
        f.stalls += 1;
        for msg in &messages {
            prop_assert!(
                msg.contains('→')
                    || msg.contains("is picked by")
                    || msg.contains("gone from the bus")
                    || msg.contains("replaced by")
                    || msg.contains("a new GPU"),
                "{msg}"
            );
        }
        let all = ["inference", "side", "confidential-vm"]
            .iter()
            .all(|s| slices.contains(*s));
        if all {
            // Every slice stalled: nothing is written but the safety writes, a mapping narrowed
            // to the entries that still name the GPU at their path and containers narrowed to
            // the lines that still name their own GPUs.
            let others: Vec<String> = r
                .applied
                .iter()
                .filter(|a| !narrows(&a.planned.step, &prior))
                .map(|a| a.planned.step.to_string())
                .collect();
            f.writes_while_stalled += others.len() as u64;
            prop_assert!(others.is_empty(), "every slice stalled, yet {:?}", others);
        }
        f.stale_entries_removed += r
            .applied
            .iter()
            .filter(|a| narrows(&a.planned.step, &prior))
            .filter(|a| match &a.planned.step {
                Step::SetPciMapping { entries, .. } => entries.len() < mapped_before.len(),
                _ => false,
            })
            .count() as u64;
        f.container_lines_removed += r
            .applied
            .iter()
            .filter(|a| narrows(&a.planned.step, &prior))
            .map(|a| match &a.planned.step {
                Step::SetContainerGpus { vmid, minors } => {
                    (prior.minors[vmid].len() - minors.len()) as u64
                }
                _ => 0,
            })
            .sum::<u64>();
        for a in &r.applied {
            let touches = match &a.planned.step {
                // The one write a stalled VM slice may see: its mapping loses an address that
                // now holds a GPU of a slice that is not stalled (the VM would take it).
                Step::SetPciMapping { entries, .. } => {
                    slices.contains("confidential-vm")
                        && !entries.iter().all(|e| mapped_before.contains(&e.paths))
                }
                // A stalled slice's container may only lose lines (the narrowing above).
                Step::SetContainerGpus { vmid, .. } => {
                    stalled_container(&slices, *vmid) && !narrows(&a.planned.step, &prior)
                }
                Step::StopContainer { vmid } | Step::StartContainer { vmid } => {
                    stalled_container(&slices, *vmid)
                }
                _ => false,
            };
            if touches {
                f.writes_while_stalled += 1;
            }
            prop_assert!(
                !touches,
                "{} touches a stalled slice {:?}",
                a.planned.step,
                slices
            );
        }
        // Acknowledged with the hash the message offers.
        let at = messages[0].find("accept-layout=").unwrap() + "accept-layout=".len();
        let hash: String = messages[0][at..]
            .chars()
            .take_while(|c| c.is_ascii_hexdigit())
            .collect();
        m.partitions[0]
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("gpuplane.dev/accept-layout".into(), hash);
        match run(&mut h, &m) {
            Ok(r3) => prop_assert!(
                r3.converged(),
                "after the acknowledgement: {:?} {:?}",
                r3.stop,
                changes
            ),
            // Acknowledged, the layout is the host's truth: an address or slot a GPU left (or a
            // slice left with no GPU) is the spec's to fix, and the agent says so before any
            // write. The further converge below must agree.
            Err(e) if e.contains("InvalidSpec") => {
                let again = run(&mut h, &m);
                prop_assert!(
                    again.is_err(),
                    "the refusal holds: {:?}",
                    again.map(|r| r.stop)
                );
                f.refused += 1;
                return Ok(());
            }
            Err(e) => prop_assert!(false, "after the acknowledgement: {e} {:?}", changes),
        }
    } else {
        prop_assert!(r.converged(), "{:?} {:?}", r.stop, changes);
        // Every GPU that moved is reported old → new.
        let why: String = r
            .applied
            .iter()
            .filter(|a| matches!(a.planned.step, Step::WriteLedger { .. }))
            .map(|a| a.planned.why.clone())
            .collect();
        for d in &h.file.pci_devices {
            let dsn = d.identity.dsn.clone().unwrap();
            if let Some(old) = before.get(&dsn).filter(|old| **old != d.address) {
                prop_assert!(
                    why.contains(&format!("{old} → {}", d.address)),
                    "{dsn} {old} → {}: {why}",
                    d.address
                );
            }
        }
        if matches!(sel, Sel::Slots | Sel::Uuids) {
            let vm = |o: &BTreeMap<String, String>| -> BTreeSet<String> {
                o.iter()
                    .filter(|(_, o)| **o == "vm")
                    .map(|(d, _)| d.clone())
                    .collect()
            };
            prop_assert_eq!(vm(&o0), vm(&o2), "the identity slice has the same GPUs");
            // A follow: the slice's GPUs are where they were no longer.
            let moved = vm(&o2).iter().any(|dsn| {
                let now = h
                    .file
                    .pci_devices
                    .iter()
                    .find(|d| d.identity.dsn.as_ref() == Some(dsn));
                now.is_some_and(|d| before.get(dsn) != Some(&d.address))
            });
            if moved {
                f.follows += 1;
            }
        }
    }
    let last = run(&mut h, &m).map_err(TestCaseError::fail)?;
    prop_assert_eq!(
        last.writes,
        0,
        "a further converge: {:?}",
        last.applied
            .iter()
            .map(|a| a.planned.step.to_string())
            .collect::<Vec<_>>()
    );
    Ok(())
}

#[test]
fn no_gpu_changes_owner_when_the_host_layout_changes_under_an_unchanged_spec() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let figures = std::cell::RefCell::new(Figures::default());
    let result = runner.run(&case(), |(sels, changes)| {
        one(sels, &changes, &mut figures.borrow_mut())
    });
    let f = figures.into_inner();
    eprintln!(
        "layout property test: {} layouts tried, {} stalls, {} follows by identity selectors, {} refused as invalid after an acknowledgement, {} wrong-owner moves, {} writes to stalled slices, {} stalled mappings narrowed to the GPUs they name, {} stalled container lines removed, {} wrong-owner container lines",
        f.layouts, f.stalls, f.follows, f.refused, f.wrong_owner_moves, f.writes_while_stalled, f.stale_entries_removed, f.container_lines_removed, f.wrong_owner_lines
    );
    result.unwrap();
    assert!(f.layouts >= 50, "at least 50 layouts: {f:?}");
    assert!(
        f.stalls > 0 && f.follows > 0,
        "both stories were exercised: {f:?}"
    );
}
