use super::*;
use std::os::unix::fs::symlink;

/// A fake root: two NVIDIA GPUs (one with its audio function in the same IOMMU group), nvidia
/// and vfio-pci drivers, a process in LXC 129 holding /dev/nvidia1, Proxmox files, a `pct` stand-in.
fn fake_root() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let w = |p: &str, s: &str| {
        let p = r.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    };
    for d in ["nvidia", "vfio-pci", "snd_hda_intel"] {
        w(&format!("/sys/bus/pci/drivers/{d}/unbind"), "");
    }
    w("/sys/bus/pci/drivers_probe", "");
    let dev = |a: &str, class: &str, dev_id: &str, group: u32, driver: &str, numa: &str| {
        w(&format!("/sys/bus/pci/devices/{a}/vendor"), "0x10de\n");
        w(
            &format!("/sys/bus/pci/devices/{a}/device"),
            &format!("0x{dev_id}\n"),
        );
        w(
            &format!("/sys/bus/pci/devices/{a}/class"),
            &format!("0x{class}\n"),
        );
        w(
            &format!("/sys/bus/pci/devices/{a}/subsystem_vendor"),
            "0x10de\n",
        );
        w(
            &format!("/sys/bus/pci/devices/{a}/subsystem_device"),
            "0x204e\n",
        );
        w(&format!("/sys/bus/pci/devices/{a}/numa_node"), numa);
        w(
            &format!("/sys/bus/pci/devices/{a}/driver_override"),
            "(null)\n",
        );
        let base = r.join(format!("sys/bus/pci/devices/{a}"));
        symlink(
            format!("../../../../kernel/iommu_groups/{group}"),
            base.join("iommu_group"),
        )
        .unwrap();
        symlink(
            format!("../../../../bus/pci/drivers/{driver}"),
            base.join("driver"),
        )
        .unwrap();
        w(
            &format!("/sys/kernel/iommu_groups/{group}/type"),
            "DMA-FQ\n",
        );
        std::fs::create_dir_all(r.join(format!("sys/kernel/iommu_groups/{group}/devices/{a}")))
            .unwrap();
    };
    dev("0000:01:00.0", "030200", "2bb5", 10, "nvidia", "0\n");
    dev("0000:81:00.0", "030000", "2bb5", 11, "nvidia", "1\n");
    dev("0000:81:00.1", "040300", "22e8", 11, "snd_hda_intel", "1\n");
    w(
        "/proc/driver/nvidia/gpus/0000:01:00.0/information",
        "Model: \t\t NVIDIA RTX PRO 6000\nDevice Minor: \t 0\n",
    );
    w(
        "/proc/driver/nvidia/gpus/0000:81:00.0/information",
        "Model: \t\t NVIDIA RTX PRO 6000\nDevice Minor: \t 1\n",
    );
    w("/sys/module/nvidia/version", "590.44.01\n");
    w(
        "/proc/devices",
        "Character devices:\n  1 mem\n195 nvidia\n508 nvidia-uvm\n",
    );
    w(
        "/proc/cmdline",
        "BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 amd_iommu=on iommu=pt\n",
    );
    w("/dev/kmsg", "iommu: Default domain type: Translated\nAMD-Vi: Event logged [IO_PAGE_FAULT device=81:00.0 domain=0x000e address=0x1000 flags=0x0020]\n");
    w("/etc/hostname", "kpro6\n");
    // pid 4242 in container 129 holds /dev/nvidia1
    w("/proc/4242/comm", "python3\n");
    w(
        "/proc/4242/cgroup",
        "0::/lxc/129/ns/system.slice/sglang-qwen.service\n",
    );
    std::fs::create_dir_all(r.join("proc/4242/fd")).unwrap();
    symlink("/dev/nvidia1", r.join("proc/4242/fd/7")).unwrap();
    symlink("/dev/null", r.join("proc/4242/fd/0")).unwrap();
    w(
        "/etc/pve/lxc/129.conf",
        "arch: amd64\nhostname: sglang\n# GPUs\nlxc.cgroup2.devices.allow: c 195:* rwm\nlxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\nlxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n",
    );
    w(
        "/etc/pve/qemu-server/200.conf",
        "name: snp\nhostpci0: mapping=pro6000-vm,pcie=1\n[before]\nhostpci0: mapping=old\n",
    );
    w(
        "/etc/pve/mapping/pci.cfg",
        "other\n\tmap id=8086:1520,node=kpro6,path=0000:07:10.0\n\n",
    );
    // A pct/qm stand-in that answers status queries.
    w("/bin/pct", "#!/bin/sh\n[ \"$1\" = status ] && echo 'status: running' && exit 0\necho \"$@\" >> \"$(dirname \"$0\")/pct.log\"\n");
    w("/bin/qm", "#!/bin/sh\necho 'status: stopped'\n");
    for b in ["pct", "qm"] {
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(r.join("bin").join(b))
            .status()
            .unwrap();
    }
    t
}

