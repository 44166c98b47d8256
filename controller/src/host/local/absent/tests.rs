use super::super::LocalHost;
use crate::host::model::IommuMode;
use crate::host::Host;
use std::path::Path;

/// A fake root with `gpus` NVIDIA GPUs on nvidia, and /etc/pve and systemd when asked.
fn root(gpus: usize, pve: bool, systemd: bool) -> tempfile::TempDir {
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
    }
    w("/proc/cmdline", "root=/dev/sda1\n");
    if pve {
        std::fs::create_dir_all(t.path().join("etc/pve")).unwrap();
    }
    if systemd {
        std::fs::create_dir_all(t.path().join("run/systemd/system")).unwrap();
    }
    t
}

fn observe(root: &Path) -> crate::host::model::HostState {
    let mut h = LocalHost::new(root, "10de");
    h.node_name = Some("edge".into());
    h.tools.nvidia_smi = "/nonexistent/nvidia-smi".into();
    h.observe().expect("an empty host observes without error")
}

#[test]
fn a_bare_machine_is_observed_and_every_absence_is_said_plainly() {
    let t = root(0, false, false);
    let st = observe(t.path());
    assert!(st.pci_devices.is_empty() && st.containers.is_empty() && st.vms.is_empty());
    let said = |w: &str| st.notes.iter().any(|n| n.starts_with(w));
    assert!(said("no GPU:"), "{:?}", st.notes);
    assert!(said("no Proxmox VE: /etc/pve is absent"), "{:?}", st.notes);
    assert!(said("no systemd:"), "{:?}", st.notes);
    assert_eq!(st.iommu.mode(), IommuMode::Off);
    assert!(st.iommu.notes.iter().any(|n| n.contains("no IOMMU groups")));
}

#[test]
fn one_gpu_says_there_is_no_pair_and_nothing_else() {
    let t = root(1, true, true);
    let st = observe(t.path());
    assert_eq!(st.gpus("10de").count(), 1);
    assert_eq!(st.notes.len(), 1, "{:?}", st.notes);
    assert!(st.notes[0].starts_with("one GPU:"));
}

#[test]
fn a_full_host_has_no_notes() {
    let t = root(2, true, true);
    let st = observe(t.path());
    assert_eq!(st.gpus("10de").count(), 2);
    assert!(st.notes.is_empty(), "{:?}", st.notes);
    // The notes are left out of the observation's YAML when there are none.
    let v = serde_json::to_value(&st).unwrap();
    assert!(v.get("notes").is_none(), "{v}");
}
