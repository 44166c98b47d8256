use super::*;
use crate::bootloader::check_arg;

fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| s.to_string()).collect()
}

/// Issue 37: what the old deny-list of six keys let through is refused by default, each with
/// what to do.
#[test]
fn dangerous_and_unlisted_arguments_are_refused_by_default() {
    for (bad, want) in [
        (
            "systemd.run=/bin/sh",
            "not even with spec.host.kernelArgs.allowKeys",
        ),
        (
            "systemd.setenv=LD_PRELOAD=/tmp/x.so",
            "not even with spec.host.kernelArgs.allowKeys",
        ),
        ("systemd.debug_shell", "systemd's options"),
        ("systemd.debug-shell=1", "systemd's options"),
        ("systemd.mask=sshd.service", "systemd's options"),
        ("rd.break", "root shell"),
        ("rd.shell=1", "initramfs"),
        ("single", "rescue or emergency shell"),
        ("S", "rescue or emergency shell"),
        ("emergency", "rescue or emergency shell"),
        ("init=/bin/sh", "chooses what the host boots into"),
        ("root=/dev/sdb1", "chooses what the host boots into"),
        ("LD_PRELOAD=/tmp/x.so", "init's environment"),
        (
            "module_blacklist=vfio_pci",
            "list module_blacklist in spec.host.kernelArgs.allowKeys",
        ),
        ("mem_encrypt=off", "e.g. mem_encrypt=on"),
        ("iommu=off", "takes pt, nopt or force"),
        (
            "amd_iommu=off",
            "amd_iommu in spec.host.kernelArgs.allowKeys",
        ),
        ("kvm_amd.sev_snp=0", "e.g. kvm_amd.sev_snp=1"),
        (
            "pcie_acs_override=downstream",
            "not among the keys the agent manages",
        ),
        (
            "console=ttyS0",
            "set it on the host by hand, or list console",
        ),
        ("quiet", "not among the keys the agent manages"),
        ("modprobe.blacklist=nvidia", "nouveau or nvidiafb"),
        ("vfio-pci.ids=8086:1533", "of vendor 10de"),
        ("iommu", "not no value"),
    ] {
        let e = check_arg(bad, Side::Present, &[]).unwrap_err();
        assert!(e.contains(want), "{bad:?}: {e}");
        assert!(e.contains(&format!("{bad:?}")), "names the argument: {e}");
    }
}

#[test]
fn the_managed_keys_take_the_values_that_serve_passthrough() {
    for ok in [
        "iommu=pt",
        "iommu=nopt",
        "amd_iommu=on",
        "amd_iommu=force_isolation,pgtbl_v1",
        "intel_iommu=on,igfx_off",
        "iommu.passthrough=0",
        "iommu.strict=1",
        "vfio-pci.ids=10de:2335,10de:22a3",
        "vfio_pci.ids=10DE:2bb5",
        "vfio-pci.disable_idle_d3=1",
        "vfio-pci.disable_vga=1",
        "rd.driver.pre=vfio-pci",
        "pci=realloc",
        "kvm_amd.sev_snp=1",
        "kvm-amd.sev=Y",
        "mem_encrypt=on",
        "nouveau.modeset=0",
        "modprobe.blacklist=nouveau,nvidiafb",
        "rd.driver.blacklist=nouveau",
        "video=efifb:off",
        "initcall_blacklist=sysfb_init",
    ] {
        assert!(check_arg(ok, Side::Present, &[]).is_ok(), "{ok}");
    }
    // Every managed key is one no opt-in refuses, and its example value is one it writes.
    for m in MANAGED {
        assert!(never(m.key).is_none(), "{}", m.key);
        let a = format!("{}={}", m.key, m.values.example());
        assert!(check_arg(&a, Side::Present, &[]).is_ok(), "{a}");
    }
}

/// `absent` words are removed, never added: a managed key is enough (removing `iommu=off` is
/// what passthrough wants); an unlisted or never key is still refused.
#[test]
fn absent_words_need_a_managed_key_only() {
    for ok in ["iommu=off", "amd_iommu=off", "mem_encrypt=off", "iommu=pt"] {
        assert!(check_arg(ok, Side::Absent, &[]).is_ok(), "{ok}");
    }
    assert!(check_arg("quiet", Side::Absent, &[]).is_err());
    assert!(check_arg("init=/bin/sh", Side::Absent, &[]).is_err());
    assert!(check_arg("quiet", Side::Absent, &keys(&["quiet"])).is_ok());
}

