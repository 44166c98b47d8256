//! Kills inside the locked edit of a container config, on the real host backend (issue 20).
//!
//! `gpuplane converge --host local --host-root ROOT` runs on a host root built here: sysfs and
//! `/proc` files of two NVIDIA GPUs on `nvidia`, `/etc/pve/lxc/129.conf` with foreign lines, and a
//! `pct` stand-in that keeps the container's running state in a file (the qemu host has no LXC
//! runtime yet). The transitions change only which GPUs the container gets, so the real
//! backend's config edit — the flock `/run/lock/lxc/pve-config-129.lock`, a temporary file and a
//! rename — runs exactly as on a Proxmox host. For each direction and each point inside the lock
//! (`GPUPLANE_KILL_IN_LOCK=held|temp|renamed:1`), the converge kills itself with SIGKILL there;
//! the next converge must finish the transition (a flock dies with its holder, a dead writer's
//! temporary file is removed by the next write), the one after must write nothing, and every
//! line the agent does not own must be where it was.

use std::path::Path;
use std::process::{Command, Output};

const FOREIGN: &str = "arch: amd64\nhostname: sglang\n# GPUs kept by gpuplane; the rest by hand\nmemory: 65536\nmp0: /tank/models,mp=/models\n";

fn w(root: &Path, p: &str, s: &str) {
    let p = root.join(p.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, s).unwrap();
}

/// Two NVIDIA GPUs on `nvidia` (minors 0 and 1), container 129 holding both, a `pct` stand-in.
fn host_root() -> tempfile::TempDir {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    w(r, "/sys/bus/pci/drivers/nvidia/unbind", "");
    w(r, "/sys/bus/pci/drivers/vfio-pci/unbind", "");
    w(r, "/sys/bus/pci/drivers_probe", "");
    for (i, (a, numa)) in [("0000:01:00.0", "0"), ("0000:81:00.0", "1")]
        .into_iter()
        .enumerate()
    {
        let d = format!("/sys/bus/pci/devices/{a}");
        for (f, v) in [
            ("vendor", "0x10de"),
            ("device", "0x2bb5"),
            ("class", "0x030200"),
            ("subsystem_vendor", "0x10de"),
            ("subsystem_device", "0x204e"),
            ("numa_node", numa),
            ("driver_override", "(null)"),
        ] {
            w(r, &format!("{d}/{f}"), &format!("{v}\n"));
        }
        let group = 10 + i;
        let base = r.join(d.trim_start_matches('/'));
        symlink(
            format!("../../../../kernel/iommu_groups/{group}"),
            base.join("iommu_group"),
        )
        .unwrap();
        symlink("../../../../bus/pci/drivers/nvidia", base.join("driver")).unwrap();
        w(
            r,
            &format!("/sys/kernel/iommu_groups/{group}/type"),
            "DMA\n",
        );
        std::fs::create_dir_all(r.join(format!("sys/kernel/iommu_groups/{group}/devices/{a}")))
            .unwrap();
        w(
            r,
            &format!("/proc/driver/nvidia/gpus/{a}/information"),
            &format!("Model: \t\t NVIDIA RTX PRO 6000\nDevice Minor: \t {i}\n"),
        );
    }
    w(r, "/sys/module/nvidia/version", "590.44.01\n");
    w(
        r,
        "/proc/devices",
        "Character devices:\n195 nvidia\n508 nvidia-uvm\n",
    );
    w(
        r,
        "/proc/cmdline",
        "BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1\n",
    );
    w(r, "/dev/kmsg", "");
    w(r, "/etc/hostname", "kpro6\n");
    w(
        r,
        "/etc/pve/lxc/129.conf",
        &format!("{FOREIGN}lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.allow: c 508:* rwm\nlxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\nlxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n"),
    );
    w(r, "/var/pct-129.state", "running\n");
    // pct: status/start/stop over the state file; anything else (exec) fails like a container
    // without the tool.
    let st = r.join("var/pct-129.state");
    w(
        r,
        "/bin/pct",
        &format!(
            "#!/bin/sh\nS={st}\ncase \"$1\" in\n  status) echo \"status: $(cat $S)\" ;;\n  start) echo running > $S ;;\n  stop) echo stopped > $S ;;\n  *) echo \"pct stand-in: $1 not supported\" >&2; exit 2 ;;\nesac\n",
            st = st.display()
        ),
    );
    w(r, "/bin/qm", "#!/bin/sh\necho 'status: stopped'\n");
    for b in ["pct", "qm"] {
        std::fs::set_permissions(
            r.join("bin").join(b),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    t
}

/// The partition: GPU 0 (and GPU 1 when `both`) in container 129, the rest unassigned on nvidia.
fn manifests(dir: &Path, both: bool) {
    let ct = if both {
        r#"["0000:01:00.0", "0000:81:00.0"]"#
    } else {
        r#"["0000:01:00.0"]"#
    };
    let spare = if both {
        String::new()
    } else {
        "    - name: spare\n      gpus: {addresses: [\"0000:81:00.0\"]}\n      driver: nvidia\n"
            .into()
    };
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("partition.yaml"),
        format!(
            "apiVersion: gpuplane.dev/v1alpha1\nkind: GpuPartition\nmetadata: {{name: kpro6}}\nspec:\n  nodeName: kpro6\n  slices:\n    - name: ct\n      gpus: {{addresses: {ct}}}\n      driver: nvidia\n      consumer: {{lxc: {{vmid: 129}}}}\n{spare}"
        ),
    )
    .unwrap();
}

fn converge(root: &Path, manifests: &Path, kill: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpuplane"));
    c.args(["converge", "--output", "json", "--host", "local", "-f"])
        .arg(manifests)
        .arg("--host-root")
        .arg(root)
        .env("GPUPLANE_PCT", root.join("bin/pct"))
        .env("GPUPLANE_QM", root.join("bin/qm"))
        .env("GPUPLANE_NVIDIA_SMI", "/nonexistent/nvidia-smi")
        .env("GPUPLANE_SYSTEMCTL", "/bin/false")
        .env("GPUPLANE_JOURNALCTL", "/bin/false")
        .env_remove("GPUPLANE_LOG")
        .env_remove("GPUPLANE_KILL_AFTER_WRITE");
    match kill {
        Some(k) => c.env("GPUPLANE_KILL_IN_LOCK", k),
        None => c.env_remove("GPUPLANE_KILL_IN_LOCK"),
    };
    c.output().expect("gpuplane runs")
}

fn show(o: &Output) -> String {
    format!(
        "exit {:?}\n{}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn writes(o: &Output) -> u64 {
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(o)));
    v["writes"].as_u64().unwrap()
}

