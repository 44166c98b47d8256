//! A device's health facts from sysfs (issue 40): its AER counters and link, its upstream port's
//! (the parent directory of its real sysfs path, when that is a PCI function), and whether its
//! config space still answers. Every file is PCI core's, present whatever driver is bound —
//! `nvidia`, `vfio-pci` or none — so a GPU passed through to a VM is watched too. Reads only.

use super::iommu::is_address;
use super::kmsg;
use super::Root;
use crate::host::health::{
    aer_counts, config_all_ones, link_state, PcieCounters, PcieHealth, PortHealth,
};

/// The sysfs facts of the device at `addr` (the driver's ECC counters are added by the caller,
/// from `nvidia-smi`); `config`: its config space as read for its identity.
pub fn read(root: &Root, addr: &str, config: Option<&[u8]>) -> PcieHealth {
    let base = format!("/sys/bus/pci/devices/{addr}");
    PcieHealth {
        device: counters(root, &base),
        port: upstream_port(root, &base).map(|(address, dir)| PortHealth {
            counters: counters(root, &dir),
            address,
        }),
        not_responding: config.is_some_and(config_all_ones),
        ecc: None,
        no_reset: !root.path(&format!("{base}/reset")).exists(),
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
    is_address(name).then(|| (name.to_string(), format!("/sys/bus/pci/devices/{name}")))
}

/// What [`crate::host::Host::health_mark`] follows between observations: the GPUs of the last
/// observation, and the kernel log from where the last look ended (on the real host
/// `/dev/kmsg` is read from its end on, record by record, never from the start again).
#[derive(Default)]
pub struct Follow {
    gpus: Vec<String>,
    kmsg: Option<std::fs::File>,
    events: u64,
}

impl Follow {
    /// The GPUs to follow (the last observation's).
    pub fn set_gpus(&mut self, gpus: Vec<String>) {
        self.gpus = gpus;
    }

    /// The fingerprint of every followed GPU's facts and of the GPU events seen so far.
    pub fn mark(&mut self, root: &Root) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for a in &self.gpus {
            // The first bytes of config space are enough to tell all ones.
            let head = root.read_head(&format!("/sys/bus/pci/devices/{a}/config"), 4);
            read(root, a, head.as_deref()).hash(&mut h);
        }
        self.events = self.events.saturating_add(self.new_events(root));
        self.events.hash(&mut h);
        h.finish()
    }

    /// GPU events logged since the last look (under a test root: all of the file's, each look).
    fn new_events(&mut self, root: &Root) -> u64 {
        if !root.is_real() {
            let log = root.read("/dev/kmsg").unwrap_or_default();
            self.events = 0;
            return crate::host::health::parse_gpu_events(&log).len() as u64;
        }
        let Some(f) = self.kmsg.as_mut() else {
            // From its end on: the observation that came before read what was there.
            use std::io::{Seek, SeekFrom};
            self.kmsg = kmsg::open().and_then(|mut f| f.seek(SeekFrom::End(0)).ok().map(|_| f));
            return 0;
        };
        // The GPU events among the records logged since the last look, at most 10 000 a look.
        let mut n = 0u64;
        kmsg::records(f, 10_000, |_, msg| {
            n += crate::host::health::parse_gpu_events(msg).len() as u64;
        });
        n
    }
}
