//! A crash after every host write, on the simulated host (issue 13, item 1).
//!
//! For each transition — the reference split (`examples/kpro6/` on `examples/hosts/kpro6.yaml`,
//! 8/0 → 4/4) and its reverse (`examples/kpro6-all-lxc/`, 4/4 → 8/0) — an uninterrupted run
//! counts the host writes N. Then, for every k in 1..=N, the real `gpuplane converge --host
//! sim:FILE` runs with `GPUPLANE_KILL_AFTER_WRITE=k` and kills itself with SIGKILL right after
//! write k. The simulated host writes every step to FILE as it happens (as a real host keeps its
//! state), so the file left behind is the host at the crash. Checked:
//!
//! - the killed run died of SIGKILL; the file it left differs from that of every other k (each
//!   write changed the host, and the kill came right after it); it parses, no temporary file is left over
//!   (nothing half-written), every foreign line and comment of the container config and of
//!   `pci.cfg` is still there, in order, and no running container mounts a GPU that is not
//!   bound to nvidia;
//! - a fresh `converge` then ends converged (exit 0, every server Ready), and one more run makes
//!   zero writes;
//! - the host it leaves equals the host of the uninterrupted run (clocks aside): every GPU bound
//!   to its slice's driver and owned by exactly one consumer.
//!
//! Each transition prints `N` and its pass count (`cargo test --test crash_points --
//! --nocapture`).

use gpuplane::host::sim::SimHostFile;
use gpuplane::proxmox::lxc_conf::LxcConfig;
use gpuplane::proxmox::pci_cfg::PciCfg;
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VMID: u32 = 129;
const NODE: &str = "kpro6";
const GPUS: [&str; 8] = [
    "0000:01:00.0",
    "0000:11:00.0",
    "0000:61:00.0",
    "0000:71:00.0",
    "0000:81:00.0",
    "0000:91:00.0",
    "0000:e1:00.0",
    "0000:f1:00.0",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `gpuplane converge -f MANIFESTS --host sim:HOST --output json`, killed after write `kill`.
fn converge(manifests: &str, host: &Path, kill: Option<u64>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuplane"));
    c.args(["converge", "-f", manifests, "--output", "json", "--host"])
        .arg(format!("sim:{}", host.display()))
        .current_dir(repo())
        .env_remove("GPUPLANE_LOG");
    match kill {
        Some(k) => c.env("GPUPLANE_KILL_AFTER_WRITE", k.to_string()),
        None => c.env_remove("GPUPLANE_KILL_AFTER_WRITE"),
    };
    c.output().expect("gpuplane runs")
}

/// The host writes a finished run reports; panics unless it exited 0 (converged and Ready).
fn writes_of_converged(o: &Output, what: &str) -> u64 {
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{what}: not converged:\n{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what}: {e}: {out}"));
    r["writes"].as_u64().expect("writes")
}

fn read_host(path: &Path) -> SimHostFile {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The host with clocks taken out: what an uninterrupted run and a recovered one must share.
fn timeless(mut h: SimHostFile) -> String {
    h.clock = 0;
    for u in h.units.values_mut() {
        u.started_at = None;
    }
    serde_yaml::to_string(&h).unwrap()
}

/// The reference host with foreign content an agent must never lose: comments and a foreign
/// device line in the container config; a comment, another node's entry and a NIC mapping of
/// this node in `pci.cfg`.
fn reference_host_with_foreign_lines() -> SimHostFile {
    let text = std::fs::read_to_string(repo().join("examples/hosts/kpro6.yaml")).unwrap();
    let mut h: SimHostFile = serde_yaml::from_str(&text).unwrap();
    let ct = h.containers.get_mut(&VMID).unwrap();
    ct.config
        .push_str("# crash test: keep this comment\nlxc.cgroup2.devices.allow: c 226:* rwm\n");
    ct.config.insert_str(0, "#SGLang container, hand-written\n");
    h.pci_cfg = h.pci_cfg.replace(
        "\tdescription all eight",
        "\tmap id=10de:2bb5,iommugroup=10,node=kpro7,path=0000:01:00.0,subsystem-id=10de:204e\n\tdescription all eight",
    );
    h.pci_cfg = format!(
        "# hand-edited: keep this comment\n{}\nnic-vf\n\tmap id=8086:1515,node={NODE},path=0000:c1:00.1\n\tdescription X710 VF\n",
        h.pci_cfg
    );
    h
}

/// Lines of the container config the agent does not own (GPU device lines are its own).
fn foreign_lxc_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            !(l.starts_with("lxc.mount.entry: /dev/nvidia")
                || l.starts_with("lxc.cgroup2.devices.allow: c 195:")
                || l.starts_with("lxc.cgroup2.devices.allow: c 511:"))
        })
        .map(str::to_string)
        .collect()
}

