//! Which GPU is which beyond its PCI address (issue 24, the observation): facts that survive a
//! renumbering of the buses, read from sysfs whatever driver is bound, and the GPU's own
//! identity from NVML while it is on `nvidia`.
//!
//! - the PCIe Device Serial Number (extended capability `0x0003`) from the device's config
//!   space, which root reads in full (4096 bytes) on any driver;
//! - the physical slot: the `/sys/bus/pci/slots/<name>/address` that names the device's bus and
//!   device number (a fact of real servers and of the qemu test; a VM often has none);
//! - the topology path: the root complex, then each hop's device and function down to the GPU,
//!   without bus numbers (they are what a renumbering changes);
//! - UUID and board serial from `nvidia-smi --query-gpu=pci.bus_id,uuid,serial`.
//!
//! Pure parsers here; `pci.rs` and `mod.rs` read the files and run the command.

use std::collections::BTreeMap;

/// Capability ID of the PCIe Device Serial Number extended capability.
const DSN_CAP: u16 = 0x0003;

/// The Device Serial Number from a config space dump, as 16 hex digits (upper dword first, as
/// `lspci -vv` prints it without its dashes); `None` when there is no such capability or only
/// the first 256 bytes were readable (not root).
#[cfg(test)]
pub fn device_serial_number(config: &[u8]) -> Option<String> {
    serial_number_by(|at| {
        let b = config.get(at..at + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    })
}

/// [`device_serial_number`] with the config space read a dword at a time by `dword(offset)`
/// (`None`: not readable there): the extended capability list is walked from 0x100, so only its
/// headers and the serial's two dwords are read, not 4 KiB (`pci.rs`).
pub fn serial_number_by(dword: impl Fn(usize) -> Option<u32>) -> Option<String> {
    let mut at = 0x100usize;
    // A capability list is at most (4096 - 256) / 4 entries; a loop in it ends here too.
    for _ in 0..960 {
        let header = dword(at)?;
        if header == 0 || header == 0xffff_ffff {
            return None;
        }
        if (header & 0xffff) as u16 == DSN_CAP {
            let (lo, hi) = (dword(at + 4)?, dword(at + 8)?);
            return Some(format!("{:016x}", (u64::from(hi) << 32) | u64::from(lo)));
        }
        let next = (header >> 20) as usize & !3;
        if next < 0x100 {
            return None;
        }
        at = next;
    }
    None
}

/// The slot whose `address` (`0000:01:00`, domain:bus:device) is the device's, from
/// `(slot name, address file text)` pairs.
pub fn slot_of(addr: &str, slots: &[(String, String)]) -> Option<String> {
    let dev = addr.rsplit_once('.').map(|(d, _)| d)?;
    slots
        .iter()
        .find(|(_, a)| a.trim().eq_ignore_ascii_case(dev))
        .map(|(n, _)| crate::text::sanitize(n, 64))
}

/// The topology path from the device's sysfs link target
/// (`../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0`): `pci0000:00/01.0/00.0`.
pub fn topology_path(link_target: &str) -> Option<String> {
    let mut parts = link_target.split('/').skip_while(|p| !p.starts_with("pci"));
    let root = parts.next()?.to_string();
    let mut out = vec![root];
    for hop in parts {
        // 0000:00:01.0 -> 01.0
        let (_, devfn) = hop.rsplit_once(':')?;
        out.push(devfn.to_string());
    }
    (out.len() > 1).then(|| out.join("/"))
}

/// `pci.bus_id, uuid, serial` lines of `nvidia-smi --query-gpu=pci.bus_id,uuid,serial
/// --format=csv,noheader`, by PCI address as sysfs spells it (`0000:01:00.0`).
pub fn nvidia_smi_ids(out: &str) -> BTreeMap<String, (String, Option<String>)> {
    let mut m = BTreeMap::new();
    for line in out.lines().take(1024) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let [bus, uuid, serial] = f[..] else {
            continue;
        };
        let Some(addr) = crate::host::health::nvidia_bus_id(bus) else {
            continue;
        };
        let ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if !uuid.starts_with("GPU-") || !ok(uuid) {
            continue;
        }
        let serial =
            (ok(serial) && serial != "N/A" && serial != "[N/A]").then(|| serial.to_string());
        m.insert(addr, (uuid.to_string(), serial));
    }
    m
}

#[cfg(test)]
mod tests;
