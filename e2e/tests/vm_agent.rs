//! The real host backend on a real Linux kernel: `gpuplane converge --host local` inside a qemu VM
//! with an emulated IOMMU and stand-in GPUs (bochs-display) on two NUMA nodes, checked by reading
//! sysfs inside the VM. Proxmox is not installed there: `/etc/pve` is a plain directory.
//! Needs `e2e/setup/install-vm-deps.sh`, `e2e/vm/build-image.sh` and `cargo build --bin gpuplane`.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One VM at a time: two cores do not run two TCG guests well.
static VM: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn agent_binary() -> PathBuf {
    let p = repo().join("target/debug/gpuplane");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --bin gpuplane` first",
        p.display()
    );
    p
}

/// A temp dir and, in it, a tarball of the SGLang stand-in (`e2e/standin`) for the VM.
fn standin_tar(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tar = dir.join("standin.tar");
    let ok = Command::new("tar")
        .arg("cf")
        .arg(&tar)
        .arg("-C")
        .arg(repo().join("e2e"))
        .arg("standin")
        .status()
        .unwrap();
    assert!(ok.success(), "tar of e2e/standin failed");
    (dir, tar)
}

/// Boots the VM with `script` and files, returns what the script printed.
fn boot(script: &str, files: &[PathBuf], kargs: &str) -> String {
    let _one = VM.lock().unwrap_or_else(|e| e.into_inner());
    let started = std::time::Instant::now();
    let out = Command::new("bash")
        .arg(repo().join("e2e/vm/run.sh"))
        .arg(repo().join("e2e/vm/scenarios").join(script))
        .args(files)
        .env("KARGS", kargs)
        .env("VM_TIMEOUT", "900")
        .output()
        .expect("e2e/vm/run.sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "--- {script} (KARGS={kargs:?}): {:.0}s\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.code() != Some(2),
        "the VM is not set up: run e2e/setup/install-vm-deps.sh and e2e/vm/build-image.sh\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("== ") || stdout.contains("IOMMU"),
        "no output from the VM: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `TAG name rest...` lines by (tag, name).
fn lines(out: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut m: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for l in out.lines() {
        let mut it = l.splitn(3, ' ');
        if let (Some(tag), Some(name)) = (it.next(), it.next()) {
            m.entry((tag.into(), name.into()))
                .or_default()
                .push(it.next().unwrap_or("").to_string());
        }
    }
    m
}

fn get<'a>(
    m: &'a BTreeMap<(String, String), Vec<String>>,
    tag: &str,
    name: &str,
) -> &'a Vec<String> {
    m.get(&(tag.to_string(), name.to_string()))
        .unwrap_or_else(|| panic!("no {tag} {name} line"))
}

fn json(m: &BTreeMap<(String, String), Vec<String>>, name: &str) -> Value {
    serde_json::from_str(&get(m, "JSON", name)[0]).unwrap_or_else(|e| panic!("JSON {name}: {e}"))
}

fn rc(m: &BTreeMap<(String, String), Vec<String>>, name: &str) -> i32 {
    get(m, "RC", name)[0].parse().unwrap()
}

/// Driver and driver_override per address after a scenario.
fn drivers(
    m: &BTreeMap<(String, String), Vec<String>>,
    name: &str,
) -> BTreeMap<String, (String, String)> {
    get(m, "DRV", name)
        .iter()
        .map(|l| {
            let v: Vec<&str> = l.split(' ').collect();
            (
                v[0].to_string(),
                (v[1].to_string(), v.get(2).unwrap_or(&"").to_string()),
            )
        })
        .collect()
}

fn kinds(j: &Value) -> Vec<String> {
    j["steps"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s["kind"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn ready(j: &Value, resource: &str) -> (String, String, String) {
    let c = j["status"][resource]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    (
        c["status"].as_str().unwrap_or("").into(),
        c["reason"].as_str().unwrap_or("").into(),
        c["message"].as_str().unwrap_or("").into(),
    )
}

#[test]
fn real_kernel_partition_rebinding_refusals_and_a_real_unit() {
    let (dir, tar) = standin_tar("gpuplane-vm-agent");
    let out = boot("host-agent.sh", &[agent_binary(), tar], "");
    let m = lines(&out);

    // split: NUMA 1 on vfio-pci, NUMA 0 stays on bochs-drm, pinned by driver_override.
    assert_eq!(rc(&m, "split"), 0, "{}", json(&m, "split"));
    let d = drivers(&m, "split");
    for a in ["0000:81:00.0", "0000:82:00.0"] {
        assert_eq!(
            d[a],
            ("vfio-pci".to_string(), "vfio-pci".to_string()),
            "{a}"
        );
    }
    for a in ["0000:41:00.0", "0000:42:00.0", "0000:44:01.0"] {
        assert_eq!(
            d[a],
            ("bochs-drm".to_string(), "bochs-drm".to_string()),
            "{a}"
        );
    }
    assert_eq!(
        get(&m, "VFIO", "split")
            .iter()
            .filter(|l| l.parse::<u32>().is_ok())
            .count(),
        2,
        "one /dev/vfio node per moved group"
    );
    let cfg = get(&m, "PCICFG", "split").join("\n");
    assert!(
        cfg.starts_with(
            "# mappings kept by hand\nnic\n\tmap id=8086:100e,node=vmhost,path=0000:44:02.0\n"
        ),
        "foreign lines kept:\n{cfg}"
    );
    assert!(
        cfg.contains("emu-vm\n\tmap id=1234:1111,iommugroup="),
        "{cfg}"
    );
    assert!(
        cfg.contains("path=0000:81:00.0") && cfg.contains("path=0000:82:00.0"),
        "{cfg}"
    );
    let split = json(&m, "split");
    assert_eq!(ready(&split, "GpuPartition/vmhost").0, "True");
    assert!(
        kinds(&split).contains(&"loadDriver".to_string()),
        "vfio-pci was loaded: {:?}",
        kinds(&split)
    );

    // A second converge makes zero writes.
    assert_eq!(rc(&m, "again"), 0);
    assert_eq!(json(&m, "again")["writes"], 0);

    // back: NUMA 1 returns to the host driver, the mapping loses its GPUs, the NIC mapping stays.
    assert_eq!(rc(&m, "back"), 0, "{}", json(&m, "back"));
    let d = drivers(&m, "back");
    for a in ["0000:81:00.0", "0000:82:00.0"] {
        assert_eq!(d[a].0, "bochs-drm", "{a}");
    }
    let cfg = get(&m, "PCICFG", "back").join("\n");
    assert!(
        !cfg.contains("emu-vm") && cfg.contains("path=0000:44:02.0"),
        "{cfg}"
    );

    // held: a process holding 0000:82:00.0 blocks the whole plan; nothing changes.
    assert_eq!(rc(&m, "held"), 1);
    let held = json(&m, "held");
    assert_eq!(held["writes"], 0);
    let (s, reason, msg) = ready(&held, "GpuPartition/vmhost");
    assert_eq!((s.as_str(), reason.as_str()), ("False", "GpuInUse"));
    assert!(
        msg.contains("0000:82:00.0") && msg.contains("(sleep)"),
        "{msg}"
    );
    assert_eq!(
        drivers(&m, "held"),
        drivers(&m, "back"),
        "nothing was changed"
    );

    // shared: VFIO needs the whole group; a foreign NIC and a bridge on shpchp share it.
    assert_eq!(rc(&m, "shared"), 1);
    let shared = json(&m, "shared");
    assert_eq!(shared["writes"], 0);
    let (_, reason, msg) = ready(&shared, "GpuPartition/vmhost");
    assert_eq!(reason, "IommuGroupShared");
    assert!(
        msg.contains("0000:44:02.0") && msg.contains("e1000"),
        "{msg}"
    );
    assert_eq!(drivers(&m, "shared")["0000:44:01.0"].0, "bochs-drm");

    // unit: written, daemon-reloaded, started, observed active and ready, holding its GPU.
    let unit = json(&m, "unit");
    assert_eq!(rc(&m, "unit"), 0, "{unit}");
    // A new unit file needs no daemon-reload (systemd loads it on first use; NeedDaemonReload=no),
    // so the re-plan after writing it goes straight to the start.
    let k = kinds(&unit);
    assert_eq!(k.first().map(String::as_str), Some("writeUnit"), "{unit}");
    assert_eq!(&k[k.len() - 2..], ["startUnit", "waitReady"], "{unit}");
    assert_eq!(
        ready(&unit, "InferenceServer/default/e2e").0,
        "True",
        "{unit}"
    );
    assert_eq!(get(&m, "ACTIVE", "unit")[0], "active");
    assert_eq!(get(&m, "EXECSTART", "unit")[0], "1");
    let holders: Value = serde_json::from_str(&get(&m, "HOLDERS", "unit")[0]).unwrap();
    assert_eq!(
        holders[0]["unit"], "sglang-e2e.service",
        "the server's process is attributed to its unit: {holders}"
    );
    assert_eq!(
        json(&m, "unit-again")["writes"],
        0,
        "an unrelated reconcile does not restart the unit"
    );

    // move: the GPU the running server holds goes to the VM: the unit is stopped first, then the
    // GPU is rebound, then the unit (new CUDA_VISIBLE_DEVICES) is written and started again.
    let mv = json(&m, "move");
    assert_eq!(rc(&m, "move"), 0, "{mv}");
    let k = kinds(&mv);
    let pos = |kind: &str| {
        k.iter()
            .position(|x| x == kind)
            .unwrap_or_else(|| panic!("no {kind} in {k:?}"))
    };
    assert!(
        pos("stopUnit") < pos("unbind")
            && pos("unbind") < pos("writeUnit")
            && pos("writeUnit") < pos("startUnit"),
        "{k:?}"
    );
    assert_eq!(drivers(&m, "move")["0000:42:00.0"].0, "vfio-pci");
    assert_eq!(get(&m, "ACTIVE", "move")[0], "active");
    let journal = get(&m, "JOURNAL", "move").join("\n");
    assert!(
        journal.contains("Stopped"),
        "systemd stopped the unit: {journal}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn iommu_mode_is_observed_from_the_kernel() {
    for (kargs, want) in [("", "DMA-FQ"), ("iommu=pt", "identity")] {
        let out = boot("iommu-mode.sh", &[agent_binary()], kargs);
        let il = out
            .lines()
            .find(|l| l.starts_with("IOMMU "))
            .expect("IOMMU line");
        let iommu: Value = serde_json::from_str(&il[6..]).unwrap();
        let gl = out
            .lines()
            .find(|l| l.starts_with("GPUS "))
            .expect("GPUS line");
        let gpus: Value = serde_json::from_str(&gl[5..]).unwrap();
        assert_eq!(gpus.as_object().unwrap().len(), 5, "{gpus}");
        for (addr, group) in gpus.as_object().unwrap() {
            let g = group
                .as_u64()
                .unwrap_or_else(|| panic!("{addr} has no IOMMU group"));
            assert_eq!(
                iommu["groupTypes"][g.to_string()],
                want,
                "{addr} group {g} with KARGS={kargs:?}: {iommu}"
            );
        }
        if kargs.contains("iommu=pt") {
            assert!(
                iommu["cmdline"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|o| o == "iommu=pt"),
                "{iommu}"
            );
        }
    }
}

/// The reference story on a real kernel with a real systemd unit running the SGLang stand-in.
#[test]
fn reference_story_stall_then_p2p_auto_then_one_restart() {
    let (dir, tar) = standin_tar("gpuplane-vm-story");
    let out = boot("story.sh", &[agent_binary(), tar], "");
    let m = lines(&out);
    const S: &str = "InferenceServer/default/qwen";

    // P2P on: the server hangs in NCCL init; the agent says StartupStalled within stallAfter + one poll.
    let en = json(&m, "enabled");
    assert_eq!(rc(&m, "enabled"), 1, "{en}");
    let (status, reason, msg) = ready(&en, S);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "StartupStalled"),
        "{en}"
    );
    assert!(
        msg.contains("in phase Launching") && msg.contains("Init parallel begin"),
        "phase and log tail: {msg}"
    );
    let wait = en["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "waitReady")
        .unwrap();
    let secs: u64 = wait["detail"]
        .as_str()
        .unwrap()
        .split(" for ")
        .nth(1)
        .unwrap()
        .trim_end_matches(" s")
        .parse()
        .unwrap();
    assert!(
        (20..=25).contains(&secs),
        "stall reported after {secs} s: {wait}"
    );
    assert_eq!(
        get(&m, "ACTIVE", "enabled")[0],
        "active",
        "the unit stays active while the server hangs, as in the story"
    );

    // P2P Auto after IO_PAGE_FAULTs: NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce; Ready.
    let auto = json(&m, "auto");
    assert_eq!(rc(&m, "auto"), 0, "{auto}");
    assert_eq!(ready(&auto, S).0, "True", "{auto}");
    let p2p = auto["status"][S]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "P2PSafe")
        .unwrap()
        .clone();
    assert_eq!(p2p["reason"], "P2PCorruption");
    assert!(
        p2p["message"].as_str().unwrap().contains("IO_PAGE_FAULT"),
        "{p2p}"
    );
    let unit = get(&m, "UNIT", "auto").join("\n");
    assert!(
        unit.contains("NCCL_P2P_DISABLE=1") && unit.contains("--disable-custom-all-reduce"),
        "{unit}"
    );
    assert!(get(&m, "MODELS", "auto")[0].contains("\"qwen\""));

    // An unrelated converge: zero writes, same process. A spec change: one restart, then zero writes.
    assert_eq!(json(&m, "again")["writes"], 0);
    assert_eq!(get(&m, "PID", "again")[0], "same");
    let steps = json(&m, "steps");
    assert_eq!(rc(&m, "steps"), 0, "{steps}");
    assert_eq!(
        kinds(&steps),
        vec!["writeUnit", "daemonReload", "startUnit", "waitReady"]
    );
    assert!(steps["steps"][0]["why"]
        .as_str()
        .unwrap()
        .contains("--speculative-num-steps 3 -> 4"));
    assert_eq!(get(&m, "PID", "steps")[0], "changed");
    assert_eq!(json(&m, "steps-again")["writes"], 0);
    let _ = std::fs::remove_dir_all(&dir);
}
