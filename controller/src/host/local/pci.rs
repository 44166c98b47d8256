//! PCI devices from sysfs: the GPUs the filter selects and every device sharing their IOMMU groups.

use super::Root;
use crate::host::model::PciDevice;
use std::collections::{BTreeMap, BTreeSet};

/// Which devices are GPUs: PCI class prefix (hex, `03` = display) and vendor.
#[derive(Debug, Clone)]
pub struct GpuFilter {
    pub vendor: String,
    pub class_prefix: String,
}

fn read_hex(root: &Root, dev: &str, attr: &str) -> Option<String> {
    let v = root.read(&format!("/sys/bus/pci/devices/{dev}/{attr}"))?;
    Some(v.trim().trim_start_matches("0x").to_ascii_lowercase())
}

fn link_name(root: &Root, path: &str) -> Option<String> {
    std::fs::read_link(root.path(path))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// Whether the device at `addr` is one the filter selects, from its vendor and class alone:
/// the scan reads the rest (config space, AER counters, slots) only for those and their
/// group members. Reading all of it for every device of the host made an observation in the
/// qemu host about 180 ms, config space being slow to read there.
/// Its vendor and class, read here, are handed on to [`read_device_in`] (not read twice).
fn selected(root: &Root, addr: &str, filter: &GpuFilter) -> Option<(String, String)> {
    let vendor = read_hex(root, addr, "vendor").filter(|v| *v == filter.vendor)?;
    let class = read_hex(root, addr, "class").filter(|c| c.starts_with(&filter.class_prefix))?;
    Some((vendor, class))
}

/// Reads one device, with the host's slots read once by the caller; `known`: its vendor and
/// class when the caller read them already.
fn read_device_in(
    root: &Root,
    addr: &str,
    slots: &[(String, String)],
    known: Option<(String, String)>,
) -> Option<PciDevice> {
    let base = format!("/sys/bus/pci/devices/{addr}");
    let (vendor, class) = match known {
        Some(vc) => vc,
        None => (
            read_hex(root, addr, "vendor")?,
            read_hex(root, addr, "class").unwrap_or_default(),
        ),
    };
    let device = read_hex(root, addr, "device").unwrap_or_default();
    let subsystem = match (
        read_hex(root, addr, "subsystem_vendor"),
        read_hex(root, addr, "subsystem_device"),
    ) {
        (Some(v), Some(d)) if v != "0000" || d != "0000" => Some(format!("{v}:{d}")),
        _ => None,
    };
    let numa_node = root
        .read(&format!("{base}/numa_node"))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(-1);
    let iommu_group = link_name(root, &format!("{base}/iommu_group")).and_then(|g| g.parse().ok());
    let Binding {
        driver,
        driver_override,
        nvidia_minor,
    } = read_binding(root, addr);
    let config = Config::open(root, addr);
    let head = config
        .as_ref()
        .and_then(|c| c.dword(0))
        .map(u32::to_le_bytes);
    // UUID and serial come from nvidia-smi, for all GPUs at once (`LocalHost::nvml_ids`).
    let identity = crate::host::model::GpuIdentity {
        dsn: config
            .as_ref()
            .and_then(|c| super::identity::serial_number_by(|at| c.dword(at))),
        slot: super::identity::slot_of(addr, slots),
        path: std::fs::read_link(root.path(&base))
            .ok()
            .and_then(|t| super::identity::topology_path(&t.to_string_lossy())),
        ..Default::default()
    };
    Some(PciDevice {
        address: addr.to_string(),
        vendor,
        device,
        class,
        subsystem,
        numa_node,
        iommu_group,
        driver,
        driver_override,
        nvidia_minor,
        holders: vec![],
        identity,
        health: super::health::read(root, addr, head.as_ref().map(|h| &h[..])),
    })
}

/// A device's config space, read a dword where one is needed (`pread`), not whole: each dword
/// of config space is a config cycle on the bus (an exit to the emulator under qemu, where
/// reading 4 KiB took about 1 ms a device), and the observation needs only the first dword (all
/// ones: the device does not answer) and the extended capabilities' headers (the serial).
struct Config(std::fs::File);

impl Config {
    fn open(root: &Root, addr: &str) -> Option<Config> {
        std::fs::File::open(root.path(&format!("/sys/bus/pci/devices/{addr}/config")))
            .ok()
            .map(Config)
    }

    /// The dword at `at`; `None` past what may be read (256 bytes when not root).
    fn dword(&self, at: usize) -> Option<u32> {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 4];
        self.0.read_exact_at(&mut b, at as u64).ok()?;
        Some(u32::from_le_bytes(b))
    }
}

