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

/// Scans `/proc` once and returns the holders of each device.
pub fn scan(root: &Root, devices: &BTreeMap<String, PciDevice>) -> BTreeMap<String, Vec<Holder>> {
    scan_nodes(root, &all_nodes(root, devices))
}

/// The nodes of each of `devices` that has any, by address: what [`scan_nodes`] looks for.
pub fn all_nodes(root: &Root, devices: &BTreeMap<String, PciDevice>) -> Vec<(String, Nodes)> {
    devices
        .values()
        .map(|d| (d.address.clone(), nodes_of(root, d)))
        .filter(|(_, n)| !n.paths.is_empty() || !n.numbers.is_empty())
        .collect()
}

/// A holder scan started on a thread of its own, so that the caller reads the rest of the host
/// meanwhile; [`HolderScan::finish`] gives its answer.
///
/// # Guarantees
/// [`scan_nodes`]'s answer, whatever happens to the thread: one that cannot be started leaves
/// the scan to `finish`, one that panics panics `finish`.
pub struct HolderScan(Scan);

type Answer = BTreeMap<String, Vec<Holder>>;

/// What a scan looks at: the root, the devices' nodes, the processes.
struct Job {
    root: Root,
    nodes: Vec<(String, Nodes)>,
    pids: Vec<u32>,
}

impl Job {
    fn run(&self) -> Answer {
        scan_pids(&self.root, &self.nodes, &self.pids, SCAN_THREADS_MAX)
    }
}

enum Scan {
    Running(std::thread::JoinHandle<Answer>),
    /// Left to [`HolderScan::finish`]: too few processes to be worth a thread, or none could
    /// be started.
    Left(std::sync::Arc<Job>),
}

impl HolderScan {
    /// Starts the scan of `nodes` (as [`all_nodes`] makes them): on a thread of its own when
    /// `/proc` lists at least [`PIDS_PER_THREAD_MIN`] processes.
    pub fn start(root: &Root, nodes: Vec<(String, Nodes)>) -> HolderScan {
        let pids = if nodes.is_empty() { vec![] } else { pids(root) };
        let job = std::sync::Arc::new(Job {
            root: root.clone(),
            nodes,
            pids,
        });
        if job.pids.len() < PIDS_PER_THREAD_MIN {
            return HolderScan(Scan::Left(job));
        }
        let theirs = job.clone();
        let started = std::thread::Builder::new()
            .name("holder-scan".into())
            .spawn(move || theirs.run());
        HolderScan(match started {
            Ok(h) => Scan::Running(h),
            Err(_) => Scan::Left(job),
        })
    }

