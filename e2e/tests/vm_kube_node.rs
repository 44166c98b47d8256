//! The chart on a real kubelet node: the qemu GPU host boots as a single-node Kubernetes v1.20.2
//! cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubelet built from
//! Debian's `kubernetes` source package; containerd, runc and the CNI plugins from Debian), the
//! image of `packaging/image/build.sh` is imported into containerd, `helm install` of
//! `charts/gpuplane` starts the agent's privileged DaemonSet pod (host tools through nsenter), a
//! `kubectl apply`'d GpuPartition moves the NUMA-1 stand-in GPUs to vfio-pci (read back from
//! sysfs) and turns Ready; deleting it (`deletionPolicy: Restore`) puts them back on their host
//! driver, and `helm uninstall` removes the pods. Prints how long each phase took.
//!
//! Opt-in, as it does not fit CI's budget on two cores (a cold set-up compiles three more
//! Kubernetes binaries, ~13 min, and builds the node image; the boot takes ~17 min under TCG):
//!
//!     sudo env KUBE_BUILD_NODE=1 e2e/setup/kube-build.sh && sudo e2e/vm/build-kube-image.sh
//!     GPUPLANE_E2E_REAL_NODE=1 cargo test -p gpuplane-e2e --test vm_kube_node -- --nocapture
//!
//! (`GPUPLANE_E2E_REAL_NODE=1 e2e/test-all.sh` does both set-up steps and runs it with the rest.)

use gpuplane_e2e::paths::{cache_dir, gpuplane_bin, repo_root};
use gpuplane_e2e::vm::{preflight, run};
use std::process::Command;

const ENABLE: &str = "GPUPLANE_E2E_REAL_NODE";

#[test]
fn the_chart_runs_the_agent_on_a_real_kubelet_node() {
    if std::env::var(ENABLE).as_deref() != Ok("1") {
        eprintln!(
            "vm_kube_node: not run; set {ENABLE}=1 (needs e2e/vm/build-kube-image.sh, see docs/develop.md)"
        );
        return;
    }
    preflight();
    let dir = std::env::temp_dir().join(format!("gpuplane-vm-kube-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let image = dir.join("gpuplane-image.tar");
    let chart = dir.join("gpuplane-chart.tar");
    // The debug binary without its debug info (280 -> 45 MB): unpacking the image in the
    // emulated VM takes minutes per hundred megabytes.
    let bin = dir.join("gpuplane");
    sh(Command::new("strip")
        .arg("-o")
        .arg(&bin)
        .arg(gpuplane_bin()));
    sh(Command::new(repo_root().join("packaging/image/build.sh"))
        .arg("--binary")
        .arg(&bin)
        .arg(&image));
    sh(Command::new("tar")
        .arg("cf")
        .arg(&chart)
        .arg("-C")
        .arg(repo_root().join("charts"))
        .arg("gpuplane"));
    let helm = cache_dir().join("helm/helm");
    assert!(
        helm.is_file(),
        "{} missing: run e2e/setup/helm.sh",
        helm.display()
    );

    let r = run(
        &repo_root().join("e2e/vm/scenarios/kube-node.sh"),
        &[helm, image, chart],
        &[
            ("VM_IMAGE", "kube-node"),
            ("VM_MEM", "4096"),
            // Booted: the node's services start at boot, and no snapshot of this image is kept.
            ("VM_BOOT", "fresh"),
            ("VM_TIMEOUT", "2700"),
        ],
    );
    std::fs::remove_dir_all(&dir).ok();
    let out = &r.stdout;
    eprintln!("--- kube-node.sh: VM {:.0}s\n{out}", r.secs);
    assert!(
        r.code != Some(2),
        "the node image is not set up: run e2e/vm/build-kube-image.sh (as root)\n{}",
        r.stderr
    );
    assert_eq!(r.code, Some(0), "kube-node.sh failed:\n{out}\n{}", r.stderr);

    let line = |prefix: &str| out.lines().find(|l| l.starts_with(prefix));
    // The agent's pod is privileged with the host's PID namespace, and its host-tool wrapper
    // reaches the host's systemd through nsenter.
    let pod = line("OK agent-pod ").expect("agent pod line");
    assert!(
        pod.contains("privileged=true") && pod.contains("hostPID=true"),
        "{pod}"
    );
    let tool = line("HOSTTOOL ").expect("host tool line");
    assert!(
        ["running", "degraded", "starting"]
            .iter()
            .any(|s| tool == format!("HOSTTOOL {s}")),
        "the systemctl wrapper did not reach the host's systemd: {tool}"
    );
    // Applied: the NUMA-1 GPUs on vfio-pci, the host slice on its host driver, Ready.
    for (d, drv) in [
        ("0000:41:00.0", "bochs-drm"),
        ("0000:42:00.0", "bochs-drm"),
        ("0000:81:00.0", "vfio-pci"),
        ("0000:82:00.0", "vfio-pci"),
    ] {
        assert!(
            out.lines().any(|l| l == format!("DRV {d} {drv}")),
            "{d} not on {drv} after apply:\n{out}"
        );
    }
    assert!(
        out.lines().any(|l| l.starts_with("CONDITION Ready True")),
        "{out}"
    );
    // Deleted with deletionPolicy Restore: every GPU back on its host driver.
    for d in [
        "0000:41:00.0",
        "0000:42:00.0",
        "0000:81:00.0",
        "0000:82:00.0",
    ] {
        assert!(
            out.lines().any(|l| l == format!("DRV-AFTER {d} bochs-drm")),
            "{d} not restored:\n{out}"
        );
    }
    let phases: Vec<&str> = out.lines().filter(|l| l.starts_with("PHASE ")).collect();
    for p in [
        "boot",
        "apiserver_ready",
        "node_ready",
        "image_import",
        "helm_install_to_agent_ready",
        "apply_to_ready",
        "delete_to_restored",
        "helm_uninstall",
    ] {
        assert!(
            phases.iter().any(|l| l.starts_with(&format!("PHASE {p} "))),
            "phase {p} missing: {phases:?}"
        );
    }
    println!(
        "real-node phases (seconds; VM wall {:.0}s):\n{}",
        r.secs,
        phases.join("\n")
    );
}

/// Runs `cmd`, panicking with its output when it fails.
fn sh(cmd: &mut Command) {
    gpuplane_e2e::paths::run_ok(cmd);
}
