//! The .deb on the real kernel in the qemu GPU host: `dpkg -i` enables gpuplane.service without
//! starting it; started together with a stand-in `pve-guests.service` (one systemd transaction,
//! as a boot starts them), the agent converges the stand-in GPUs from `/etc/gpuplane/manifests`
//! and reports ready before the guests' autostart runs, which then finds its GPUs on vfio-pci.
//! The journal shows the order.
//!
//!     cargo test -p gpuplane-e2e --test vm_deb -- --nocapture   (one boot, ~1-2 min)

use gpuplane_e2e::packaging::build_deb;
use gpuplane_e2e::vm::{boot_scenario, preflight};

#[test]
fn the_deb_binds_the_gpus_before_guests_autostart() {
    preflight();
    let dir = std::env::temp_dir().join(format!("gpuplane-vm-deb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let deb = build_deb(&dir);
    let out = boot_scenario("deb-boot.sh", &[deb], "");
    std::fs::remove_dir_all(&dir).ok();

    assert!(out.contains("DPKG rc=0"), "{out}");
    assert!(
        out.contains("ENABLED enabled"),
        "postinst enables the service: {out}"
    );
    assert!(
        out.contains("ACTIVE-AFTER-INSTALL inactive"),
        "postinst must not start it on a running system: {out}"
    );
    assert!(out.contains("START rc=0"), "{out}");
    for d in ["0000:81:00.0", "0000:82:00.0"] {
        assert!(out.contains(&format!("DRV {d} vfio-pci")), "{d}: {out}");
        assert!(
            out.contains(&format!("GUESTS-SAW {d} vfio-pci")),
            "the guests' autostart ran before {d} was on vfio-pci: {out}"
        );
    }
    // The journal: gpuplane was started (ready) before pve-guests began.
    let journal: Vec<&str> = out.lines().filter(|l| l.starts_with("JOURNAL ")).collect();
    let at = |needle: &str| journal.iter().position(|l| l.contains(needle));
    let (ready, guests) = (at("Started gpuplane"), at("GUESTS-SAW"));
    println!("journal order:\n{}", journal.join("\n"));
    assert!(
        ready.is_some() && guests.is_some() && ready < guests,
        "order: {journal:?}"
    );
    assert!(out.contains("STATUS GpuPartition-gpuhost.yaml"), "{out}");
}
