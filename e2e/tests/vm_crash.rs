//! A crash after every host write, on the real kernel in the qemu GPU host (issue 13, item 1).
//!
//! A VM runs `e2e/vm/scenarios/crash.sh` for one transition: an uninterrupted `gpuplane
//! converge --host local` counts its host writes N; then for every k in 1..=N the host is put
//! back to the transition's start, the converge runs with `GPUPLANE_KILL_AFTER_WRITE=k` (it kills
//! itself with SIGKILL right after write k, in the apply door), a fresh converge runs to
//! completion and one more runs. The truth is read from sysfs, the Proxmox mapping file
//! `/etc/pve/mapping/pci.cfg`, the unit file and systemd. This test judges, for every k:
//!
//! - the killed run died of SIGKILL after exactly k logged host writes, and the host it left
//!   differs from that of every other k (each write changed the host);
//! - the crash state: no temporary file left anywhere the agent writes (nothing half-written),
//!   every foreign line and comment of `pci.cfg` still there in order, the guest config untouched,
//!   the unit file absent or whole;
//! - the fresh converge exits 0 (converged, every resource Ready), the one after writes nothing;
//! - the host then equals the host of the uninterrupted run, in which every GPU is bound (none
//!   left unbound) and has one consumer (the GPUs mapped to the VM are exactly those on
//!   vfio-pci): the same drivers, mapping, unit, in the same state.
//!
//! Transitions: `split` (NUMA 1 to vfio-pci behind a PCI mapping, vfio-pci loaded on the way),
//! `back` (its reverse), `server` (a real unit running the SGLang stand-in written and started)
//! and `move` (the GPU that running server holds goes to the VM: stop, rebind, mapping, unit,
//! start). Each prints `N` and its pass count:
//!
//!     cargo build --bin gpuplane
//!     cargo test -p gpuplane-e2e --test vm_crash -- --nocapture
//!
//! Kills inside the locked edit of the PCI mapping (issue 20), for `split` and `back`: for each
//! locked edit L of the run and each point inside it (`held`: the cfs lock taken, nothing
//! written; `temp`: the temporary file written, not renamed; `renamed`: the new file in place,
//! the lock not released), the converge runs with `GPUPLANE_KILL_IN_LOCK=POINT:L`. Judged: the
//! kill left the lock (it landed inside); the crash state is whole but for the temporary file
//! of `temp`; a one-shot converge while the lock is young exits 1 with `WaitingForLock` (or 0
//! when the rest needs no lock); the file agent, started while the lock is young, reports
//! `WaitingForLock` and, once the lock is past pmxcfs's 120 s (aged with `touch -d`, which is
//! what waiting does to it), converges with no one acting; a converge after it writes nothing;
//! the host equals the uninterrupted run's. (The container config's in-lock kills run on the
//! real backend under a host root: `controller/tests/lock_crash.rs`.)
//!
//! Each transition is a test of its own, on its own restore of the booted machine's snapshot. By
//! default (CI) `split`, `back` and `server` run (2-4 min each on 2 cores, depending on what else
//! runs); `GPUPLANE_VM_CRASH=all` runs all four (`move` restarts the stand-in server at every
//! crash point), `GPUPLANE_VM_CRASH=move` any subset.

use gpuplane_e2e::paths::repo_root;
use gpuplane_e2e::vm::{gpuplane_for_vm, preflight, run, standin_tar};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Lines a foreign hand put in `pci.cfg` (crash.sh writes them before the first run).
const FOREIGN: [&str; 6] = [
    "# mappings kept by hand",
    "nic",
    "\tmap id=8086:100e,node=vmhost,path=0000:44:02.0",
    "# the other node",
    "remote",
    "\tmap id=10de:2335,node=othernode,path=0000:c1:00.0",
];
const VM_CONF: &str = "name: snp-guest\nhostpci0: mapping=emu-vm,pcie=1\n";

/// What crash.sh printed for one transition.
#[derive(Default)]
struct Transition {
    n: Option<(u64, String)>,
    secs: String,
    reference: Option<Value>,
    /// By k: the tag's rest of line.
    lines: BTreeMap<u64, BTreeMap<String, String>>,
    /// Locked edits of the uninterrupted run.
    nl: Option<u64>,
    isecs: String,
    /// By in-lock point (`temp:1`): the tag's rest of line.
    ilines: BTreeMap<String, BTreeMap<String, String>>,
}

