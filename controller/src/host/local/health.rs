//! A device's health facts from sysfs (issue 40): its AER counters and link, its upstream port's
//! (the parent directory of its real sysfs path, when that is a PCI function), and whether its
//! config space still answers. Every file is PCI core's, present whatever driver is bound —
//! `nvidia`, `vfio-pci` or none — so a GPU passed through to a VM is watched too. Reads only.

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
            let head = config_head(root, a);
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
        if self.kmsg.is_none() {
            self.kmsg = open_kmsg_at_end();
            return 0;
        }
        let Some(f) = self.kmsg.as_mut() else {
            return 0;
        };
        count_new(f)
    }
}

/// The first bytes of the device's config space (enough to tell all ones).
fn config_head(root: &Root, addr: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut buf = [0u8; 4];
    let mut f =
        std::fs::File::open(root.path(&format!("/sys/bus/pci/devices/{addr}/config"))).ok()?;
    f.read_exact(&mut buf).ok()?;
    Some(buf.to_vec())
}

/// `/dev/kmsg`, non-blocking, positioned after its last record.
fn open_kmsg_at_end() -> Option<std::fs::File> {
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(0o4000 /* O_NONBLOCK */)
        .open("/dev/kmsg")
        .ok()?;
    f.seek(SeekFrom::End(0)).ok()?;
    Some(f)
}

/// The GPU events among the records `f` has now (each read is one record; EAGAIN ends them,
/// EPIPE is a record overwritten before it was read). At most 10 000 records per look.
fn count_new(f: &mut std::fs::File) -> u64 {
    use std::io::Read;
    let mut buf = vec![0u8; 8192];
    let mut n = 0;
    for _ in 0..10_000 {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(len) => {
                let rec = String::from_utf8_lossy(&buf[..len]);
                let msg = rec.split_once(';').map_or("", |(_, m)| m);
                n += crate::host::health::parse_gpu_events(msg.lines().next().unwrap_or("")).len()
                    as u64;
            }
            Err(e) if e.raw_os_error() == Some(32) => continue,
            Err(_) => break,
        }
    }
    n
}
