//! A device's health facts from sysfs (issue 40): its AER counters and link, its upstream port's
//! (the parent directory of its real sysfs path, when that is a PCI function), and whether its
//! config space still answers. Every file is PCI core's, present whatever driver is bound —
//! `nvidia`, `vfio-pci` or none — so a GPU passed through to a VM is watched too. Reads only.

use super::Root;
use crate::host::health::{
    aer_counts, config_all_ones, link_state, PcieCounters, PcieHealth, PortHealth,
};

/// The facts of the device at `addr`; `config`: its config space as read for its identity.
pub fn read(root: &Root, addr: &str, config: Option<&[u8]>) -> PcieHealth {
    let base = format!("/sys/bus/pci/devices/{addr}");
    PcieHealth {
        device: counters(root, &base),
        port: upstream_port(root, &base).map(|(address, dir)| PortHealth {
            counters: counters(root, &dir),
            address,
        }),
        not_responding: config.is_some_and(config_all_ones),
    }
}

/// The AER files and the link files of the function at sysfs path `dir`.
fn counters(root: &Root, dir: &str) -> PcieCounters {
    let r = |f: &str| root.read(&format!("{dir}/{f}"));
    PcieCounters {
        aer: aer_counts(
            r("aer_dev_correctable").as_deref(),
            r("aer_dev_nonfatal").as_deref(),
            r("aer_dev_fatal").as_deref(),
        ),
        link: link_state(
            r("current_link_speed").as_deref(),
            r("max_link_speed").as_deref(),
            r("current_link_width").as_deref(),
            r("max_link_width").as_deref(),
        ),
    }
}

/// The port above the device: `(address, sysfs path)` of its real path's parent, when that
/// parent is a PCI function (not the `pci0000:00` root bus).
fn upstream_port(root: &Root, base: &str) -> Option<(String, String)> {
    let target = std::fs::read_link(root.path(base)).ok()?;
    let real = target.to_string_lossy().into_owned();
    let parent = real.rsplit_once('/')?.0;
    let name = parent.rsplit('/').next()?;
    let is_function = name.len() == 12 && name.as_bytes()[4] == b':' && name.as_bytes()[10] == b'.';
    is_function.then(|| (name.to_string(), format!("/sys/bus/pci/devices/{name}")))
}
