//! A bus renumbering under the agent (issue 24), on a real kernel in the qemu GPU host: the
//! same stand-in GPUs in the same physical slots, every PCI address changed between two boots,
//! while the agent's state (`/var/lib/gpuplane`, with its GPU ledger, and `/etc/pve`) stayed.
//!
//! Run 1 (a restore of run.sh's default machine) converges two stories and prints each one's state; boot 2
//! (a real boot, `VM_PCI_LAYOUT=renumbered`: the NUMA nodes' bus ranges swapped, slot 112's root port moved
//! off NUMA node 1 onto the root complex) starts each story from its state and converges the
//! same spec again (`e2e/vm/scenarios/renumber.sh`):
//! - follow: a `slots` slice (slots 111 and 112, for VM 300 through the mapping emu-vm) finds
//!   its GPUs at their new addresses, binds them there and rewrites the mapping to list them;
//!   the `numaNode` host slice beside it keeps its GPUs.
//! - stall: a `numaNode: 1` slice whose GPUs were 111 and 112 would now get 111 alone: the
//!   converge stops with `HostLayoutChanged`, naming the old and new addresses, and changes
//!   nothing, again and again, until a person writes the layout hash it offers into the
//!   partition's `gpuplane.dev/accept-layout` annotation: then slot 111 alone goes to the VM.
//!
//! Needs `e2e/setup/install-vm-deps.sh`, `e2e/vm/build-image.sh` and `cargo build --bin
//! gpuplane` (or `GPUPLANE_BIN`). A restore and a boot, about 2 minutes:
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test vm_renumber -- --nocapture

use gpuplane_e2e::vm::{boot_scenario_with, gpuplane_for_vm, preflight, ready, step_kinds, Report};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

/// What each boot printed.
struct Boots {
    before: Report,
    after: Report,
}

static BOOTS: OnceLock<Boots> = OnceLock::new();

/// Both boots, booted by the first test that asks: boot 1's STATE lines become the files boot 2
/// restores.
fn boots() -> &'static Boots {
    BOOTS.get_or_init(|| {
        preflight();
        let dir = std::env::temp_dir().join(format!("gpuplane-vm-renumber-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out1 = boot_scenario_with("renumber.sh", &[gpuplane_for_vm()], &[]);
        let before = Report::parse(&out1);
        let mut files = vec![gpuplane_for_vm()];
        for story in ["follow", "stall"] {
            let state = &before.get("STATE", story)[0];
            assert!(!state.is_empty(), "boot 1 printed no state for {story}");
            let f = dir.join(format!("renumber-{story}.state"));
            std::fs::write(&f, state).unwrap();
            files.push(f);
        }
        // Boot 2 boots the kernel (no snapshot): what is under test is the layout the kernel
        // enumerates at boot, and the agent's first look at it.
        let out2 = boot_scenario_with(
            "renumber.sh",
            &files,
            &[("VM_PCI_LAYOUT", "renumbered"), ("VM_BOOT", "fresh")],
        );
        let _ = std::fs::remove_dir_all(&dir);
        Boots {
            before,
            after: Report::parse(&out2),
        }
    })
}

/// One stand-in GPU as `gpuplane observe` saw it.
#[derive(Debug, Clone, PartialEq)]
struct Gpu {
    address: String,
    numa: i32,
    driver: String,
    path: String,
}

/// The IDENT lines of `phase`, by slot.
fn by_slot(r: &Report, phase: &str) -> BTreeMap<String, Gpu> {
    let mut m = BTreeMap::new();
    for l in r.get("IDENT", phase) {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f.len(), 6, "IDENT {phase} {l}");
        let gpu = Gpu {
            address: f[0].into(),
            numa: f[2].parse().unwrap_or_else(|_| panic!("NUMA node in {l}")),
            driver: f[3].into(),
            path: f[5].into(),
        };
        assert_ne!(f[1], "-", "every stand-in GPU has a slot: {l}");
        assert!(
            m.insert(f[1].to_string(), gpu).is_none(),
            "slot {} twice",
            f[1]
        );
    }
    m
}

/// The slot of each address in `phase`.
fn slot_of(r: &Report, phase: &str) -> BTreeMap<String, String> {
    by_slot(r, phase)
        .into_iter()
        .map(|(s, g)| (g.address, s))
        .collect()
}

/// The PCICFG lines of `name` as the file's text.
fn pci_cfg(r: &Report, name: &str) -> String {
    r.get("PCICFG", name).join("\n")
}