fn host(t: &tempfile::TempDir) -> LocalHost {
    let mut h = LocalHost::new(t.path(), "10de");
    h.tools.pct = t.path().join("bin/pct").to_string_lossy().into_owned();
    h.tools.qm = t.path().join("bin/qm").to_string_lossy().into_owned();
    h.tools.nvidia_smi = "/nonexistent/nvidia-smi".into();
    h.write_timeout = Duration::from_secs(2);
    h.lock_timeout = Duration::from_millis(500);
    h
}

#[test]
fn observes_devices_companions_holders_iommu_and_proxmox() {
    let t = fake_root();
    let st = host(&t).observe().unwrap();
    assert_eq!(st.node_name, "kpro6");
    let g0 = &st.pci_devices["0000:01:00.0"];
    assert_eq!(
        (g0.vendor.as_str(), g0.device.as_str(), g0.class.as_str()),
        ("10de", "2bb5", "030200")
    );
    assert_eq!(
        (g0.numa_node, g0.iommu_group, g0.nvidia_minor),
        (0, Some(10), Some(0))
    );
    assert_eq!(g0.driver.as_deref(), Some("nvidia"));
    assert_eq!(g0.driver_override, None, "(null) reads as no override");
    assert_eq!(g0.subsystem.as_deref(), Some("10de:204e"));
    // The audio function shares group 11 and is observed as a companion.
    assert_eq!(
        st.pci_devices["0000:81:00.1"].driver.as_deref(),
        Some("snd_hda_intel")
    );
    let h = &st.pci_devices["0000:81:00.0"].holders;
    assert_eq!(h.len(), 1);
    assert_eq!(
        (h[0].pid, h[0].command.as_str(), h[0].container),
        (4242, "python3", Some(129))
    );
    assert!(st.pci_devices["0000:01:00.0"].holders.is_empty());
    assert_eq!(st.iommu.cmdline, vec!["amd_iommu=on", "iommu=pt"]);
    assert_eq!(st.iommu.mode(), IommuMode::Translated);
    assert_eq!(st.iommu.page_faults.get("0000:81:00.0"), Some(&1));
    assert_eq!(st.nvidia.module_version.as_deref(), Some("590.44.01"));
    assert_eq!(st.nvidia.uvm_major, 508);
    assert!(st.pci_drivers.contains("vfio-pci"));
    assert_eq!(st.containers[&129].state, RunState::Running);
    assert_eq!(st.containers[&129].gpu_mounts.minors, [0, 1].into());
    assert_eq!(
        st.vms[&200].pci_mappings,
        vec!["pro6000-vm"],
        "snapshot sections do not count"
    );
    assert_eq!(st.pci_mappings["other"][0].paths, vec!["0000:07:10.0"]);
}

#[test]
fn unbind_of_a_held_gpu_is_refused_and_writes_nothing() {
    let t = fake_root();
    let mut h = host(&t);
    let e = h
        .apply(&Step::Unbind {
            address: "0000:81:00.0".into(),
            driver: "nvidia".into(),
        })
        .unwrap_err();
    assert!(
        matches!(&e, crate::host::HostError::InUse { address, holders, .. }
            if address == "0000:81:00.0" && holders.len() == 1),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("GpuInUse")
            && e.to_string()
                .contains("pid 4242 (python3) in container 129"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(t.path().join("sys/bus/pci/drivers/nvidia/unbind")).unwrap(),
        ""
    );
    // Not held: the address is written to the driver's unbind file.
    h.apply(&Step::Unbind {
        address: "0000:01:00.0".into(),
        driver: "nvidia".into(),
    })
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(t.path().join("sys/bus/pci/drivers/nvidia/unbind")).unwrap(),
        "0000:01:00.0"
    );
}

#[test]
fn override_and_a_probe_that_binds_nothing() {
    let t = fake_root();
    let mut h = host(&t);
    h.apply(&Step::SetDriverOverride {
        address: "0000:01:00.0".into(),
        driver: Some("vfio-pci".into()),
    })
    .unwrap();
    let p = t
        .path()
        .join("sys/bus/pci/devices/0000:01:00.0/driver_override");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "vfio-pci");
    // The fake kernel binds nothing: drivers_probe "succeeds", the re-read link says otherwise.
    let e = h
        .apply(&Step::Probe {
            address: "0000:01:00.0".into(),
        })
        .unwrap_err();
    assert!(
        e.to_string().contains("bound nvidia instead of vfio-pci"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(t.path().join("sys/bus/pci/drivers_probe")).unwrap(),
        "0000:01:00.0"
    );
}