fn parse(out: &str) -> BTreeMap<String, Transition> {
    let mut ts: BTreeMap<String, Transition> = BTreeMap::new();
    for l in out.lines() {
        let w: Vec<&str> = l.splitn(3, ' ').collect();
        if w.len() < 3 {
            continue;
        }
        let (tag, t, rest) = (w[0], w[1], w[2]);
        let tr = ts.entry(t.to_string()).or_default();
        match tag {
            "N" => {
                let (n, rc) = rest.split_once(' ').unwrap_or((rest, ""));
                tr.n = Some((n.parse().unwrap_or(0), rc.to_string()));
            }
            "REF" => tr.reference = serde_json::from_str(rest).ok(),
            "TIME" => tr.secs = rest.to_string(),
            "ITIME" => tr.isecs = rest.to_string(),
            "NL" => tr.nl = rest.trim().parse().ok(),
            "IKILL" | "ICRASH" | "IWAIT" | "IAGENT" | "IAGAIN" | "IAFTER" => {
                let (p, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                tr.ilines
                    .entry(p.to_string())
                    .or_default()
                    .insert(tag.to_string(), rest.to_string());
            }
            "KILL" | "CRASH" | "RECOVER" | "AGAIN" | "AFTER" => {
                let (k, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                if let Ok(k) = k.parse() {
                    tr.lines
                        .entry(k)
                        .or_default()
                        .insert(tag.to_string(), rest.to_string());
                }
            }
            _ => {}
        }
    }
    ts
}

/// Problems of any host state: temporary files, lost foreign lines, a changed guest config, a
/// unit file cut short.
fn whole(t: &Value) -> Vec<String> {
    whole_but(t, |_| false)
}

/// [`whole`], where a temporary file for which `allowed` says yes is not a problem (a kill
/// between a temporary write and its rename leaves one; the next write of the file removes it).
fn whole_but(t: &Value, allowed: impl Fn(&str) -> bool) -> Vec<String> {
    let mut bad = vec![];
    let left: Vec<Value> = t["leftovers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| !allowed(f.as_str().unwrap_or("")))
        .collect();
    if !left.is_empty() {
        bad.push(format!("temporary files left: {left:?}"));
    }
    let cfg = t["pciCfg"].as_str().unwrap_or("");
    let mut lines = cfg.lines();
    for f in FOREIGN {
        if !lines.any(|l| l == f) {
            bad.push(format!("pci.cfg lost {f:?} (or its order):\n{cfg}"));
            break;
        }
    }
    if t["vmConf"] != VM_CONF {
        bad.push(format!("the guest config changed: {}", t["vmConf"]));
    }
    if let Some(u) = t["unit"].as_str() {
        if !(u.contains("[Service]") && u.contains("\nExecStart=") && u.ends_with('\n')) {
            bad.push(format!("the unit file is not whole:\n{u}"));
        }
    }
    bad
}

/// Each GPU has one consumer: the GPUs of this node in the VM's mapping `emu-vm` are exactly
/// those on vfio-pci (the host's server can only hold a GPU that has a DRM card, so one on
/// bochs-drm). Checked on the converged host; in a crash state a GPU may be in between.
fn one_consumer_each(t: &Value) -> Vec<String> {
    let cfg = t["pciCfg"].as_str().unwrap_or("");
    let mut mapped = BTreeSet::new();
    let mut in_vm = false;
    for l in cfg.lines() {
        if !l.starts_with(char::is_whitespace) {
            in_vm = l.trim() == "emu-vm";
        } else if in_vm && l.contains("node=vmhost") {
            if let Some(p) = l.split("path=").nth(1) {
                mapped.insert(p.split(',').next().unwrap_or("").trim().to_string());
            }
        }
    }
    let vfio: BTreeSet<String> = t["drivers"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, d)| d[0] == "vfio-pci")
        .map(|(g, _)| g.clone())
        .collect();
    let mut bad = vec![];
    if mapped != vfio {
        bad.push(format!("mapped to the VM {mapped:?}, on vfio-pci {vfio:?}"));
    }
    bad
}

/// "rc writes ..." of a RECOVER/AGAIN/KILL line.
fn rc_writes(s: &str) -> (String, String) {
    let mut w = s.split(' ');
    (
        w.next().unwrap_or("").to_string(),
        w.next().unwrap_or("").to_string(),
    )
}

/// Prints one crash point's verdict (`detail` says what it was) and each problem; 1 when it
/// passed, else 0.
fn verdict(label: &str, detail: &str, bad: Vec<String>) -> u64 {
    if bad.is_empty() {
        println!("  {label}: ok ({detail})");
        return 1;
    }
    println!("  {label}: FAILED ({detail})");
    for b in bad {
        println!("    {b}");
    }
    0
}

/// Judges one transition; returns (N, passed) and prints each failure.
fn judge(name: &str, t: &Transition) -> (u64, u64) {
    let (n, rc) = t.n.clone().unwrap_or_else(|| panic!("{name}: no N line"));
    assert_eq!(rc, "rc=0", "{name}: the uninterrupted run did not converge");
    assert!(n > 0, "{name}: the transition writes nothing");
    let want = t
        .reference
        .clone()
        .unwrap_or_else(|| panic!("{name}: no REF line"));
    assert_eq!(whole(&want), Vec::<String>::new(), "{name}: reference");
    for (gpu, d) in want["drivers"].as_object().unwrap() {
        assert_ne!(d[0], "none", "{name}: {gpu} unbound in the reference");
    }
    assert_eq!(
        one_consumer_each(&want),
        Vec::<String>::new(),
        "{name}: reference"
    );
    let mut passed = 0;
    let mut crash_states = BTreeSet::new();
    for k in 1..=n {
        let l = t.lines.get(&k).cloned().unwrap_or_default();
        let get = |tag: &str| l.get(tag).cloned().unwrap_or_default();
        let mut bad = vec![];
        let kill = get("KILL");
        let (krc, kw) = rc_writes(&kill);
        if krc != "137" || kw != k.to_string() {
            bad.push(format!(
                "the killed run: want exit 137 after {k} writes, got {kill:?}"
            ));
        }
        match serde_json::from_str::<Value>(&get("CRASH")) {
            Ok(c) => {
                bad.extend(whole(&c).into_iter().map(|b| format!("crash state: {b}")));
                if !crash_states.insert(c.to_string()) {
                    bad.push("the crash state equals that of an earlier k".into());
                }
            }
            Err(e) => bad.push(format!("no crash state: {e}")),
        }
        let (rrc, _) = rc_writes(&get("RECOVER"));
        if rrc != "0" {
            bad.push(format!("the fresh converge: {:?}", get("RECOVER")));
        }
        if rc_writes(&get("AGAIN")) != ("0".into(), "0".into()) {
            bad.push(format!(
                "the run after recovery: want exit 0 and zero writes, got {:?}",
                get("AGAIN")
            ));
        }
        match serde_json::from_str::<Value>(&get("AFTER")) {
            Ok(a) if a == want => {}
            Ok(a) => bad.push(format!(
                "after recovery the host differs:\n{a}\nwant\n{want}"
            )),
            Err(e) => bad.push(format!("no state after recovery: {e}")),
        }
        let step = kill.splitn(3, ' ').nth(2).unwrap_or("");
        let label = format!("{name} k={k}/{n}");
        passed += verdict(&label, &format!("killed after: {step}"), bad);
    }
    println!(
        "crash points in the VM, {name}: N = {n}, passed {passed}/{n} ({} s)",
        t.secs
    );
    (n, passed)
}

/// The host without its lock directories: a kill after the rename but before the release leaves
/// a lock that no later run needs (the file is already right); it stays until its 120 s pass
/// and the next edit removes it, as on pmxcfs.
fn without_locks(t: &Value) -> Value {
    let mut t = t.clone();
    if let Some(o) = t.as_object_mut() {
        o.remove("locks");
    }
    t
}

/// Judges the kills inside locked edits of one transition; returns (points, passed).
fn judge_in_lock(name: &str, t: &Transition) -> (u64, u64) {
    let nl = t.nl.unwrap_or_else(|| panic!("{name}: no NL line"));
    assert!(nl > 0, "{name}: the transition takes no lock");
    let want = without_locks(t.reference.as_ref().expect("REF"));
    let mut passed = 0;
    for l in 1..=nl {
        for point in ["held", "temp", "renamed"] {
            let key = format!("{point}:{l}");
            let lines = t.ilines.get(&key).cloned().unwrap_or_default();
            let get = |tag: &str| lines.get(tag).cloned().unwrap_or_default();
            let mut bad = vec![];
            if !get("IKILL").starts_with("137 ") {
                bad.push(format!(
                    "the killed run: want exit 137, got {:?}",
                    get("IKILL")
                ));
            }
            match serde_json::from_str::<Value>(&get("ICRASH")) {
                Ok(c) => {
                    if c["locks"].as_array().is_none_or(|a| a.is_empty()) {
                        bad.push("the kill did not land inside a lock (no lock left)".into());
                    }
                    let tmp_ok = |f: &str| point == "temp" && f.contains(".tmp.");
                    bad.extend(
                        whole_but(&c, tmp_ok)
                            .into_iter()
                            .map(|b| format!("crash state: {b}")),
                    );
                }
                Err(e) => bad.push(format!("no crash state: {e}")),
            }
            let wait = get("IWAIT");
            let w: Vec<&str> = wait.split(' ').collect();
            let waited = w.first() == Some(&"1") && w.get(2) == Some(&"WaitingForLock");
            let needed_none = w.first() == Some(&"0") && w.get(2) == Some(&"Converged");
            if !(waited || needed_none) {
                bad.push(format!(
                    "the one-shot converge under a young lock: want exit 1 WaitingForLock (or 0 Converged when no lock is needed), got {wait:?}"
                ));
            }
            let agent = get("IAGENT");
            let a: Vec<&str> = agent.split(' ').collect();
            if a.first() != Some(&"0") || a.get(2) != Some(&"Converged") {
                bad.push(format!(
                    "the agent: want exit 0 and Ready reason Converged, got {agent:?}"
                ));
            }
            if waited && a.get(1) != Some(&"WaitingForLock") {
                bad.push(format!(
                    "the agent's first status should say WaitingForLock: {agent:?}"
                ));
            }
            if rc_writes(&get("IAGAIN")) != ("0".into(), "0".into()) {
                bad.push(format!(
                    "the run after the agent: want exit 0 and zero writes, got {:?}",
                    get("IAGAIN")
                ));
            }
            match serde_json::from_str::<Value>(&get("IAFTER")) {
                Ok(a) => {
                    bad.extend(whole(&a));
                    if without_locks(&a) != want {
                        bad.push(format!(
                            "after recovery the host differs:\n{a}\nwant\n{want}"
                        ));
                    }
                    let locks = a["locks"].as_array().cloned().unwrap_or_default();
                    if !locks.is_empty() && !needed_none {
                        bad.push(format!(
                            "a lock is left after a run that needed it: {locks:?}"
                        ));
                    }
                }
                Err(e) => bad.push(format!("no state after recovery: {e}")),
            }
            let label = format!("{name} in-lock {key}");
            passed += verdict(&label, &format!("one-shot: {wait}; agent: {agent}"), bad);
        }
    }
    println!(
        "kills inside locked edits in the VM, {name}: {} points, passed {passed}/{} ({} s)",
        3 * nl,
        3 * nl,
        t.isecs
    );
    (3 * nl, passed)
}

/// The transitions `GPUPLANE_VM_CRASH` asks for: by default `split`, `back` and `server`; `all`
/// adds `move`.
fn wanted(name: &str) -> bool {
    match std::env::var("GPUPLANE_VM_CRASH")
        .unwrap_or_default()
        .as_str()
    {
        "" => name != "move",
        "all" => true,
        only => only.split(',').any(|o| o == name),
    }
}

/// Transition `name`'s crash points (and, for `split` and `back`, its kills inside the locked
/// edits), on a VM of its own: the tests run side by side (run.sh bounds how many VMs run at
/// once).
fn transition(name: &str) {
    if !wanted(name) {
        eprintln!("{name}: not asked for (GPUPLANE_VM_CRASH)");
        return;
    }
    preflight();
    let (dir, tar) = standin_tar(&format!("gpuplane-vm-crash-{name}"));
    let r = run(
        &repo_root().join("e2e/vm/scenarios/crash.sh"),
        &[
            gpuplane_for_vm(),
            tar,
            repo_root().join("e2e/vm/scenario-lib.sh"),
        ],
        &[
            ("VM_ARGS", &format!("gpuplane.crash={name}")),
            ("VM_TIMEOUT", "2400"),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("--- crash.sh {name}: {:.0}s\n{}", r.secs, r.stderr);
    assert_eq!(r.code, Some(0), "crash.sh: {}\n{}", r.stdout, r.stderr);
    let ts = parse(&r.stdout);
    let t = ts
        .get(name)
        .unwrap_or_else(|| panic!("no lines for {name}:\n{}", r.stdout));
    let mut all = vec![(name.to_string(), judge(name, t))];
    // Kills inside the locked edit of the PCI mapping: both directions.
    if matches!(name, "split" | "back") {
        all.push((format!("{name} in-lock"), judge_in_lock(name, t)));
    }
    for (name, (n, passed)) in all {
        assert_eq!(passed, n, "{name}: {passed}/{n} crash points recovered");
    }
}

#[test]
fn a_crash_after_every_write_of_the_split_recovers() {
    transition("split");
}

#[test]
fn a_crash_after_every_write_of_the_way_back_recovers() {
    transition("back");
}

#[test]
fn a_crash_after_every_write_of_a_new_server_recovers() {
    transition("server");
}

#[test]
fn a_crash_after_every_write_of_a_move_under_a_running_server_recovers() {
    transition("move");
}