    /// The holders of each device, by address.
    pub fn finish(self) -> Answer {
        match self.0 {
            Scan::Running(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Scan::Left(job) => job.run(),
        }
    }
}

/// At most this many threads walk `/proc` in one scan.
const SCAN_THREADS_MAX: usize = 8;
/// A thread is given at least this many processes: fewer cost less than starting it.
const PIDS_PER_THREAD_MIN: usize = 32;

/// Scans `/proc` once and returns the holders of the devices whose nodes are `nodes` (by
/// address, as [`all_nodes`] makes them).
///
/// The processes are split over up to [`SCAN_THREADS_MAX`] threads (one per CPU the agent may
/// use, each with at least [`PIDS_PER_THREAD_MIN`] processes): a busy host runs thousands of
/// processes with hundreds of descriptors each, and this walk is most of an observation's time
/// and runs right before every unbind.
///
/// # Guarantees
/// The same answer as one thread would give, in the same order (by `/proc`'s listing). A thread
/// that cannot be started leaves its share to the calling thread; one that panics panics the
/// caller — never a scan that silently skipped processes, since an empty answer lets an unbind
/// go ahead.
pub fn scan_nodes(root: &Root, nodes: &[(String, Nodes)]) -> BTreeMap<String, Vec<Holder>> {
    scan_nodes_using(root, nodes, SCAN_THREADS_MAX)
}

/// [`scan_nodes`] on at most `max_threads` threads (the benchmark compares one thread with the
/// default).
pub fn scan_nodes_using(
    root: &Root,
    nodes: &[(String, Nodes)],
    max_threads: usize,
) -> BTreeMap<String, Vec<Holder>> {
    if nodes.is_empty() {
        return BTreeMap::new();
    }
    scan_pids(root, nodes, &pids(root), max_threads)
}

/// The processes `/proc` lists, but the agent itself (on the real root).
fn pids(root: &Root) -> Vec<u32> {
    let self_pid = std::process::id();
    root.list("/proc")
        .iter()
        .filter_map(|p| p.parse::<u32>().ok())
        .filter(|&pid| !(pid == self_pid && root.is_real()))
        .collect()
}

/// The holders among `pids` of the devices whose nodes are `nodes`.
fn scan_pids(root: &Root, nodes: &[(String, Nodes)], pids: &[u32], max_threads: usize) -> Answer {
    let mut out = Answer::new();
    if nodes.is_empty() {
        return out;
    }
    for (pid, held) in split_over_threads(pids, max_threads, |chunk| held_by(root, chunk, nodes)) {
        let command = root
            .read(&format!("/proc/{pid}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let (container, vm, unit) = attribution(
            &root
                .read(&format!("/proc/{pid}/cgroup"))
                .unwrap_or_default(),
        );
        for i in held {
            out.entry(nodes[i].0.clone()).or_default().push(Holder {
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

/// The processes of `pids` that hold any of `nodes`, each with the indices (into `nodes`) of
/// the devices it holds.
fn held_by(root: &Root, pids: &[u32], nodes: &[(String, Nodes)]) -> Vec<(u32, BTreeSet<usize>)> {
    let mut found = Vec::new();
    for &pid in pids {
        let mut held: BTreeSet<usize> = BTreeSet::new();
        for_each_fd(&root.path(&format!("/proc/{pid}/fd")), |target, number| {
            for (i, (_, n)) in nodes.iter().enumerate() {
                if n.paths.contains(target) || number.is_some_and(|x| n.numbers.contains(&x)) {
                    held.insert(i);
                }
            }
        });
        if !held.is_empty() {
            found.push((pid, held));
        }
    }
    found
}

/// Calls `f` with what each descriptor of a `/proc/<pid>/fd` directory names: its link's
/// target, and the device numbers when the target is a character device under `/dev`.
///
/// Each link is read relative to the open directory: a path lookup of one name, not of
/// `/proc/<pid>/fd/<n>` from the root. A process gone meanwhile has no descriptors; one that
/// closes a descriptor meanwhile drops it.
///
/// # Guarantees
/// Only a `/dev/...` target is `stat`ed: reading the link never touches the file, but a `stat`
/// follows it into its file system, and a file on a hung FUSE or NFS mount would block the scan
/// (and `observe`) for good. Device nodes live under `/dev` in every mount namespace.
fn for_each_fd(dir: &std::path::Path, mut f: impl FnMut(&str, Option<(u32, u32)>)) {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::open(dir, flags, Mode::empty()) else {
        return;
    };
    let Ok(entries) = rustix::fs::Dir::read_from(&fd) else {
        return;
    };
    for e in entries {
        let Ok(e) = e else { break };
        let name = e.file_name();
        if name.to_bytes().starts_with(b".") {
            continue;
        }
        let Ok(link) = rustix::fs::readlinkat(&fd, name, Vec::new()) else {
            continue;
        };
        let target = String::from_utf8_lossy(link.as_bytes());
        f(
            &target,
            dev_target_numbers(&target, || {
                rustix::fs::statat(&fd, name, rustix::fs::AtFlags::empty()).ok()
            }),
        );
    }
}

/// The device numbers of a descriptor whose link reads `target`: `stat` (which follows the link)
/// only for a `/dev/...` target (see [`for_each_fd`]'s guarantees), and only a character device.
fn dev_target_numbers(
    target: &str,
    stat: impl FnOnce() -> Option<rustix::fs::Stat>,
) -> Option<(u32, u32)> {
    if !target.starts_with("/dev/") {
        return None;
    }
    let st = stat()?;
    let char_device =
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::CharacterDevice;
    char_device.then(|| dev_numbers(st.st_rdev))
}

/// `work` over `items` split in consecutive chunks, one scoped thread each (see
/// [`scan_nodes`]'s guarantees), the answers concatenated in the items' order.
fn split_over_threads<T: Sync, R: Send>(
    items: &[T],
    max_threads: usize,
    work: impl Fn(&[T]) -> Vec<R> + Sync,
) -> Vec<R> {
    let threads = threads_for(items.len()).min(max_threads);
    if threads <= 1 {
        return work(items);
    }
    let work = &work;
    std::thread::scope(|s| {
        let chunks = items.chunks(items.len().div_ceil(threads));
        let started: Vec<_> = chunks
            .map(|c| {
                let t = std::thread::Builder::new().spawn_scoped(s, move || work(c));
                (c, t)
            })
            .collect();
        let mut out = Vec::new();
        for (c, t) in started {
            match t {
                Ok(h) => out.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
                Err(_) => out.extend(work(c)),
            }
        }
        out
    })
}

/// How many threads a scan of `n` processes uses.
fn threads_for(n: usize) -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |c| c.get()));
    cpus.min(SCAN_THREADS_MAX)
        .min(n.div_ceil(PIDS_PER_THREAD_MIN))
        .max(1)
}

#[cfg(test)]
mod tests;