/// The addresses mapping `id` lists (its `map` lines' `path=`), in order.
fn mapped(cfg: &str, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for l in cfg.lines() {
        if !l.starts_with('\t') {
            inside = l.trim() == id;
            continue;
        }
        let Some(map) = l.trim().strip_prefix("map ") else {
            continue;
        };
        if !inside {
            continue;
        }
        for kv in map.split(',') {
            if let Some(p) = kv.strip_prefix("path=") {
                out.extend(p.split(';').map(str::to_string));
            }
        }
    }
    out
}

fn set(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The layouts are what run.sh says: five stand-in GPUs in five named slots; after the
/// renumbering each one is in its slot still, none at its old address, and three old addresses
/// now name other GPUs. The agent's state travelled from the first boot to the second.
#[test]
fn the_renumbering_moves_every_address_and_keeps_every_slot() {
    let b = boots();
    let before = by_slot(&b.before, "before");
    let after = by_slot(&b.after, "after");
    let table = |m: &BTreeMap<String, Gpu>| -> Vec<(String, String, i32)> {
        m.iter()
            .map(|(s, g)| (s.clone(), g.address.clone(), g.numa))
            .collect()
    };
    let want = |v: &[(&str, &str, i32)]| -> Vec<(String, String, i32)> {
        v.iter()
            .map(|(s, a, n)| (s.to_string(), a.to_string(), *n))
            .collect()
    };
    // Slot "1" is the pcie-pci-bridge's SHPC slot 1 (its GPU shares a group with an e1000).
    assert_eq!(
        table(&before),
        want(&[
            ("1", "0000:44:01.0", 0),
            ("101", "0000:41:00.0", 0),
            ("102", "0000:42:00.0", 0),
            ("111", "0000:81:00.0", 1),
            ("112", "0000:82:00.0", 1),
        ]),
        "the default layout"
    );
    assert_eq!(
        table(&after),
        want(&[
            ("1", "0000:84:01.0", 0),
            ("101", "0000:81:00.0", 0),
            ("102", "0000:82:00.0", 0),
            ("111", "0000:41:00.0", 1),
            ("112", "0000:01:00.0", -1),
        ]),
        "the renumbered layout"
    );
    eprintln!("slot  before        after          path before -> after");
    for (s, g) in &before {
        let a = &after[s];
        assert_ne!(g.address, a.address, "slot {s} kept its address");
        assert_ne!(g.path, a.path, "slot {s}: the path names the root bus");
        eprintln!(
            "{s:<5} {} -> {}   {} -> {}",
            g.address, a.address, g.path, a.path
        );
    }
    for g in before.values().chain(after.values()) {
        assert_eq!(g.driver, "bochs-drm", "every GPU boots on bochs-drm: {g:?}");
    }

    // Boot 2 began each story from boot 1's state: the mapping and the ledger as they were.
    for story in ["follow", "stall"] {
        assert_eq!(
            pci_cfg(&b.after, &format!("{story}-restored")),
            pci_cfg(&b.before, story),
            "{story}: /etc/pve came back"
        );
        assert_eq!(
            b.after.get("LEDGER", &format!("{story}-restored")),
            b.before.get("LEDGER", story),
            "{story}: /var/lib/gpuplane came back"
        );
    }
}

/// follow: the `slots` slice's GPUs are on vfio-pci at their new addresses and VM 300's mapping
/// lists exactly those; before the converge it listed the old ones, which are now the host
/// slice's GPUs.
#[test]
fn a_slots_slice_follows_its_gpus_and_the_mapping_lists_their_new_addresses() {
    let b = boots();
    let (old_slot, new_slot) = (slot_of(&b.before, "before"), slot_of(&b.after, "after"));
    let vm_old = set(&["0000:81:00.0", "0000:82:00.0"]);
    let vm_new = set(&["0000:41:00.0", "0000:01:00.0"]);

    // Boot 1: slots 111 and 112 to the VM at 81:00.0 and 82:00.0.
    let j = b.before.json("follow");
    assert_eq!(b.before.rc("follow"), 0, "{j}");
    assert_eq!(ready(&j, "GpuPartition/vmhost").0, "True", "{j}");
    let cfg1 = pci_cfg(&b.before, "follow");
    let m1: BTreeSet<String> = mapped(&cfg1, "emu-vm").into_iter().collect();
    assert_eq!(m1, vm_old, "{cfg1}");
    eprintln!("--- boot 1, pci.cfg after converging:\n{cfg1}");
    eprintln!(
        "--- boot 1, the ledger: {}",
        b.before.get("LEDGER", "follow")[0]
    );

    // Boot 2, before converging: the mapping names the old addresses, now slots 101 and 102.
    let restored = pci_cfg(&b.after, "follow-restored");
    let stale: Vec<String> = mapped(&restored, "emu-vm")
        .iter()
        .map(|a| format!("{a} (now slot {})", new_slot[a]))
        .collect();
    eprintln!("--- boot 2, pci.cfg as the renumbered host booted: {stale:?}\n{restored}");
    for a in &vm_old {
        assert_ne!(new_slot[a], old_slot[a], "{a} names another GPU now");
    }

    // Boot 2: the same spec converges; the vm slice is on its slots' new addresses.
    let j = b.after.json("follow");
    assert_eq!(b.after.rc("follow"), 0, "{j}");
    assert_eq!(ready(&j, "GpuPartition/vmhost").0, "True", "{j}");
    let d = b.after.drivers("follow");
    for (a, slot) in &new_slot {
        let want = if vm_new.contains(a) {
            "vfio-pci"
        } else {
            "bochs-drm"
        };
        assert_eq!(
            d[a],
            (want.to_string(), want.to_string()),
            "{a} (slot {slot})"
        );
    }
    let cfg2 = pci_cfg(&b.after, "follow");
    eprintln!("--- boot 2, pci.cfg after converging:\n{cfg2}");
    eprintln!(
        "--- boot 2, the ledger: {}",
        b.after.get("LEDGER", "follow")[0]
    );
    let m2: BTreeSet<String> = mapped(&cfg2, "emu-vm").into_iter().collect();
    assert_eq!(
        m2, vm_new,
        "the mapping lists the new addresses, only:\n{cfg2}"
    );
    assert!(
        cfg2.starts_with(
            "# mappings kept by hand\nnic\n\tmap id=8086:100e,node=vmhost,path=0000:44:02.0\n"
        ),
        "the hand-kept mapping is kept as it was:\n{cfg2}"
    );
    let ledger = &b.after.get("LEDGER", "follow")[0];
    for a in &vm_new {
        assert!(
            ledger.contains(a.as_str()),
            "the ledger knows {a}: {ledger}"
        );
    }

    // And it stays converged.
    let again = b.after.json("follow-again");
    assert_eq!(b.after.rc("follow-again"), 0, "{again}");
    assert_eq!(again["writes"], 0, "{again}");
    assert_eq!(b.after.get("TEXTRC", "follow")[0], "0");
}

/// stall: the `numaNode: 1` slice would lose slot 112 (its root port left NUMA node 1): the
/// converge stops with HostLayoutChanged naming 82:00.0 → 01:00.0 and binds nothing. Its one
/// write takes the mapping's entries out: they name slots 111 and 112 at 81:00.0 and 82:00.0,
/// where slots 101 and 102 (NUMA node 0's GPUs) sit now, and Proxmox's start check (model IDs,
/// IOMMU group) would hand those to VM 300. Asked again, it stops again and writes nothing.
#[test]
fn a_numa_slice_whose_gpus_would_change_stalls_and_changes_nothing() {
    let b = boots();
    let j = b.before.json("stall");
    assert_eq!(b.before.rc("stall"), 0, "boot 1: {j}");
    let cfg1 = pci_cfg(&b.before, "stall");
    assert_eq!(
        mapped(&cfg1, "emu-vm").into_iter().collect::<BTreeSet<_>>(),
        set(&["0000:81:00.0", "0000:82:00.0"]),
        "{cfg1}"
    );

    let restored = pci_cfg(&b.after, "stall-restored");
    assert_eq!(restored, cfg1, "boot 2 starts from boot 1's pci.cfg");
    for run in ["stall", "stall-again"] {
        let j = b.after.json(run);
        let rc = b.after.rc(run);
        assert_ne!(rc, 0, "{run}: {j}");
        let kinds = step_kinds(&j);
        if run == "stall" {
            assert_eq!(kinds, ["setPciMapping"], "{run}: the mapping alone: {j}");
            let why = j["steps"][0]["why"].as_str().unwrap_or("");
            assert!(
                why.contains("no longer at their paths")
                    && why.contains("0000:81:00.0 (slot 111 → 101)")
                    && why.contains("0000:82:00.0 (slot 112 → 102)"),
                "{run}: the step says which GPU sits where now: {why}"
            );
        } else {
            assert_eq!(j["writes"], 0, "{run}: no host writes: {j}");
        }
        assert_eq!(j["stop"]["reason"], "blocked", "{run}: {j}");
        let blockers = j["stop"]["blockers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let layout: Vec<&Value> = blockers
            .iter()
            .filter(|b| b["reason"] == "HostLayoutChanged")
            .collect();
        assert_eq!(layout.len(), 1, "{run}: one HostLayoutChanged: {j}");
        let msg = layout[0]["message"].as_str().unwrap_or("");
        assert_eq!(layout[0]["resource"], "GpuPartition/vmhost", "{run}: {j}");
        assert!(
            msg.contains("0000:82:00.0") && msg.contains("0000:01:00.0"),
            "{run}: the message names slot 112's old and new address: {msg}"
        );
        let (status, reason, _) = ready(&j, "GpuPartition/vmhost");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "HostLayoutChanged"),
            "{run}: {j}"
        );
    }
    let text = b.after.get("TEXT", "stall").join("\n");
    eprintln!("--- boot 2, gpuplane converge (text):\n{text}");
    assert_ne!(b.after.get("TEXTRC", "stall")[0], "0", "{text}");
    assert!(
        text.contains("BLOCKED GpuPartition/vmhost (HostLayoutChanged): "),
        "{text}"
    );

    // No GPU moved: every GPU as it booted; the mapping names no GPU, the hand-kept one stays.
    let booted = b.after.drivers("stall-restored");
    for (a, (drv, over)) in &booted {
        assert_eq!(
            (drv.as_str(), over.as_str()),
            ("bochs-drm", "(null)"),
            "{a}"
        );
    }
    let narrowed = pci_cfg(&b.after, "stall");
    for run in ["stall", "stall-again"] {
        assert_eq!(b.after.drivers(run), booted, "{run}: drivers unchanged");
        assert_eq!(
            pci_cfg(&b.after, run),
            narrowed,
            "{run}: pci.cfg as the stall left it"
        );
    }
    assert!(mapped(&narrowed, "emu-vm").is_empty(), "{narrowed}");
    assert!(
        narrowed.starts_with(
            "# mappings kept by hand\nnic\n\tmap id=8086:100e,node=vmhost,path=0000:44:02.0\n"
        ),
        "the hand-kept mapping is kept as it was:\n{narrowed}"
    );
    eprintln!("--- boot 2, pci.cfg as boot 1 left it:\n{cfg1}\n--- after the stalled converges:\n{narrowed}");
}