/// After each binding write the backend re-reads only what such a write changes (driver,
/// override, minor): the state it hands the planner equals a full observation's, the GPU's
/// holders cleared with its driver (its old device node is gone).
#[test]
fn the_state_after_a_binding_write_equals_a_full_observation() {
    let t = fake_root();
    let mut h = host(&t);
    let a = "0000:01:00.0";
    let dev = t.path().join(format!("sys/bus/pci/devices/{a}"));
    let mut st = h.observe().unwrap();
    let override_step = Step::SetDriverOverride {
        address: a.into(),
        driver: Some("vfio-pci".into()),
    };
    h.apply(&override_step).unwrap();
    st = h
        .refresh(&override_step, &st)
        .unwrap()
        .expect("a binding step refreshes");
    assert_eq!(st.pci_devices, h.observe().unwrap().pci_devices);
    assert_eq!(
        st.pci_devices[a].driver_override.as_deref(),
        Some("vfio-pci")
    );

    // The kernel's part of the unbind and the probe (the fake root has no kernel): the device
    // moves to vfio-pci and leaves the NVIDIA driver's list.
    std::fs::remove_file(dev.join("driver")).unwrap();
    symlink("../../../../bus/pci/drivers/vfio-pci", dev.join("driver")).unwrap();
    std::fs::remove_dir_all(t.path().join(format!("proc/driver/nvidia/gpus/{a}"))).unwrap();
    let probe = Step::Probe { address: a.into() };
    st = h
        .refresh(&probe, &st)
        .unwrap()
        .expect("a binding step refreshes");
    let full = h.observe().unwrap();
    assert_eq!(st.pci_devices, full.pci_devices);
    let d = &st.pci_devices[a];
    assert_eq!(
        (d.driver.as_deref(), d.nvidia_minor),
        (Some("vfio-pci"), None)
    );
    // What a binding does not change was kept from the observation, not re-read as empty.
    assert_eq!((d.numa_node, d.iommu_group), (0, Some(10)));
    assert_eq!(d.class, "030200");

    // A device gone from the bus is no refresh: the caller observes in full.
    std::fs::remove_file(dev.join("vendor")).unwrap();
    assert!(h.refresh(&probe, &st).unwrap().is_none());
}

/// The fake root's second GPU as this node's entry of the VM's PCI mapping.
fn vm_mapping_entries() -> Vec<crate::proxmox::pci_cfg::MapEntry> {
    vec![crate::proxmox::pci_cfg::MapEntry {
        node: "kpro6".into(),
        id: "10de:2bb5".into(),
        paths: vec!["0000:81:00.0".into()],
        iommugroup: Some(11),
        subsystem_id: Some("10de:204e".into()),
        description: None,
    }]
}

