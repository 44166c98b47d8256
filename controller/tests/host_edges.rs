//! Edge cases of the host itself (issue 13, item 6), through the `gpuplane` binary on fake host
//! roots (`--host local --host-root DIR`): one GPU, no GPU, no IOMMU groups, no Proxmox, no
//! systemd. Each is observed and said plainly; none is an error.

use std::path::Path;
use std::process::{Command, Output};

/// A fake root with `gpus` NVIDIA GPUs bound to nvidia, no IOMMU groups, no /etc/pve and no
/// systemd.
fn root(gpus: usize) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let w = |p: &str, s: &str| {
        let p = t.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    };
    for i in 0..gpus {
        let a = format!("0000:{:02x}:00.0", i + 1);
        w(&format!("/sys/bus/pci/devices/{a}/vendor"), "0x10de\n");
        w(&format!("/sys/bus/pci/devices/{a}/device"), "0x2335\n");
        w(&format!("/sys/bus/pci/devices/{a}/class"), "0x030200\n");
        let info = format!("Device Minor: \t {i}\n");
        w(&format!("/proc/driver/nvidia/gpus/{a}/information"), &info);
        let dev = t.path().join(format!("sys/bus/pci/devices/{a}"));
        std::os::unix::fs::symlink("../../../../bus/pci/drivers/nvidia", dev.join("driver"))
            .unwrap();
    }
    w("/proc/cmdline", "root=/dev/sda1 quiet\n");
    t
}

fn gpuplane(root: &Path, args: &[&str]) -> Output {
    gpuplane_on(root, "edge", args)
}

fn gpuplane_on(root: &Path, node: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuplane"))
        .args(args)
        .args(["--host", "local", "--node-name", node, "--host-root"])
        .arg(root)
        .output()
        .expect("gpuplane runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn p2p_probe_with_one_gpu_says_there_is_nothing_to_probe() {
    let t = root(1);
    let o = gpuplane(t.path(), &["p2p-probe", "--python", "/nonexistent/python3"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "nothing to probe: P2P needs at least two GPUs bound to nvidia; there is only 0000:01:00.0\n"
    );
    // Naming the one GPU says the same; naming a GPU that is not there is still an error.
    let o = gpuplane(t.path(), &["p2p-probe", "0000:01:00.0"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = gpuplane(t.path(), &["p2p-probe", "0000:02:00.0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("0000:02:00.0 is not a GPU bound to nvidia"));
}

#[test]
fn p2p_probe_with_no_gpu_says_there_is_nothing_to_probe() {
    let t = root(0);
    let o = gpuplane(t.path(), &["p2p-probe"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains(
        "nothing to probe: P2P needs at least two GPUs bound to nvidia; this host has none"
    ));
}

#[test]
fn observe_says_plainly_what_the_host_lacks() {
    for gpus in [0, 1] {
        let t = root(gpus);
        let o = gpuplane(t.path(), &["observe", "--output", "json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let st: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let notes: Vec<&str> = st["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        let first = if gpus == 0 { "no GPU:" } else { "one GPU:" };
        for want in [first, "no Proxmox VE:", "no systemd:"] {
            assert!(
                notes.iter().any(|n| n.starts_with(want)),
                "{gpus} GPUs: {notes:?}"
            );
        }
        let iommu = st["iommu"]["notes"].to_string();
        assert!(iommu.contains("no IOMMU groups are exposed"), "{iommu}");
    }
}

#[test]
fn plan_on_a_host_without_proxmox_names_the_missing_container() {
    let t = root(8);
    let o = gpuplane_on(t.path(), "kpro6", &["plan", "-f", "../examples/kpro6"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("spec.slices[0].consumer.lxc.vmid: container 129 does not exist on this host"),
        "{out}"
    );
}
