//! Which processes hold a device: a scan of `/proc/*/fd` of every PID namespace.
//!
//! The host's `/proc` lists processes of all containers too, so a server inside an LXC
//! container counts. A file descriptor matches a device when its link names one of the
//! device's nodes (`/dev/nvidiaN`, `/dev/dri/cardN`/`renderDN`, `/dev/vfio/<group>`) or, when
//! it can be stat'ed, when its device number matches (a container may name the node differently).
//!
//! # Caveats
//! A process that maps the device without keeping a descriptor open is not seen; the kernel's
//! unbind then still blocks, which the write deadline turns into an error.

use super::Root;
use crate::host::model::{Holder, PciDevice};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

/// Device nodes of one PCI device: paths and `(major, minor)` numbers.
#[derive(Debug, Default, Clone)]
pub struct Nodes {
    pub paths: BTreeSet<String>,
    pub numbers: BTreeSet<(u32, u32)>,
}

fn parse_dev(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The nodes through which `d` is used.
pub fn nodes_of(root: &Root, d: &PciDevice) -> Nodes {
    let mut n = Nodes::default();
    if let Some(m) = d.nvidia_minor {
        n.paths.insert(format!("/dev/nvidia{m}"));
        n.numbers.insert((195, m));
    }
    for drm in root.list(&format!("/sys/bus/pci/devices/{}/drm", d.address)) {
        if drm.starts_with("card") || drm.starts_with("renderD") {
            n.paths.insert(format!("/dev/dri/{drm}"));
            if let Some(num) = root
                .read(&format!("/sys/bus/pci/devices/{}/drm/{drm}/dev", d.address))
                .and_then(|s| parse_dev(&s))
            {
                n.numbers.insert(num);
            }
        }
    }
    if d.driver.as_deref() == Some("vfio-pci") {
        if let Some(g) = d.iommu_group {
            let p = format!("/dev/vfio/{g}");
            if let Ok(md) = std::fs::metadata(root.path(&p)) {
                if md.file_type().is_char_device() {
                    n.numbers.insert(dev_numbers(md.rdev()));
                }
            }
            n.paths.insert(p);
        }
    }
    n
}

fn dev_numbers(rdev: u64) -> (u32, u32) {
    let major = ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff);
    let minor = ((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff);
    (major as u32, minor as u32)
}

/// Where a process runs, from its cgroup path.
fn attribution(cgroup: &str) -> (Option<u32>, Option<u32>, Option<String>) {
    let mut container = None;
    let mut vm = None;
    let mut unit = None;
    for line in cgroup.lines() {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        let parts: Vec<&str> = path.split('/').collect();
        for (i, p) in parts.iter().enumerate() {
            if *p == "lxc" {
                container = container.or_else(|| parts.get(i + 1).and_then(|v| v.parse().ok()));
            }
            if let Some(v) = p.strip_prefix("lxc.payload.") {
                container = container.or_else(|| v.parse().ok());
            }
            if *p == "qemu.slice" {
                vm = vm.or_else(|| {
                    parts
                        .get(i + 1)
                        .and_then(|s| s.strip_suffix(".scope"))
                        .and_then(|v| v.parse().ok())
                });
            }
        }
        // The unit: the host's, or inside a container its own systemd's (the path goes on
        // below the container: `/lxc/129/ns/system.slice/x.service`). A VM's is its scope.
        if vm.is_none() {
            if let Some(u) = parts.iter().rev().find(|p| p.ends_with(".service")) {
                unit = unit.or_else(|| Some(u.to_string()));
            }
        }
    }
    (container, vm, unit)
}

/// What one `/proc/<pid>/fd/<n>` link names: its target, and the device numbers when the target
/// is a character device under `/dev`.
///
/// # Guarantees
/// Only a `/dev/...` target is `stat`ed: reading the link never touches the file, but a `stat`
/// follows it into its file system, and a file on a hung FUSE or NFS mount would block the scan
/// (and `observe`) for good. Device nodes live under `/dev` in every mount namespace.
pub fn fd_target(link: &std::path::Path) -> (String, Option<(u32, u32)>) {
    let target = std::fs::read_link(link)
        .map(|t| t.to_string_lossy().into_owned())
        .unwrap_or_default();
    let number = if target.starts_with("/dev/") {
        std::fs::metadata(link)
            .ok()
            .filter(|m| m.file_type().is_char_device())
            .map(|m| dev_numbers(m.rdev()))
    } else {
        None
    };
    (target, number)
}

/// Scans `/proc` once and returns the holders of each device.
pub fn scan(root: &Root, devices: &BTreeMap<String, PciDevice>) -> BTreeMap<String, Vec<Holder>> {
    let nodes: Vec<(String, Nodes)> = devices
        .values()
        .map(|d| (d.address.clone(), nodes_of(root, d)))
        .filter(|(_, n)| !n.paths.is_empty() || !n.numbers.is_empty())
        .collect();
    let mut out: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
    if nodes.is_empty() {
        return out;
    }
    let self_pid = std::process::id();
    for pid_s in root.list("/proc") {
        let Ok(pid) = pid_s.parse::<u32>() else {
            continue;
        };
        if pid == self_pid && root.is_real() {
            continue;
        }
        let fd_dir = format!("/proc/{pid}/fd");
        let mut held: BTreeSet<&str> = BTreeSet::new();
        for fd in root.list(&fd_dir) {
            let (target, number) = fd_target(&root.path(&format!("{fd_dir}/{fd}")));
            for (addr, n) in &nodes {
                if n.paths.contains(&target) || number.is_some_and(|x| n.numbers.contains(&x)) {
                    held.insert(addr.as_str());
                }
            }
        }
        if held.is_empty() {
            continue;
        }
        let command = root
            .read(&format!("/proc/{pid}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let (container, vm, unit) = attribution(
            &root
                .read(&format!("/proc/{pid}/cgroup"))
                .unwrap_or_default(),
        );
        for addr in held {
            out.entry(addr.to_string()).or_default().push(Holder {
                pid,
                command: command.clone(),
                container,
                vm,
                unit: unit.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;
