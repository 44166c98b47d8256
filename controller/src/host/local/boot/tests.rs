use super::*;
use crate::host::Host;
use crate::step::Step;

/// A host root with `/proc/cmdline`, a boot id, `files` written, and stand-in refresh commands
/// that only record that they ran (the real bootloader is not run in tests).
fn root(files: &[(&str, &str)]) -> (tempfile::TempDir, LocalHost) {
    let t = tempfile::tempdir().unwrap();
    let w = |p: &str, c: &str| {
        let p = t.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, c).unwrap();
    };
    w(
        "/proc/cmdline",
        "BOOT_IMAGE=/vmlinuz root=/dev/vda rw quiet iommu=pt\n",
    );
    w(
        "/proc/sys/kernel/random/boot_id",
        "4b1c6d8e-0000-4000-8000-000000000001\n",
    );
    for (p, c) in files {
        w(p, c);
    }
    let log = t.path().join("refresh.log");
    for tool in ["proxmox-boot-tool", "update-grub"] {
        let p = t.path().join(format!("bin/{tool}"));
        w(
            &format!("/bin/{tool}"),
            &format!("#!/bin/sh\necho \"{tool} $*\" >> {}\n", log.display()),
        );
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let mut h = LocalHost::new(t.path(), "10de");
    h.tools.proxmox_boot_tool = t.path().join("bin/proxmox-boot-tool").display().to_string();
    h.tools.update_grub = t.path().join("bin/update-grub").display().to_string();
    (t, h)
}

fn present() -> Vec<String> {
    vec!["vfio-pci.disable_idle_d3=1".into()]
}
fn absent() -> Vec<String> {
    vec!["iommu=pt".into()]
}

#[test]
fn observes_cmdline_bootloader_and_record() {
    let (t, h) = root(&[
        ("/etc/kernel/cmdline", "root=/dev/vda rw quiet iommu=pt\n"),
        ("/etc/default/grub", "GRUB_CMDLINE_LINUX_DEFAULT=\"x\"\n"),
    ]);
    let b = observe(&h.root, &h.state_dir);
    assert_eq!(
        b.running.as_deref().unwrap(),
        [
            "BOOT_IMAGE=/vmlinuz",
            "root=/dev/vda",
            "rw",
            "quiet",
            "iommu=pt"
        ]
    );
    assert_eq!(
        b.boot_id.as_deref(),
        Some("4b1c6d8e-0000-4000-8000-000000000001")
    );
    let c = b.config.unwrap();
    assert_eq!(
        c.bootloader,
        Bootloader::ProxmoxBootTool,
        "/etc/kernel/cmdline wins, as Proxmox documents"
    );
    assert_eq!(c.args, ["root=/dev/vda", "rw", "quiet", "iommu=pt"]);
    assert_eq!(b.record, None);
    std::fs::remove_file(t.path().join("etc/kernel/cmdline")).unwrap();
    let c = observe(&h.root, &h.state_dir).config.unwrap();
    assert_eq!(
        (c.bootloader, c.args),
        (Bootloader::Grub, vec!["x".to_string()])
    );
}

#[test]
fn write_then_refresh_keeps_bytes_and_records_each_stage() {
    let (t, mut h) = root(&[("/etc/kernel/cmdline", "root=/dev/vda rw quiet iommu=pt\n")]);
    std::fs::set_permissions(
        t.path().join("etc/kernel/cmdline"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    h.apply(&Step::SetKernelArgs {
        bootloader: Bootloader::ProxmoxBootTool,
        present: present(),
        absent: absent(),
    })
    .unwrap();
    let text = std::fs::read_to_string(t.path().join("etc/kernel/cmdline")).unwrap();
    assert_eq!(text, "root=/dev/vda rw quiet vfio-pci.disable_idle_d3=1\n");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(t.path().join("etc/kernel/cmdline"))
            .unwrap()
            .permissions(),
    ) & 0o777;
    assert_eq!(mode, 0o600, "the file keeps its mode");
    let r = observe(&h.root, &h.state_dir).record.unwrap();
    assert_eq!(r.written, crate::digest::sha256(&text));
    assert_eq!(r.refreshed, None, "written, not yet refreshed");
    assert!(!t.path().join("refresh.log").exists());
    h.apply(&Step::RefreshBootloader {
        bootloader: Bootloader::ProxmoxBootTool,
    })
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(t.path().join("refresh.log")).unwrap(),
        "proxmox-boot-tool refresh\n"
    );
    let r = observe(&h.root, &h.state_dir).record.unwrap();
    assert_eq!(r.refreshed.as_deref(), Some(r.written.as_str()));
    assert_eq!(
        r.boot_id.as_deref(),
        Some("4b1c6d8e-0000-4000-8000-000000000001")
    );
}