/// What a binding write (`driver_override`, unbind, `drivers_probe`) can change of a device.
struct Binding {
    driver: Option<String>,
    driver_override: Option<String>,
    nvidia_minor: Option<u32>,
}

fn read_binding(root: &Root, addr: &str) -> Binding {
    let base = format!("/sys/bus/pci/devices/{addr}");
    Binding {
        driver: link_name(root, &format!("{base}/driver")),
        driver_override: root
            .read(&format!("{base}/driver_override"))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty() && s != "(null)"),
        nvidia_minor: root
            .read(&format!("/proc/driver/nvidia/gpus/{addr}/information"))
            .and_then(|t| parse_minor(&t)),
    }
}

/// `old`, the device at `addr` as observed, after a binding write to it: its driver, override
/// and NVIDIA minor read again, the rest kept — none of it changes with a binding, and config
/// space, the AER counters and the slots are the slow reads (each binding write re-read them
/// all: about a third of a move of two GPUs in the qemu host). `None` when the device is gone;
/// the caller then observes in full, as it does at the end of every converge.
pub fn reread_binding(root: &Root, addr: &str, old: &PciDevice) -> Option<PciDevice> {
    read_hex(root, addr, "vendor")?;
    let b = read_binding(root, addr);
    Some(PciDevice {
        driver: b.driver,
        driver_override: b.driver_override,
        nvidia_minor: b.nvidia_minor,
        ..old.clone()
    })
}

/// What a binding write needs to know of the device at `addr` right before it writes: the
/// device's driver, override and minor, and its IOMMU group (whose device nodes a holder of a
/// `vfio-pci` device opens) — the rest left empty, not read. `None` when there is no device.
pub fn read_for_binding(root: &Root, addr: &str) -> Option<PciDevice> {
    let vendor = read_hex(root, addr, "vendor")?;
    let b = read_binding(root, addr);
    Some(PciDevice {
        address: addr.to_string(),
        vendor,
        iommu_group: link_name(root, &format!("/sys/bus/pci/devices/{addr}/iommu_group"))
            .and_then(|g| g.parse().ok()),
        driver: b.driver,
        driver_override: b.driver_override,
        nvidia_minor: b.nvidia_minor,
        ..PciDevice::default()
    })
}

/// `(name, address)` of each physical slot the platform names.
fn slots(root: &Root) -> Vec<(String, String)> {
    root.list("/sys/bus/pci/slots")
        .into_iter()
        .take(256)
        .filter_map(|n| {
            let a = root.read(&format!("/sys/bus/pci/slots/{n}/address"))?;
            Some((n, a))
        })
        .collect()
}

/// `Device Minor: \t 0` from `/proc/driver/nvidia/gpus/<addr>/information`.
pub fn parse_minor(info: &str) -> Option<u32> {
    info.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "Device Minor")
            .then(|| v.trim().parse().ok())
            .flatten()
    })
}

/// All GPUs and their IOMMU-group companions, by address.
pub fn scan(root: &Root, filter: &GpuFilter) -> BTreeMap<String, PciDevice> {
    let mut out = BTreeMap::new();
    let addrs = root.list("/sys/bus/pci/devices");
    let slots = slots(root);
    let mut groups = BTreeSet::new();
    for (a, known) in addrs
        .iter()
        .filter_map(|a| Some((a, selected(root, a, filter)?)))
    {
        if let Some(d) = read_device_in(root, a, &slots, Some(known)) {
            if let Some(g) = d.iommu_group {
                groups.insert(g);
            }
            out.insert(a.clone(), d);
        }
    }
    // Companions: every other device in a GPU's IOMMU group (the GPU's audio function, or a
    // device behind the same bridge), so the planner can move or refuse them together.
    for g in groups {
        for a in root.list(&format!("/sys/kernel/iommu_groups/{g}/devices")) {
            if let std::collections::btree_map::Entry::Vacant(e) = out.entry(a.clone()) {
                if let Some(d) = read_device_in(root, &a, &slots, None) {
                    e.insert(d);
                }
            }
        }
    }
    out
}

/// Registered PCI drivers.
pub fn drivers(root: &Root) -> BTreeSet<String> {
    root.list("/sys/bus/pci/drivers").into_iter().collect()
}