/// stall, acknowledged: with the hash the message offered in `gpuplane.dev/accept-layout`, the
/// same slice goes on under the new layout: slot 111 alone on vfio-pci, the mapping lists 41:00.0
/// only, and the ledger records slot 112 in no slice.
#[test]
fn accepting_the_offered_layout_lets_the_numa_slice_go_on() {
    let b = boots();
    let hash = &b.after.get("ACCEPT", "stall")[0];
    assert_eq!(hash.len(), 12, "the message offers a layout hash: {hash:?}");
    let j = b.after.json("stall-accepted");
    assert_eq!(b.after.rc("stall-accepted"), 0, "{j}");
    assert_eq!(ready(&j, "GpuPartition/vmhost").0, "True", "{j}");
    let ledger_step = j["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["kind"] == "writeLedger"))
        .unwrap_or_else(|| panic!("the ledger is written: {j}"));
    let why = ledger_step["why"].as_str().unwrap_or("");
    assert!(
        why.contains(&format!("accepted by gpuplane.dev/accept-layout={hash}")),
        "{why}"
    );
    let d = b.after.drivers("stall-accepted");
    assert_eq!(d["0000:41:00.0"].0, "vfio-pci", "slot 111: {d:?}");
    for a in [
        "0000:01:00.0",
        "0000:81:00.0",
        "0000:82:00.0",
        "0000:84:01.0",
    ] {
        assert_eq!(d[a].0, "bochs-drm", "{a}: {d:?}");
    }
    let cfg = pci_cfg(&b.after, "stall-accepted");
    eprintln!("--- boot 2, pci.cfg after accepting the layout:\n{cfg}");
    assert_eq!(mapped(&cfg, "emu-vm"), ["0000:41:00.0"], "{cfg}");
    let ledger: Value = serde_json::from_str(&b.after.get("LEDGER", "stall-accepted")[0])
        .unwrap_or_else(|e| panic!("the ledger: {e}"));
    let owner = |slot: &str| {
        ledger["gpus"]
            .as_array()
            .and_then(|g| g.iter().find(|g| g["slot"] == slot))
            .unwrap_or_else(|| panic!("slot {slot} in the ledger: {ledger}"))["owner"]
            .clone()
    };
    assert_eq!(owner("111"), "vm", "{ledger}");
    assert_eq!(owner("112"), Value::Null, "{ledger}");
}