#[test]
fn proxmox_edits_keep_foreign_lines_and_release_locks() {
    let t = fake_root();
    let mut h = host(&t);
    h.apply(&Step::SetContainerGpus {
        vmid: 129,
        minors: [0].into(),
    })
    .unwrap();
    let conf = std::fs::read_to_string(t.path().join("etc/pve/lxc/129.conf")).unwrap();
    assert!(
        conf.starts_with("arch: amd64\nhostname: sglang\n# GPUs\n"),
        "{conf}"
    );
    assert!(
        conf.contains("/dev/nvidia0 dev/nvidia0") && !conf.contains("/dev/nvidia1 dev/nvidia1"),
        "{conf}"
    );
    assert!(
        conf.contains("lxc.cgroup2.devices.allow: c 508:* rwm"),
        "uvm major from /proc/devices: {conf}"
    );
    let entries = vm_mapping_entries();
    h.apply(&Step::SetPciMapping {
        mapping: "pro6000-vm".into(),
        entries,
    })
    .unwrap();
    let cfg = std::fs::read_to_string(t.path().join("etc/pve/mapping/pci.cfg")).unwrap();
    assert!(
        cfg.starts_with("other\n\tmap id=8086:1520,node=kpro6,path=0000:07:10.0\n\n"),
        "{cfg}"
    );
    assert!(cfg.contains("pro6000-vm\n\tmap id=10de:2bb5,iommugroup=11,node=kpro6,path=0000:81:00.0,subsystem-id=10de:204e\n"), "{cfg}");
    assert!(!t
        .path()
        .join("etc/pve/priv/lock/file-mapping_pci_cfg")
        .exists());
    let st = h.observe().unwrap();
    assert_eq!(st.pci_mappings["pro6000-vm"][0].paths, vec!["0000:81:00.0"]);
    // No temp files left behind in pmxcfs.
    let names: Vec<String> = std::fs::read_dir(t.path().join("etc/pve/lxc"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["129.conf"]);
}

#[test]
fn parses_nvidia_version_files() {
    assert_eq!(
        module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct 30 12:00:00 UTC 2025\nGCC version:  gcc\n").as_deref(),
        Some("580.159.04")
    );
    assert_eq!(
        uvm_major("Character devices:\n195 nvidia\n511 nvidia-uvm\n"),
        Some(511)
    );
    assert_eq!(
        pci::parse_minor("Model: \t\t NVIDIA H200\nIRQ:   \t 45\nDevice Minor: \t 1\n"),
        Some(1)
    );
}

#[test]
fn probe_output_names_failing_pairs_by_address() {
    let gpus = vec!["0000:06:00.0".to_string(), "0000:07:00.0".to_string()];
    let ok = r#"{"ok": true, "pairs": [{"src": 0, "dst": 1, "src_pci": "0000:06:00.0", "dst_pci": "0000:07:00.0", "ok": true}]}"#;
    assert!(probe::failing_pairs(ok, &gpus).unwrap().is_empty());
    let bad = r#"{"ok": false, "pairs": [{"src": 0, "dst": 1, "ok": false}, {"src": 1, "dst": 0, "ok": false}]}"#;
    assert_eq!(
        probe::failing_pairs(bad, &gpus).unwrap(),
        vec!["0000:06:00.0<->0000:07:00.0"]
    );
    assert!(probe::failing_pairs(r#"{"error": "torch missing"}"#, &gpus)
        .unwrap_err()
        .contains("torch missing"));
}

/// Files captured read-only from a real 2x H200 machine (e2e/capture/capture-gpu-host.sh), so CI
/// keeps checking that real-hardware sysfs/proc parses as it did there.
#[test]
fn observes_the_captured_h200_host() {
    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/host/local/testdata/h200/root");
    let mut h = LocalHost::new(&root, "10de");
    h.tools.nvidia_smi = "/nonexistent/nvidia-smi".into();
    let st = h.observe().unwrap();
    let gpus: Vec<&PciDevice> = st.gpus("10de").collect();
    assert_eq!(gpus.len(), 2);
    for (g, (addr, minor)) in gpus.iter().zip([("0000:00:06.0", 0), ("0000:00:07.0", 1)]) {
        assert_eq!(g.address, addr);
        assert_eq!(
            (g.vendor.as_str(), g.device.as_str(), g.class.as_str()),
            ("10de", "2335", "030200")
        );
        assert_eq!(g.subsystem.as_deref(), Some("10de:18bf"));
        assert_eq!(g.driver.as_deref(), Some("nvidia"));
        assert_eq!(g.driver_override, None, "reads (null)");
        assert_eq!(g.nvidia_minor, Some(minor));
        assert_eq!(g.numa_node, -1);
        assert_eq!(g.iommu_group, None);
    }
    assert_eq!(st.nvidia.module_version.as_deref(), Some("580.159.04"));
    assert_eq!(st.nvidia.uvm_major, 238);
    assert!(st.iommu.group_types.is_empty());
    assert_eq!(
        st.iommu.mode(),
        IommuMode::Off,
        "no IOMMU groups are exposed"
    );
    assert!(
        st.iommu.notes.iter().any(|n| n.contains("no IOMMU groups")),
        "{:?}",
        st.iommu.notes
    );
    assert!(st.containers.is_empty(), "not a Proxmox host");
}

/// A `pct` stand-in that logs `exec` and `push`, keeps what `exec ... -` reads on stdin and
/// answers it with a passing P2P result.
fn recording_pct(t: &tempfile::TempDir) {
    let p = t.path().join("bin/pct");
    std::fs::write(
        &p,
        "#!/bin/sh\nd=\"$(dirname \"$0\")\"\ncase \"$1\" in\n status) echo 'status: running'; exit 0;;\n \
         exec) echo \"$@\" >> \"$d/exec.log\"; case \"$*\" in *' -') cat > \"$d/stdin.txt\"; echo '{\"pairs\": []}';; esac; exit 0;;\n \
         push) echo \"$3\" >> \"$d/push.src\"; echo \"$@\" >> \"$d/push.args\"; cp \"$3\" \"$d/pushed.copy\"; exit 0;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// Finding 6: the probe was pushed to a fixed, world-writable path in the container and the
/// unit was staged under a predictable /tmp name; now the probe goes through stdin and files
/// are staged in the agent's private directory, gone after the push.
#[test]
fn probe_through_stdin_and_private_staging() {
    let t = fake_root();
    recording_pct(&t);
    let mut h = host(&t);
    let gpus = vec!["0000:01:00.0".to_string(), "0000:02:00.0".to_string()];
    let r = h.step(&Step::ProbeP2p {
        location: Location::Container(129),
        python: "/root/ml-env/bin/python3".into(),
        user: None,
        gpus,
        cuda_indices: vec![0, 1],
    });
    assert!(r.is_ok(), "{r:?}");
    let bin = t.path().join("bin");
    assert_eq!(
        std::fs::read_to_string(bin.join("stdin.txt")).unwrap(),
        probe::PROBE_PY
    );
    let exec = std::fs::read_to_string(bin.join("exec.log")).unwrap();
    assert!(exec.contains("/root/ml-env/bin/python3 -I -s -"), "{exec}");
    assert!(!exec.contains("/tmp/"), "{exec}");
    let unit = UnitRef {
        location: Location::Container(129),
        name: "gpuplane-x.service".into(),
    };
    h.step(&Step::WriteUnit {
        unit,
        content: "# Managed by gpuplane; local edits are overwritten.\n".into(),
    })
    .unwrap();
    let src = std::fs::read_to_string(bin.join("push.src")).unwrap();
    let staging = t.path().join("var/lib/gpuplane/staging");
    assert!(src.trim().starts_with(staging.to_str().unwrap()), "{src}");
    assert!(
        !std::path::Path::new(src.trim()).exists(),
        "staged file removed"
    );
    assert!(std::fs::read_to_string(bin.join("pushed.copy"))
        .unwrap()
        .starts_with("# Managed"));
    let args = std::fs::read_to_string(bin.join("push.args")).unwrap();
    assert!(
        args.contains("--perms 0640"),
        "the pushed unit is not world-readable: {args}"
    );
}

/// Issue 23: a unit carries the admin's environment; it is not world-readable, also when an
/// older file of it was.
#[test]
fn a_unit_file_on_the_host_is_not_world_readable() {
    use std::os::unix::fs::PermissionsExt;
    let t = fake_root();
    let mut h = host(&t);
    h.tools.systemctl = "true".into();
    let dir = t.path().join("etc/systemd/system");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gpuplane-x.service");
    std::fs::write(
        &file,
        "# Managed by gpuplane; local edits are overwritten.\n",
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let unit = UnitRef {
        location: Location::Host,
        name: "gpuplane-x.service".into(),
    };
    h.step(&Step::WriteUnit {
        unit,
        content: "# Managed by gpuplane; local edits are overwritten.\n[Service]\nEnvironment=HF_TOKEN=x\n".into(),
    })
    .unwrap();
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o640
    );
}

/// Finding 3: the agent removed any unit file it was asked to; one it did not write stays.
#[test]
fn a_unit_file_the_agent_did_not_write_is_never_removed() {
    let t = fake_root();
    let mut h = host(&t);
    h.tools.systemctl = "true".into();
    let dir = t.path().join("etc/systemd/system");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("ssh.service"),
        "[Service]\nExecStart=/usr/sbin/sshd\n",
    )
    .unwrap();
    let unit = UnitRef {
        location: Location::Host,
        name: "ssh.service".into(),
    };
    let e = h.step(&Step::RemoveUnit { unit }).unwrap_err();
    assert!(e.to_string().contains("not written by gpuplane"), "{e}");
    assert!(dir.join("ssh.service").exists());
}

/// The agent's early wake-up: one GET of /health_generate at the address the last observation
/// found; 503 is "not yet", 200 "ready", a unit never reached "cannot tell".
#[test]
fn probe_ready_asks_health_generate_where_the_last_observation_found_the_server() {
    use std::io::{Read, Write};
    let t = fake_root();
    let mut h = host(&t);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let mut paths = vec![];
        for answer in ["503 Service Unavailable", "200 OK"] {
            let (mut s, _) = l.accept().unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                head.extend_from_slice(&buf[..n]);
            }
            paths.push(
                String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string(),
            );
            let _ = write!(
                s,
                "HTTP/1.1 {answer}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
        paths
    });
    let unit = UnitRef {
        location: Location::Host,
        name: "sglang-e2e.service".into(),
    };
    assert_eq!(h.probe_ready(&unit), None, "never observed: cannot tell");
    h.endpoints
        .borrow_mut()
        .insert(unit.key(), ("127.0.0.1".into(), port));
    assert_eq!(h.probe_ready(&unit), Some(false));
    assert_eq!(h.probe_ready(&unit), Some(true));
    // The next observation takes the 200 as its answer only from that same address.
    assert_eq!(
        h.probed_healthy.borrow()[&unit.key()].1,
        ("127.0.0.1".to_string(), port)
    );
    let paths = server.join().unwrap();
    assert!(
        paths.iter().all(|p| p.starts_with("GET /health_generate ")),
        "{paths:?}"
    );
}

/// `journalctl -o json` lines: the message (a string, or bytes when not UTF-8) and the time in
/// seconds, rounded up (a stall is never reported before its time); anything else is a plain line without a time.
#[test]
fn journal_lines_give_their_message_and_time() {
    use super::systemd::journal_line;
    assert_eq!(
        journal_line(
            r#"{"__REALTIME_TIMESTAMP":"1764590400123456","MESSAGE":"Load weight begin."}"#
        ),
        ("Load weight begin.".to_string(), Some(1764590401))
    );
    assert_eq!(
        journal_line(r#"{"__REALTIME_TIMESTAMP":"5000000","MESSAGE":[104,105,255]}"#),
        ("hi\u{fffd}".to_string(), Some(5))
    );
    assert_eq!(journal_line("plain text"), ("plain text".to_string(), None));
    assert_eq!(journal_line("[1, 2]"), ("[1, 2]".to_string(), None));
    assert_eq!(journal_line(r#"{"MESSAGE":7}"#), (String::new(), None));
}

/// A kill inside a locked Proxmox write leaves the lock directory and a temporary file; the next
/// write waits while the lock is young (a wait, not a failure) and heals both once pmxcfs's 120 s
/// have passed, keeping every foreign line.
#[test]
fn a_killed_writers_lock_and_temp_file_are_a_wait_then_healed() {
    let t = fake_root();
    let mut h = host(&t);
    let lock = t.path().join("etc/pve/priv/lock/file-mapping_pci_cfg");
    std::fs::create_dir_all(&lock).unwrap();
    let dead_tmp = t.path().join("etc/pve/mapping/pci.cfg.tmp.4194305");
    std::fs::write(&dead_tmp, "half a file").unwrap();
    let step = Step::SetPciMapping {
        mapping: "pro6000-vm".into(),
        entries: vm_mapping_entries(),
    };
    let e = h.apply(&step).unwrap_err();
    assert!(
        matches!(&e, crate::host::HostError::LockHeld { lock: l, .. } if l.ends_with("priv/lock/file-mapping_pci_cfg")),
        "{e}"
    );
    assert!(
        lock.is_dir() && dead_tmp.exists(),
        "nothing touched while waiting"
    );
    // pmxcfs's 120 s pass.
    crate::testutil::set_mtime_ago(&lock, 121);
    let out = h.apply(&step).unwrap();
    assert_eq!(out.leftovers.len(), 2, "{:?}", out.leftovers);
    assert!(out.leftovers.iter().any(|l| l.contains("stale lock")));
    assert!(out
        .leftovers
        .iter()
        .any(|l| l.contains("pci.cfg.tmp.4194305")));
    assert!(!lock.exists() && !dead_tmp.exists());
    let cfg = std::fs::read_to_string(t.path().join("etc/pve/mapping/pci.cfg")).unwrap();
    assert!(
        cfg.starts_with("other\n\tmap id=8086:1520,node=kpro6,path=0000:07:10.0\n"),
        "{cfg}"
    );
    assert!(cfg.contains("path=0000:81:00.0"), "{cfg}");
}

/// Issue 22: an older unit of a renamed server that holds no GPU is found by its file. The
/// host's unit files that carry the agent's header are observed (not a stranger's, not a link,
/// not one too large to be ours), though no server names them.
#[test]
fn the_hosts_managed_unit_files_are_observed_though_not_watched() {
    let t = fake_root();
    let mut h = host(&t);
    h.tools.systemctl = "true".into();
    let dir = t.path().join("etc/systemd/system");
    std::fs::create_dir_all(&dir).unwrap();
    let ours = "# Managed by gpuplane; local edits are overwritten.\n[Unit]\nDescription=SGLang x (gpuplane InferenceServer default/x)\n";
    std::fs::write(dir.join("old-x.service"), ours).unwrap();
    std::fs::write(
        dir.join("ssh.service"),
        "[Service]\nExecStart=/usr/sbin/sshd\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(dir.join("old-x.service"), dir.join("alias-x.service")).unwrap();
    let big = format!("{ours}{}", "#\n".repeat(200_000));
    std::fs::write(dir.join("big.service"), big).unwrap();
    let st = h.observe().unwrap();
    let key = |n: &str| {
        UnitRef {
            location: Location::Host,
            name: n.into(),
        }
        .key()
    };
    assert_eq!(
        st.units[&key("old-x.service")].file.as_deref(),
        Some(ours),
        "{:?}",
        st.units.keys().collect::<Vec<_>>()
    );
    for n in ["ssh.service", "alias-x.service", "big.service"] {
        assert!(!st.units.contains_key(&key(n)), "{n}");
    }
}

/// Issue 23: each command had a deadline, the observation none: containers whose `pct` calls
/// each ran close to their own deadline stretched one look (and the host lock) without end.
/// Now the look has one budget; past it, it is an error (never a partial state) and the
/// commands left are not run.
#[test]
fn an_observation_ends_within_its_budget_however_slow_the_containers() {
    let t = fake_root();
    for vmid in [130, 131, 132, 133] {
        std::fs::write(
            t.path().join(format!("etc/pve/lxc/{vmid}.conf")),
            "arch: amd64\n",
        )
        .unwrap();
    }
    let pct = t.path().join("bin/pct");
    std::fs::write(&pct, "#!/bin/sh\nsleep 1\necho 'status: stopped'\n").unwrap();
    let mut h = host(&t);
    h.command_timeout = Duration::from_secs(30);
    h.observe_budget = Duration::from_millis(1500);
    let t0 = std::time::Instant::now();
    let e = h.observe().unwrap_err().to_string();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(e.contains("ran past its budget of 1 s"), "{e}");
    // With a budget that fits, the same host is observed.
    h.observe_budget = Duration::from_secs(60);
    assert!(h.observe().is_ok());
}

/// Issue 24 (the observation): every GPU's identity beyond its address, whatever its driver —
/// the Device Serial Number from its config space, the physical slot, the topology path from
/// its sysfs link — and UUID and serial from `nvidia-smi` while it is on `nvidia`.
#[test]
fn each_gpu_is_observed_with_what_tells_it_from_its_twins() {
    use std::os::unix::fs::PermissionsExt;
    let t = fake_root();
    let dev = t.path().join("sys/bus/pci/devices/0000:01:00.0");
    let mut config = vec![0u8; 4096];
    config[0x100..0x104].copy_from_slice(&(0x0003u32 | (1 << 16)).to_le_bytes());
    config[0x104..0x108].copy_from_slice(&0x9c2d_b048u32.to_le_bytes());
    config[0x108..0x10c].copy_from_slice(&0x7800_cf5cu32.to_le_bytes());
    std::fs::write(dev.join("config"), &config).unwrap();
    let slot = t.path().join("sys/bus/pci/slots/3");
    std::fs::create_dir_all(&slot).unwrap();
    std::fs::write(slot.join("address"), "0000:01:00\n").unwrap();
    let smi = t.path().join("bin/nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\necho '00000000:01:00.0, GPU-624a3d49-0000-1111-2222-333344445555, 1654924066922'\n",
    )
    .unwrap();
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut h = host(&t);
    h.tools.nvidia_smi = smi.display().to_string();
    let st = h.observe().unwrap();
    let id = &st.pci_devices["0000:01:00.0"].identity;
    assert_eq!(id.dsn.as_deref(), Some("7800cf5c9c2db048"));
    assert_eq!(id.slot.as_deref(), Some("3"));
    assert_eq!(
        id.uuid.as_deref(),
        Some("GPU-624a3d49-0000-1111-2222-333344445555")
    );
    assert_eq!(id.serial.as_deref(), Some("1654924066922"));
    assert!(
        st.pci_devices
            .values()
            .filter(|d| d.address != "0000:01:00.0")
            .all(|d| d.identity.dsn.is_none()),
        "no config space, no serial number"
    );
}

/// A host root built from a folder that `testdata/h200/capture.sh` made, by
/// `testdata/h200/mkroot.sh` (the same command its README gives): the captured files, their
/// symlinks, and a `bin/nvidia-smi` that answers LocalHost's identity query as the machine did.
fn captured_root(capture: &str) -> (tempfile::TempDir, LocalHost) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/host/local/testdata");
    let capture = if capture.contains('/') {
        data.join(capture)
    } else {
        data.join("h200").join(capture)
    };
    let t = tempfile::tempdir().unwrap();
    let o = std::process::Command::new("sh")
        .arg(data.join("h200/mkroot.sh"))
        .arg(capture)
        .arg(t.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut h = LocalHost::new(t.path(), "10de");
    h.tools.nvidia_smi = t.path().join("bin/nvidia-smi").display().to_string();
    (t, h)
}

/// Issue 24 on real hardware: the one H200 of the device machine, captured read-only on
/// 2026-12-03 (`testdata/h200/README.md`), observed by the real backend as it was there. Its
/// config space is the GPU's own 4096 bytes, where the hypervisor hid the first extended
/// capabilities (ID 0, the list going on), so the serial number is found 8 headers down.
#[test]
fn the_captured_h200_is_told_from_its_twins_as_on_the_machine() {
    let (t, mut h) = captured_root("2026-12-03");
    let st = h.observe().unwrap();
    let gpus: Vec<&PciDevice> = st.gpus("10de").collect();
    assert_eq!(gpus.len(), 1, "{:?}", st.pci_devices.keys());
    let g = gpus[0];
    assert_eq!(g.address, "0000:00:06.0");
    assert_eq!(
        (g.vendor.as_str(), g.device.as_str(), g.class.as_str()),
        ("10de", "2335", "030200")
    );
    assert_eq!(g.subsystem.as_deref(), Some("10de:18bf"));
    assert_eq!(g.driver.as_deref(), Some("nvidia"));
    assert_eq!(g.driver_override, None);
    assert_eq!(g.nvidia_minor, Some(0));
    assert_eq!(g.numa_node, -1);
    assert_eq!(g.iommu_group, None, "the machine exposes no IOMMU groups");

    let config = std::fs::read(t.path().join("sys/bus/pci/devices/0000:00:06.0/config")).unwrap();
    assert_eq!(config.len(), 4096, "read as root");
    assert_eq!(config[..4], [0xde, 0x10, 0x35, 0x23]);
    assert_eq!(config[0x100..0x102], [0, 0], "a hidden capability first");
    let id = &g.identity;
    // lspci was not installed there: the serial number as an independent walk of the same
    // bytes printed it (testdata/h200/README.md), 86-b0-8c-dc-f5-2d-b0-48 at 0x2f0.
    assert_eq!(id.dsn.as_deref(), Some("86b08cdcf52db048"));
    assert_eq!(id.slot, None, "/sys/bus/pci/slots was empty");
    // The link was ../../../devices/pci0000:00/0000:00:06.0: on the root bus, no bridge.
    assert_eq!(id.path.as_deref(), Some("pci0000:00/06.0"));
    assert_eq!(
        id.uuid.as_deref(),
        Some("GPU-1bdd772b-3995-67fb-90f1-f2bac40700af")
    );
    assert_eq!(id.serial.as_deref(), Some("1653924120637"));
    let info = std::fs::read_to_string(
        t.path()
            .join("proc/driver/nvidia/gpus/0000:00:06.0/information"),
    )
    .unwrap();
    assert!(
        info.contains("GPU-1bdd772b-3995-67fb-90f1-f2bac40700af"),
        "the driver names the same UUID"
    );

    assert_eq!(st.nvidia.module_version.as_deref(), Some("580.159.04"));
    assert_eq!(st.iommu.mode(), IommuMode::Off);
    assert_eq!(st.iommu.default_domain_type.as_deref(), Some("Translated"));
    // What `gpuplane observe` prints for it (README.md of the fixture has the whole output).
    let yaml = serde_yaml::to_string(&st.pci_devices).unwrap();
    assert!(
        yaml.contains(
            "  identity:\n    dsn: 86b08cdcf52db048\n    path: pci0000:00/06.0\n    uuid: GPU-1bdd772b-3995-67fb-90f1-f2bac40700af\n    serial: '1653924120637'\n"
        ),
        "{yaml}"
    );
}

/// Issue 37: the held-stdout fix bounded each command, not the pass: a preflight that reads
/// several files through `pct exec` in a container whose commands each leave a child holding
/// their output took 181 s (every command ran to its own deadline, the observation's budget
/// spent). Each server's preflight now has one budget of its own: past it nothing more runs for
/// that server, the observation goes on and ends in time, and the facts say why.
#[test]
fn a_preflight_has_one_budget_for_all_its_commands() {
    let t = fake_root();
    // The preflight's reads in the container (find, stat, dd, test) each leave a child holding
    // their output; the observation's own commands answer at once.
    let pct = t.path().join("bin/pct");
    std::fs::write(
        &pct,
        "#!/bin/sh\n[ \"$1\" = status ] && echo 'status: running' && exit 0\ncase \" $* \" in *' find '*|*' stat -L '*|*' dd '*|*' test '*) (sleep 30) & exit 0 ;; esac\nexit 0\n",
    )
    .unwrap();
    let mut h = host(&t);
    h.command_timeout = Duration::from_secs(30);
    h.observe_budget = Duration::from_secs(60);
    h.preflight_budget = Duration::from_millis(1500);
    let unit = UnitRef {
        location: Location::Container(129),
        name: "sglang-qwen.service".into(),
    };
    h.watch_preflight(&[PreflightRequest {
        server: "default/s".into(),
        location: Location::Container(129),
        python: "/root/ml-env/bin/python3".into(),
        user: None,
        model_dir: Some("/shared/models/m".into()),
        draft_dir: None,
        env_paths: vec![("CUDA_HOME".into(), "/usr/local/cuda-13.0".into())],
        gpus: vec![],
        roots: vec!["/shared/models".into()],
        unit,
        served_name: "s".into(),
        smoke: None,
    }]);
    let t0 = std::time::Instant::now();
    let st = h
        .observe()
        .expect("the observation goes on past a slow preflight");
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    let f = &st.preflight["default/s"];
    let said = format!("{f:?}");
    assert!(said.contains("ran past its budget of 1 s"), "{said}");
}

/// Issue 40 on real hardware: the H100 of the device machine, captured read-only on 2026-12-05
/// (`testdata/h100/README.md`), observed by the real backend: its link at 32 GT/s x16 of the
/// same, no AER files (the VM exposes no AER capability), no port (it sits on the root bus),
/// config space answering, no GPU event in the kernel log: Healthy with nothing to say. Then
/// the health mark follows what a fault changes: the driver's Xid line in the kernel log, and
/// config space reading all ones (judged Lost).
#[test]
fn the_captured_h100_is_healthy_and_its_health_mark_follows_a_fault() {
    let (t, mut h) = captured_root("h100/2026-12-05");
    let st = h.observe().unwrap();
    let gpu = &st.pci_devices["0000:00:06.0"];
    let link = gpu.health.device.link.expect("the H100's link files");
    assert_eq!(
        (link.speed, link.max_speed, link.width, link.max_width),
        (32000, 32000, 16, 16)
    );
    assert_eq!(gpu.health.device.aer, None);
    assert_eq!(gpu.health.port, None, "on the root bus");
    assert!(!gpu.health.not_responding);
    // The driver's answer to the ECC query, as it gave it there: no error, no remap.
    let ecc = gpu.health.ecc.expect("nvidia-smi's ECC counters");
    assert_eq!(
        (ecc.uncorrected, ecc.remapped_uncorrectable),
        (Some(0), Some(0))
    );
    assert!(!ecc.remap_pending && !ecc.remap_failure);
    assert_eq!(st.gpu_events, vec![]);
    assert_eq!(
        crate::health::judge(gpu, &st.gpu_events),
        Default::default()
    );

    let m0 = h.health_mark().unwrap();
    assert_eq!(h.health_mark(), Some(m0), "nothing changed");
    let kmsg = t.path().join("dev/kmsg");
    let mut log = std::fs::read_to_string(&kmsg).unwrap_or_default();
    log.push_str("NVRM: Xid (PCI:0000:00:06): 119, pid=1, name=python3, Timeout after 6s of waiting for RPC response from GPU0 GSP!\n");
    std::fs::write(&kmsg, log).unwrap();
    let m1 = h.health_mark().unwrap();
    assert_ne!(m1, m0, "an Xid logged");
    let config = t.path().join("sys/devices/pci0000:00/0000:00:06.0/config");
    let mut bytes = std::fs::read(&config).unwrap();
    bytes[..4].copy_from_slice(&[0xff; 4]);
    std::fs::write(&config, bytes).unwrap();
    assert_ne!(h.health_mark().unwrap(), m1, "config space all ones");
    let st = h.observe().unwrap();
    let j = crate::health::judge(&st.pci_devices["0000:00:06.0"], &st.gpu_events);
    assert_eq!(j.state, gpuplane_crds::GpuHealthState::Lost, "{j:?}");
    assert!(
        j.evidence
            .iter()
            .any(|e| e.starts_with("Xid 119 GSP_RPC_TIMEOUT")),
        "{j:?}"
    );
}