#[test]
fn grub_refresh_runs_update_grub_and_a_failed_refresh_is_an_error() {
    let grub = "GRUB_DEFAULT=0\r\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet iommu=pt\"\r\n";
    let (t, mut h) = root(&[("/etc/default/grub", grub)]);
    h.apply(&Step::SetKernelArgs {
        bootloader: Bootloader::Grub,
        present: present(),
        absent: absent(),
    })
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(t.path().join("etc/default/grub")).unwrap(),
        "GRUB_DEFAULT=0\r\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet vfio-pci.disable_idle_d3=1\"\r\n"
    );
    h.apply(&Step::RefreshBootloader {
        bootloader: Bootloader::Grub,
    })
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(t.path().join("refresh.log")).unwrap(),
        "update-grub \n"
    );
    h.tools.update_grub = "/bin/false".into();
    let e = h
        .apply(&Step::RefreshBootloader {
            bootloader: Bootloader::Grub,
        })
        .unwrap_err();
    assert!(
        e.to_string().contains("update-grub") || e.to_string().contains("/bin/false"),
        "{e}"
    );
}

#[test]
fn an_unparsable_config_is_observed_with_its_problem_and_never_written() {
    let bad = "GRUB_CMDLINE_LINUX_DEFAULT=\"$(curl x)\"\n";
    let (t, mut h) = root(&[("/etc/default/grub", bad)]);
    let c = observe(&h.root, &h.state_dir).config.unwrap();
    assert!(
        c.problem.as_deref().unwrap().contains("expansion"),
        "{:?}",
        c.problem
    );
    assert!(h
        .apply(&Step::SetKernelArgs {
            bootloader: Bootloader::Grub,
            present: present(),
            absent: vec![]
        })
        .is_err());
    assert_eq!(
        std::fs::read_to_string(t.path().join("etc/default/grub")).unwrap(),
        bad
    );
    std::fs::write(t.path().join("etc/default/grub"), "#".repeat(70_000)).unwrap();
    let c = observe(&h.root, &h.state_dir).config.unwrap();
    assert!(c.problem.unwrap().contains("larger than"));
}

/// The H200 machine (testdata/h200, captured read-only): its real /proc/cmdline read by the
/// real backend; init's arguments after "--" are not the kernel's; it has neither bootloader
/// config (a Firecracker guest booted directly by its VMM), so the agent could write none.
#[test]
fn the_captured_h200_command_line() {
    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/host/local/testdata/h200/root");
    let mut h = LocalHost::new(&root, "10de");
    h.tools.nvidia_smi = "/nonexistent/nvidia-smi".into();
    h.state_dir = std::path::PathBuf::from("/nonexistent/gpuplane-state");
    let st = h.observe().unwrap();
    let running = st.boot.running.clone().unwrap();
    assert_eq!(
        running.first().map(String::as_str),
        Some("mitigations=auto,no_guest_host,no_guest_guest")
    );
    assert_eq!(
        running.last().map(String::as_str),
        Some("fc_dmapin=0xeebe0000,0x4000,0xeebf0000")
    );
    assert!(running.contains(&"pci=realloc=off".to_string()));
    assert!(!running.iter().any(|w| w.starts_with("--")), "{running:?}");
    assert_eq!(st.boot.config, None);
    assert_eq!(
        st.iommu.cmdline,
        Vec::<String>::new(),
        "no IOMMU options on that kernel"
    );
}

#[test]
fn reboot_runs_systemctl_reboot_only_from_its_own_boot_and_records_it() {
    let (t, mut h) = root(&[("/etc/kernel/cmdline", "root=/dev/vda rw quiet\n")]);
    let log = t.path().join("reboot.log");
    let systemctl = t.path().join("bin/systemctl");
    std::fs::write(
        &systemctl,
        format!("#!/bin/sh\necho \"systemctl $*\" >> {}\n", log.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        &systemctl,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    h.tools.systemctl = systemctl.display().to_string();
    // A plan of another boot is refused: nothing runs.
    let e = h
        .apply(&Step::Reboot {
            boot_id: "an-older-boot".into(),
        })
        .unwrap_err();
    assert!(e.to_string().contains("not rebooting"), "{e}");
    assert!(!log.exists());
    let this = "4b1c6d8e-0000-4000-8000-000000000001";
    h.apply(&Step::Reboot {
        boot_id: this.into(),
    })
    .unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "systemctl reboot\n");
    let rec = observe(&h.root, &h.state_dir).record.unwrap();
    assert_eq!(rec.reboot_from.as_deref(), Some(this));
    // A refused reboot is an error and records nothing.
    std::fs::remove_file(h.state_dir.join(RECORD)).unwrap();
    h.tools.systemctl = "/bin/false".into();
    assert!(h
        .apply(&Step::Reboot {
            boot_id: this.into()
        })
        .is_err());
    assert!(observe(&h.root, &h.state_dir).record.is_none());
}