/// `allowKeys`: the admin takes responsibility for a harmless unlisted key (or any value of a
/// managed one), but no opt-in opens a key that boots elsewhere, opens a shell or runs a program.
#[test]
fn an_admin_opt_in_allows_a_harmless_key_but_never_a_dangerous_one() {
    let allow = keys(&["console", "iommu", "module_blacklist"]);
    for ok in [
        "console=ttyS0,115200n8",
        "iommu=off",
        "module_blacklist=nouveau",
    ] {
        assert!(check_arg(ok, Side::Present, &allow).is_ok(), "{ok}");
    }
    // The spellings of a key are one key.
    assert!(check_arg(
        "vfio-pci.ids=8086:1533",
        Side::Present,
        &keys(&["vfio_pci.ids"])
    )
    .is_ok());
    for key in [
        "init",
        "rdinit",
        "root",
        "systemd.run",
        "systemd.setenv",
        "systemd.debug_shell",
        "systemd.debug-shell",
        "systemd.mask",
        "systemd.unit",
        "rd.break",
        "rd.systemd.unit",
        "single",
        "s",
        "1",
        "emergency",
        "LD_PRELOAD",
        "PATH",
        "lockdown",
        "module.sig_enforce",
    ] {
        let e = check_allow_key(key).unwrap_err();
        assert!(e.contains("not even with allowKeys"), "{key}: {e}");
        // Listed anyway (through an API that skips validation), the word is still refused.
        let word = format!("{key}=x");
        let e = check_arg(&word, Side::Present, &keys(&[key])).unwrap_err();
        assert!(e.contains("never"), "{word}: {e}");
    }
    for key in [
        "console",
        "pcie_acs_override",
        "vfio_iommu_type1.allow_unsafe_interrupts",
        "nvidia.NVreg_EnableGpuFirmware",
    ] {
        assert!(check_allow_key(key).is_ok(), "{key}");
    }
    for bad in ["", "a=b", "-x", "a b", &"k".repeat(65)] {
        assert!(check_allow_key(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn words_that_switch_off_what_a_slice_needs_are_known() {
    for (w, side, needed) in [
        ("iommu=off", Side::Present, Needed::Iommu),
        ("amd_iommu=off", Side::Present, Needed::Iommu),
        ("intel_iommu=on,off", Side::Present, Needed::Iommu),
        ("iommu=pt", Side::Present, Needed::Confidential),
        ("iommu.passthrough=1", Side::Present, Needed::Confidential),
        ("amd_iommu=pgtbl_v2", Side::Present, Needed::Confidential),
        ("kvm_amd.sev_snp=0", Side::Present, Needed::Confidential),
        ("kvm-amd.sev=N", Side::Present, Needed::Confidential),
        ("mem_encrypt=off", Side::Present, Needed::Confidential),
        (
            "vfio-pci.disable_idle_d3=0",
            Side::Present,
            Needed::Confidential,
        ),
        (
            "vfio-pci.disable_idle_d3=1",
            Side::Absent,
            Needed::Confidential,
        ),
    ] {
        assert_eq!(switches_off(w, side).map(|(n, _)| n), Some(needed), "{w}");
    }
    for (w, side) in [
        ("iommu=pt", Side::Absent),
        ("iommu=off", Side::Absent),
        ("kvm_amd.sev_snp=1", Side::Present),
        ("vfio-pci.disable_idle_d3=1", Side::Present),
        ("amd_iommu=on", Side::Present),
    ] {
        assert_eq!(switches_off(w, side), None, "{w}");
    }
}

/// Echoed arguments are one line and capped, whatever their length.
#[test]
fn refusals_echo_capped_text() {
    let long = format!("console={}", "x".repeat(5000));
    let e = check_arg(&long, Side::Present, &[]).unwrap_err();
    assert!(e.len() < 400, "{} bytes: {e}", e.len());
    assert!(
        e.contains("5008 characters") && e.contains("longer than 256"),
        "{e}"
    );
    let long = format!("console={}", "x".repeat(200));
    let e = check_arg(&long, Side::Present, &[]).unwrap_err();
    assert!(e.len() < 500 && !e.contains(&"x".repeat(100)), "{e}");
    let e = check_allow_key(&"k\n".repeat(3000)).unwrap_err();
    assert!(e.len() < 300 && !e.contains('\n'), "{e}");
}
