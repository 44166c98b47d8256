//! The .deb on the real kernel in the qemu GPU host, across a real reboot: `dpkg -i` enables
//! gpuplane.service without starting it; the operator adds manifests and the VM reboots; at that
//! boot the agent converges the stand-in GPUs from `/etc/gpuplane/manifests` and reports ready
//! (sd_notify) before a stand-in `pve-guests.service` (Proxmox's guest autostart) starts, which
//! then finds its GPUs on vfio-pci. The boot's journal shows the order.
//!
//!     cargo test -p gpuplane-e2e --test vm_deb -- --nocapture   (a restore, then a real reboot: ~1-2 min)

use gpuplane_e2e::packaging::build_deb;
use gpuplane_e2e::paths::repo_root;
use gpuplane_e2e::vm::{preflight, run};

#[test]
fn the_deb_binds_the_gpus_before_guests_autostart() {
    preflight();
    let dir = std::env::temp_dir().join(format!("gpuplane-vm-deb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let deb = build_deb(&dir);
    let r = run(
        &repo_root().join("e2e/vm/scenarios/deb-boot.sh"),
        &[deb],
        &[("VM_REBOOT", "1"), ("VM_TIMEOUT", "900")],
    );
    std::fs::remove_dir_all(&dir).ok();
    let out = r.stdout;
    eprintln!(
        "--- deb-boot.sh: {:.0}s (a restore and a reboot)\n{out}",
        r.secs
    );
    assert_eq!(r.code, Some(0), "{out}\n{}", r.stderr);

    assert!(out.contains("DPKG rc=0"), "{out}");
    assert!(
        out.contains("ENABLED enabled"),
        "postinst enables the service: {out}"
    );
    assert!(
        out.contains("ACTIVE-AFTER-INSTALL inactive"),
        "postinst must not start it on a running system: {out}"
    );
    let second = out
        .split("== second boot")
        .nth(1)
        .unwrap_or_else(|| panic!("the VM did not come back from the reboot: {out}"));
    assert!(
        second.contains("ACTIVE active active"),
        "both units started at boot: {second}"
    );
    // A real reboot: the kernel's boot id changed.
    let boots: Vec<&str> = out.lines().filter(|l| l.starts_with("BOOT-ID ")).collect();
    assert!(boots.len() == 2 && boots[0] != boots[1], "{boots:?}");
    for d in ["0000:81:00.0", "0000:82:00.0"] {
        assert!(
            out.contains(&format!("DRV-BEFORE-REBOOT {d} bochs-drm")),
            "{d} was already moved before the reboot: {out}"
        );
        assert!(second.contains(&format!("DRV {d} vfio-pci")), "{d}: {out}");
        assert!(
            second.contains(&format!("GUESTS-SAW {d} vfio-pci")),
            "the guests' autostart ran before {d} was on vfio-pci: {out}"
        );
    }
    // This boot's journal: gpuplane was started (ready) before pve-guests began.
    let journal: Vec<&str> = second
        .lines()
        .filter(|l| l.starts_with("JOURNAL "))
        .collect();
    let at = |needle: &str| journal.iter().position(|l| l.contains(needle));
    let (ready, starting, guests) = (
        at("Started gpuplane"),
        at("Starting pve-guests"),
        at("GUESTS-SAW"),
    );
    println!("journal order:\n{}", journal.join("\n"));
    assert!(
        ready.is_some() && starting.is_some() && ready < starting && starting < guests,
        "order: {journal:?}"
    );
    assert!(second.contains("STATUS GpuPartition-gpuhost.yaml"), "{out}");
}
