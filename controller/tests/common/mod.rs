//! Helpers shared by the tests that run the agent on a simulated host file
//! (`crash_points.rs`, `faults.rs`, `standalone.rs`, `status_view.rs`).
#![allow(dead_code)]

use gpuplane::host::sim::SimHostFile;
use gpuplane::proxmox::lxc_conf::LxcConfig;
use gpuplane::proxmox::pci_cfg::PciCfg;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const VMID: u32 = 129;
pub const NODE: &str = "kpro6";
pub const GPUS: [&str; 8] = [
    "0000:01:00.0",
    "0000:11:00.0",
    "0000:61:00.0",
    "0000:71:00.0",
    "0000:81:00.0",
    "0000:91:00.0",
    "0000:e1:00.0",
    "0000:f1:00.0",
];

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A directory with the reference manifests in `m/` and the reference host in `host.yaml`.
pub fn reference_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("m")).unwrap();
    for f in ["partition.yaml", "server.yaml"] {
        std::fs::copy(repo().join("examples/kpro6").join(f), d.join("m").join(f)).unwrap();
    }
    std::fs::copy(
        repo().join("examples/hosts/kpro6.yaml"),
        d.join("host.yaml"),
    )
    .unwrap();
    dir
}

/// The agent on manifest files over a [`reference_dir`] `d`: `gpuplane run --manifests d/m` on
/// the simulated host `d/host.yaml` (50 times faster than wall time), status in `d/status`, a
/// 1 s poll, metrics on a free port. Add `--max-rounds N` to have it end once settled.
pub fn standalone_agent(d: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuplane"));
    c.args(["run", "--manifests"])
        .arg(d.join("m"))
        .arg("--host")
        .arg(format!("sim-rw:{}", d.join("host.yaml").display()))
        .arg("--status-dir")
        .arg(d.join("status"))
        .args(["--sim-speed", "50", "--poll-interval", "1"])
        .args(["--metrics-addr", "127.0.0.1:0"]);
    c
}

/// `gpuplane converge -f MANIFESTS --host sim-rw:HOST --output json`, killed after write `kill`.
pub fn converge(manifests: &str, host: &Path, kill: Option<u64>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuplane"));
    c.args(["converge", "-f", manifests, "--output", "json", "--host"])
        .arg(format!("sim-rw:{}", host.display()))
        .current_dir(repo())
        .env_remove("GPUPLANE_LOG");
    match kill {
        Some(k) => c.env("GPUPLANE_KILL_AFTER_WRITE", k.to_string()),
        None => c.env_remove("GPUPLANE_KILL_AFTER_WRITE"),
    };
    c.output().expect("gpuplane runs")
}

/// The host writes a finished run reports; panics unless it exited 0 (converged and Ready).
pub fn writes_of_converged(o: &Output, what: &str) -> u64 {
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

pub fn read_host(path: &Path) -> SimHostFile {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The host with clocks taken out: what an uninterrupted run and a recovered one must share.
pub fn timeless(mut h: SimHostFile) -> String {
    h.clock = 0;
    for u in h.units.values_mut() {
        u.started_at = None;
    }
    serde_yaml::to_string(&h).unwrap()
}

/// The reference host with foreign content an agent must never lose: comments and a foreign
/// device line in the container config; a comment, another node's entry and a NIC mapping of
/// this node in `pci.cfg`.
pub fn reference_host_with_foreign_lines() -> SimHostFile {
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
pub fn foreign_lxc_lines(text: &str) -> Vec<String> {
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
pub fn foreign_pci_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && *l != "pro6000-vm")
        .filter(|l| !(l.contains(&format!("node={NODE},")) && GPUS.iter().any(|g| l.contains(g))))
        .map(str::to_string)
        .collect()
}

/// Every GPU bound to a driver and owned by exactly one consumer of that driver.
pub fn check_ownership(h: &SimHostFile, what: &str) {
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

/// What must hold of a host file a run left behind, killed or stopped by a fault: it parses,
/// no temporary file is left, the foreign lines of `start` are all there in order, the
/// container config is whole, and a running container sees only GPUs bound to nvidia.
pub fn check_host_file(host: &Path, start: &SimHostFile, what: &str) {
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