/// The GPU device lines of the container config and its state, and what else lies in its
/// directory.
fn container(root: &Path) -> (String, String, Vec<String>) {
    let conf = std::fs::read_to_string(root.join("etc/pve/lxc/129.conf")).unwrap();
    let state = std::fs::read_to_string(root.join("var/pct-129.state")).unwrap();
    let mut files: Vec<String> = std::fs::read_dir(root.join("etc/pve/lxc"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    (conf, state.trim().to_string(), files)
}

#[test]
fn a_kill_inside_the_container_configs_lock_heals_in_both_directions() {
    let mut results = vec![];
    for (name, from_both, to_both) in [("split", true, false), ("back", false, true)] {
        // The reference: an uninterrupted run from the start state.
        let reference = {
            let t = host_root();
            let m = t.path().join("m");
            manifests(&m, from_both);
            assert_eq!(converge(t.path(), &m, None).status.code(), Some(0));
            manifests(&m, to_both);
            let o = converge(t.path(), &m, None);
            assert_eq!(o.status.code(), Some(0), "{name}: {}", show(&o));
            assert!(writes(&o) >= 3, "{name}: stop, edit, start: {}", show(&o));
            container(t.path())
        };
        assert!(reference.0.starts_with(FOREIGN), "{}", reference.0);
        assert_eq!(reference.1, "running");
        assert_eq!(reference.2, vec!["129.conf"]);
        for point in ["held", "temp", "renamed"] {
            let t = host_root();
            let m = t.path().join("m");
            manifests(&m, from_both);
            assert_eq!(converge(t.path(), &m, None).status.code(), Some(0));
            let before = container(t.path()).0;
            manifests(&m, to_both);
            let killed = converge(t.path(), &m, Some(&format!("{point}:1")));
            // SIGKILL: no exit code, the signal.
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                killed.status.signal(),
                Some(9),
                "{name} {point}: {}",
                show(&killed)
            );
            let (conf, _, files) = container(t.path());
            let tmp: Vec<&String> = files.iter().filter(|f| f.contains(".tmp.")).collect();
            match point {
                "held" => assert_eq!(conf, before, "{name} {point}: nothing written yet"),
                "temp" => {
                    assert_eq!(conf, before, "{name} {point}: not renamed yet");
                    assert_eq!(
                        tmp.len(),
                        1,
                        "{name} {point}: the temporary file: {files:?}"
                    );
                }
                _ => assert_eq!(conf, reference.0, "{name} {point}: renamed"),
            }
            assert!(conf.starts_with(FOREIGN), "{name} {point}: {conf}");
            let recover = converge(t.path(), &m, None);
            assert_eq!(
                recover.status.code(),
                Some(0),
                "{name} {point}: the next converge: {}",
                show(&recover)
            );
            let again = converge(t.path(), &m, None);
            assert_eq!(again.status.code(), Some(0), "{}", show(&again));
            assert_eq!(writes(&again), 0, "{name} {point}: {}", show(&again));
            assert_eq!(
                container(t.path()),
                reference,
                "{name} {point}: the host after recovery"
            );
            results.push(format!("{name} {point}:1 ok"));
        }
    }
    println!(
        "container config, kills inside its lock: {}/6 recovered: {results:?}",
        results.len()
    );
}