/// Lines of `pci.cfg` the agent does not own: all but this node's GPU entries, the header of
/// the mapping it creates, and blank lines.
fn foreign_pci_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && *l != "pro6000-vm")
        .filter(|l| !(l.contains(&format!("node={NODE},")) && GPUS.iter().any(|g| l.contains(g))))
        .map(str::to_string)
        .collect()
}

/// What must hold of the host file a killed run left behind.
fn check_after_kill(host: &Path, start: &SimHostFile, what: &str) {
    let dir = host.parent().unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.ends_with("gpuplane-tmp"), "{what}: left {name}");
    }
    let h = read_host(host);
    let (conf, conf0) = (&h.containers[&VMID].config, &start.containers[&VMID].config);
    assert_eq!(foreign_lxc_lines(conf), foreign_lxc_lines(conf0), "{what}");
    assert_eq!(
        foreign_pci_lines(&h.pci_cfg),
        foreign_pci_lines(&start.pci_cfg),
        "{what}"
    );
    // A config is whole: the control devices come all together or not at all.
    let mounts = LxcConfig::parse(conf).gpu_mounts();
    assert!(
        mounts.control.is_empty() || mounts.control.len() == 4,
        "{what}: {mounts:?}"
    );
    // A running container never sees a GPU that another driver holds.
    if h.containers[&VMID].state == gpuplane::host::model::RunState::Running {
        for m in &mounts.minors {
            let d = h.pci_devices.iter().find(|d| d.minor == Some(*m)).unwrap();
            assert_eq!(d.driver.as_deref(), Some("nvidia"), "{what}: minor {m}");
        }
    }
}

/// Every GPU bound to a driver and owned by exactly one consumer of that driver.
fn check_ownership(h: &SimHostFile, what: &str) {
    let mounted = LxcConfig::parse(&h.containers[&VMID].config)
        .gpu_mounts()
        .minors;
    let mappings = PciCfg::parse(&h.pci_cfg).mappings();
    for d in h.pci_devices.iter().filter(|d| GPUS.contains(&&*d.address)) {
        let in_ct = d.minor.is_some_and(|m| mounted.contains(&m));
        let in_maps = mappings
            .values()
            .flatten()
            .filter(|e| e.node == NODE && e.paths.contains(&d.address))
            .count();
        let (a, drv) = (&d.address, d.driver.as_deref());
        assert_eq!(usize::from(in_ct) + in_maps, 1, "{what}: {a} owners");
        match drv {
            Some("nvidia") => assert!(in_ct, "{what}: {a} on nvidia, not in the container"),
            Some("vfio-pci") => assert_eq!(in_maps, 1, "{what}: {a} on vfio-pci, unmapped"),
            other => panic!("{what}: {a} bound to {other:?}"),
        }
    }
}

/// Runs one transition from `start`, crashing after every write; returns (N, passed).
fn crash_every_write(name: &str, manifests: &str, start: &SimHostFile) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host.yaml");
    let start_text = serde_yaml::to_string(start).unwrap();
    std::fs::write(&host, &start_text).unwrap();
    let n = writes_of_converged(&converge(manifests, &host, None), name);
    let want = read_host(&host);
    check_ownership(&want, name);
    check_after_kill(&host, start, name);
    assert!(n > 0, "{name}: the transition writes nothing");
    let mut passed = 0;
    let mut crash_states = std::collections::BTreeSet::new();
    for k in 1..=n {
        let what = format!("{name}, killed after write {k} of {n}");
        std::fs::write(&host, &start_text).unwrap();
        let o = converge(manifests, &host, Some(k));
        assert_eq!(o.status.signal(), Some(9), "{what}: {:?}", o.status);
        check_after_kill(&host, start, &what);
        // Each k leaves a different host: the kill came right after write k, not before or later.
        assert!(
            crash_states.insert(timeless(read_host(&host))),
            "{what}: same as before"
        );
        writes_of_converged(&converge(manifests, &host, None), &what);
        let again = writes_of_converged(&converge(manifests, &host, None), &what);
        assert_eq!(again, 0, "{what}: the run after recovery wrote");
        let got = read_host(&host);
        check_ownership(&got, &what);
        assert_eq!(timeless(got), timeless(want.clone()), "{what}");
        passed += 1;
    }
    println!("crash points, {name}: N = {n}, passed {passed}/{n}");
    (n, passed)
}

#[test]
fn a_crash_after_every_write_of_the_split_and_its_reverse_recovers() {
    let start = reference_host_with_foreign_lines();
    let (n, passed) = crash_every_write("split 8/0 -> 4/4", "examples/kpro6", &start);
    assert_eq!(passed, n);
    // The reverse starts from the split's result.
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host.yaml");
    std::fs::write(&host, serde_yaml::to_string(&start).unwrap()).unwrap();
    writes_of_converged(&converge("examples/kpro6", &host, None), "split");
    let split = read_host(&host);
    let (n, passed) = crash_every_write("reverse 4/4 -> 8/0", "examples/kpro6-all-lxc", &split);
    assert_eq!(passed, n);
}
