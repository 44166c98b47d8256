//! The real host backend: sysfs, /proc, /etc/pve, systemd, pct.
//!
//! Every path is read under a configurable root (`--host-root DIR`), so observation can be
//! tested against captured files; commands (`pct`, `qm`, `systemctl`, `journalctl`, `modprobe`,
//! `nvidia-smi`) are found on PATH or named by `GPUPLANE_<TOOL>` environment variables (tests
//! use a recording stand-in for `pct`). Every write happens in [`LocalHost::apply`], which the
//! [`crate::door::Door`] calls, each under a deadline.
//!
//! # Guarantees
//! - A GPU is never unbound while a process holds one of its device nodes: holders are scanned
//!   again right before the write, and the step fails with their names.
//! - Rebinding uses `driver_override` + `unbind` + `drivers_probe`, never `new_id`, and the
//!   `driver` link is re-read afterwards: a probe that bound nothing is an error.
//! - Proxmox files are edited in place of only our lines, atomically, under Proxmox's locks.

mod absent;
mod boot;
mod confidential;
pub(crate) mod container_net;
mod error;
pub mod exec;
mod files;
#[cfg(test)]
mod fuzz;
mod health;
pub mod holders;
mod identity;
pub mod iommu;
mod kmsg;
mod ledger;
mod listening;
pub mod pci;
mod preflight;
mod probe;
mod pve;
mod run_as;
mod server;
mod smoke;
/// The budget of one smoke test (every request sent within it).
pub use smoke::BUDGET as SMOKE_BUDGET;
pub mod staging;
mod systemd;

use super::model::*;
use super::{Host, HostError, StepOutcome};
use crate::proxmox::lxc_conf::{DesiredGpuMounts, LxcConfig, MountStyle};
use crate::proxmox::pci_cfg::PciCfg;
use crate::step::Step;
pub use error::LocalError;
use holders::HolderScan;
use pci::GpuFilter;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The most one observation may take, all its commands together: a container whose commands
/// each run close to their own deadline (`pct exec` into a hung container, a slow import
/// check) cannot stretch one look at the host, and the host lock held for it, without end.
pub const OBSERVE_BUDGET: Duration = Duration::from_secs(180);
/// The most one server's preflight may take, all its commands together: a container whose
/// commands each run to their deadline costs that server's preflight, not the observation.
pub const PREFLIGHT_BUDGET: Duration = Duration::from_secs(30);

/// Most units of GPU holders observed beyond the watched ones (see `observe_holder_units`).
const HOLDER_UNITS_MAX: usize = 16;
/// At most this many unwatched managed unit files of the host are observed.
const MANAGED_UNITS_MAX: usize = 32;
/// A unit file larger than this is not read to see whether it is ours (ours are a few KiB).
const MANAGED_UNIT_BYTES_MAX: u64 = 256 * 1024;

/// Paths under a root directory (`/` on a real host).
#[derive(Debug, Clone)]
pub struct Root(pub PathBuf);

impl Root {
    /// `abs` (an absolute host path) under the root.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.0.join(abs.trim_start_matches('/'))
    }
    /// A whole file as text; `None` when it cannot be read or is not UTF-8.
    ///
    /// Not `fs::read_to_string`: its size hint costs a `statx` per file, and sysfs and procfs,
    /// where most reads go, report a size of 4096 or 0 whatever the text is (in the qemu host a
    /// fifth of an observation's ~1 000 system calls were those). Read through `take`, the
    /// `Read` default reads into the 4 KiB given, then once more for the end.
    pub fn read(&self, abs: &str) -> Option<String> {
        use std::io::Read;
        let f = std::fs::File::open(self.path(abs)).ok()?;
        let mut v = Vec::with_capacity(4096);
        f.take(u64::MAX).read_to_end(&mut v).ok()?;
        String::from_utf8(v).ok()
    }
    /// The first `max` bytes of a file at most (binary: a device's config space).
    pub fn read_head(&self, abs: &str, max: u64) -> Option<Vec<u8>> {
        use std::io::Read;
        let f = std::fs::File::open(self.path(abs)).ok()?;
        let mut buf = Vec::with_capacity(max as usize);
        f.take(max).read_to_end(&mut buf).ok()?;
        Some(buf)
    }
    /// Entry names of a directory, sorted; empty when missing.
    pub fn list(&self, abs: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.path(abs))
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
    /// Whether this is the real root (so /proc is this machine's and /dev/kmsg a device).
    pub fn is_real(&self) -> bool {
        self.0 == Path::new("/")
    }
}

/// External programs the backend runs.
#[derive(Debug, Clone)]
pub struct Tools {
    pub pct: String,
    pub qm: String,
    pub systemctl: String,
    pub journalctl: String,
    pub modprobe: String,
    pub nvidia_smi: String,
    /// Runs a command as another user (util-linux `runuser`), where the unit's user is not root.
    pub runuser: String,
    /// Names a running container's init PID (`lxc-info -n VMID -p -H`).
    pub lxc_info: String,
    /// Refreshes the boot entries from `/etc/kernel/cmdline` (`proxmox-boot-tool refresh`).
    pub proxmox_boot_tool: String,
    /// Regenerates `/boot/grub/grub.cfg` from `/etc/default/grub`.
    pub update_grub: String,
}

impl Tools {
    /// Program names from `GPUPLANE_PCT`, `GPUPLANE_QM`, ... or their usual names.
    pub fn from_env() -> Tools {
        let t =
            |var: &str, default: &str| std::env::var(var).unwrap_or_else(|_| default.to_string());
        Tools {
            pct: t("GPUPLANE_PCT", "pct"),
            qm: t("GPUPLANE_QM", "qm"),
            systemctl: t("GPUPLANE_SYSTEMCTL", "systemctl"),
            journalctl: t("GPUPLANE_JOURNALCTL", "journalctl"),
            modprobe: t("GPUPLANE_MODPROBE", "modprobe"),
            nvidia_smi: t("GPUPLANE_NVIDIA_SMI", "nvidia-smi"),
            runuser: t("GPUPLANE_RUNUSER", "runuser"),
            lxc_info: t("GPUPLANE_LXC_INFO", "lxc-info"),
            proxmox_boot_tool: t("GPUPLANE_PROXMOX_BOOT_TOOL", "proxmox-boot-tool"),
            update_grub: t("GPUPLANE_UPDATE_GRUB", "update-grub"),
        }
    }
}

/// A `/health_generate` 200: when, and from which address and port.
type Probed = (std::time::Instant, (String, u16));

/// The real host.
pub struct LocalHost {
    pub root: Root,
    pub filter: GpuFilter,
    pub tools: Tools,
    /// The agent's own state (P2P probe cache): `/var/lib/gpuplane` under the root.
    pub state_dir: PathBuf,
    /// Deadline of each sysfs write.
    pub write_timeout: Duration,
    /// Deadline of each command.
    pub command_timeout: Duration,
    /// The most one observation may take, all its commands together ([`OBSERVE_BUDGET`]).
    pub observe_budget: Duration,
    /// When the observation under way must end; each command's deadline is cut to it.
    observe_until: std::cell::Cell<Option<std::time::Instant>>,
    /// The most one server's preflight may take ([`PREFLIGHT_BUDGET`]).
    pub preflight_budget: Duration,
    /// When the preflight under way must end; each command's deadline is cut to it.
    preflight_until: std::cell::Cell<Option<std::time::Instant>>,
    /// How long a write waits for a Proxmox lock before it reports a wait
    /// ([`files::LOCK_ACQUIRE`], Proxmox's own default).
    pub lock_timeout: Duration,
    /// Units to observe (the agent's servers).
    pub units: Vec<UnitRef>,
    /// Node name, from `/etc/hostname` unless given.
    pub node_name: Option<String>,
    /// Servers to preflight (the agent's servers).
    pub preflight: Vec<PreflightRequest>,
    /// Preflight results kept while their directories do not change.
    preflight_cache: crate::host::preflight::Cache,
    /// Smoke test results by unit and test, kept while the unit is the one tested.
    smoke: smoke::Runner,
    /// Where each watched server answered at the last observation (`probe_ready`).
    endpoints: std::cell::RefCell<std::collections::BTreeMap<String, (String, u16)>>,
    /// When and where `probe_ready` last got 200 from a unit's server (the next observation
    /// uses it when the server is still at that address).
    probed_healthy: std::cell::RefCell<std::collections::BTreeMap<String, Probed>>,
    /// The last `nvidia-smi` identities, with the GPUs on `nvidia` they were read for.
    nvml: std::cell::RefCell<Option<(String, NvmlIds)>>,
    /// What `health_mark` follows between observations.
    health: health::Follow,
    /// The kernel log as the last observation read it, brought up to date at each
    /// (`kmsg.rs`: one read per new record, not per record of the ring).
    kernel_log: kmsg::Mirror,
    /// The last ECC and row-remap counters from `nvidia-smi`, when and for which GPUs.
    ecc: std::cell::RefCell<Option<(std::time::Instant, String, EccById)>>,
}

/// The addresses of the GPUs on `nvidia`, joined (what `nvidia-smi`'s answers are kept for);
/// `None` when none is.
fn on_nvidia(devices: &BTreeMap<String, PciDevice>) -> Option<String> {
    let on: Vec<&str> = devices
        .values()
        .filter(|d| d.driver.as_deref() == Some("nvidia"))
        .map(|d| d.address.as_str())
        .collect();
    (!on.is_empty()).then(|| on.join(","))
}

/// ECC and row-remap counters by PCI address.
type EccById = BTreeMap<String, crate::host::health::EccCounters>;

/// How long `nvidia-smi`'s ECC counters are used before it is asked again (it takes seconds on
/// a loaded host; an uncorrectable error is also an Xid line, which the kernel log gives at
/// once).
const ECC_MAX_AGE: Duration = Duration::from_secs(60);

/// UUID and serial by PCI address.
type NvmlIds = BTreeMap<String, (String, Option<String>)>;

impl LocalHost {
    pub fn new(root: &Path, gpu_vendor: &str) -> LocalHost {
        let root = Root(root.to_path_buf());
        LocalHost {
            state_dir: root.path("/var/lib/gpuplane"),
            root,
            filter: GpuFilter {
                vendor: gpu_vendor.to_string(),
                class_prefix: "03".into(),
            },
            tools: Tools::from_env(),
            write_timeout: Duration::from_secs(30),
            lock_timeout: files::LOCK_ACQUIRE,
            command_timeout: Duration::from_secs(120),
            observe_budget: OBSERVE_BUDGET,
            observe_until: Default::default(),
            preflight_budget: PREFLIGHT_BUDGET,
            preflight_until: Default::default(),
            units: vec![],
            node_name: None,
            preflight: vec![],
            preflight_cache: Default::default(),
            smoke: Default::default(),
            endpoints: Default::default(),
            probed_healthy: Default::default(),
            nvml: Default::default(),
            health: Default::default(),
            kernel_log: Default::default(),
            ecc: Default::default(),
        }
    }

    /// Runs a command within its deadline, cut to what is left of the observation's budget
    /// and of the preflight's when one is under way (none left: [`LocalError::ObserveBudget`]
    /// or [`LocalError::PreflightBudget`], nothing run).
    pub(crate) fn cmd(&self, argv: &[&str]) -> Result<exec::CmdOutput, LocalError> {
        let v: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let now = std::time::Instant::now();
        let budgets = [
            (
                self.observe_until.get(),
                LocalError::ObserveBudget {
                    seconds: self.observe_budget.as_secs(),
                },
            ),
            (
                self.preflight_until.get(),
                LocalError::PreflightBudget {
                    seconds: self.preflight_budget.as_secs(),
                },
            ),
        ];
        let mut deadline = self.command_timeout;
        for (until, spent) in budgets {
            let Some(until) = until else { continue };
            let left = until.saturating_duration_since(now);
            if left.is_zero() {
                return Err(spent);
            }
            deadline = deadline.min(left);
        }
        exec::run(&v, deadline)
    }

    /// Whether the preflight under way has used up its budget.
    fn preflight_spent(&self) -> bool {
        self.preflight_until
            .get()
            .is_some_and(|u| std::time::Instant::now() >= u)
    }

    fn node(&self) -> String {
        self.node_name.clone().unwrap_or_else(|| {
            self.root
                .read("/etc/hostname")
                .map(|s| s.trim().split('.').next().unwrap_or("").to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "localhost".into())
        })
    }

    fn sysfs(&self, abs: &str, value: &str) -> Result<(), LocalError> {
        exec::sysfs_write(&self.root.path(abs), value, self.write_timeout)
    }

    /// Units whose processes hold a GPU, not yet observed: read too, so the planner can tell
    /// an old unit of one of its servers (a rename, a move out of a container) from a stranger.
    /// Names come from cgroup paths a container may choose, so only valid service names, at
    /// most [`HOLDER_UNITS_MAX`] of them, each passed after `--`.
    fn observe_holder_units(&self, st: &mut HostState) {
        let mut extra: Vec<UnitRef> = Vec::new();
        for d in st.pci_devices.values() {
            for h in &d.holders {
                let Some(r) = h.unit_ref() else { continue };
                if let Location::Container(c) = r.location {
                    if !st
                        .containers
                        .get(&c)
                        .is_some_and(|c| c.state == RunState::Running)
                    {
                        continue;
                    }
                }
                let name = &r.name;
                if name.ends_with(".service")
                    && crate::systemd::name::validate_unit_name(name).is_ok()
                    && !st.units.contains_key(&r.key())
                    && !extra.contains(&r)
                    && extra.len() < HOLDER_UNITS_MAX
                {
                    extra.push(r);
                }
            }
        }
        for r in extra {
            let u = self.observe_unit(&r);
            st.units.insert(r.key(), u);
        }
    }

    /// The host's unit files that carry the agent's header, beyond the watched units: an
    /// older unit of a renamed or moved server is found by its file even when it holds no GPU
    /// (stopped, failed). At most [`MANAGED_UNITS_MAX`] files, each read only when small.
    fn observe_managed_host_units(&self, st: &mut HostState) {
        let dir = "/etc/systemd/system";
        let mut seen = 0;
        for name in self.root.list(dir) {
            if seen >= MANAGED_UNITS_MAX {
                break;
            }
            let r = UnitRef {
                location: Location::Host,
                name,
            };
            if !r.name.ends_with(".service")
                || crate::systemd::name::validate_unit_name(&r.name).is_err()
                || st.units.contains_key(&r.key())
            {
                continue;
            }
            let path = self.root.path(&format!("{dir}/{}", r.name));
            // A link (an alias, a unit of a package) is never ours: the agent writes files.
            let small_file = std::fs::symlink_metadata(&path)
                .is_ok_and(|m| m.is_file() && m.len() <= MANAGED_UNIT_BYTES_MAX);
            if !small_file {
                continue;
            }
            let managed =
                std::fs::read_to_string(&path).is_ok_and(|t| crate::systemd::unit::is_managed(&t));
            if managed {
                seen += 1;
                let u = self.observe_unit(&r);
                st.units.insert(r.key(), u);
            }
        }
    }

    /// The LISTEN ports of the host's network namespace and of each running container a
    /// watched unit lives in.
    fn observe_listening(&self, st: &mut HostState) {
        let host: String = ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .filter_map(|p| self.root.read(p))
            .collect();
        if !host.is_empty() {
            st.listening
                .insert(Location::Host.key(), listening::parse(&host));
        }
        let vmids: std::collections::BTreeSet<u32> = self
            .units
            .iter()
            .filter_map(|r| match r.location {
                Location::Container(v) => Some(v),
                Location::Host => None,
            })
            .filter(|v| {
                st.containers
                    .get(v)
                    .is_some_and(|c| c.state == RunState::Running)
            })
            .collect();
        for v in vmids {
            let loc = Location::Container(v);
            if let Ok(o) = self.at(loc, &["cat", "/proc/net/tcp", "/proc/net/tcp6"]) {
                if !o.stdout.is_empty() {
                    st.listening.insert(loc.key(), listening::parse(&o.stdout));
                }
            }
        }
    }

    /// UUID and serial of the GPUs on `nvidia`, by address: `nvidia-smi` asked again only when
    /// which GPUs are on `nvidia` changed (it takes seconds on a loaded host).
    fn nvml_ids(&self, devices: &BTreeMap<String, PciDevice>) -> NvmlIds {
        let Some(key) = on_nvidia(devices) else {
            return BTreeMap::new();
        };
        if let Some((k, ids)) = &*self.nvml.borrow() {
            if *k == key {
                return ids.clone();
            }
        }
        let ids = match self.cmd(&[
            &self.tools.nvidia_smi,
            "--query-gpu=pci.bus_id,uuid,serial",
            "--format=csv,noheader",
        ]) {
            Ok(o) if o.ok() => identity::nvidia_smi_ids(&o.stdout),
            _ => BTreeMap::new(),
        };
        *self.nvml.borrow_mut() = Some((key, ids.clone()));
        ids
    }

    /// ECC and row-remap counters of the GPUs on `nvidia` (`nvidia-smi`, at most every
    /// [`ECC_MAX_AGE`] while the same GPUs are on `nvidia`).
    fn nvml_ecc(&self, devices: &BTreeMap<String, PciDevice>) -> EccById {
        let Some(key) = on_nvidia(devices) else {
            return BTreeMap::new();
        };
        if let Some((at, k, ecc)) = &*self.ecc.borrow() {
            if *k == key && at.elapsed() < ECC_MAX_AGE {
                return ecc.clone();
            }
        }
        let query = format!("--query-gpu={}", crate::host::health::ECC_QUERY);
        let ecc = match self.cmd(&[&self.tools.nvidia_smi, &query, "--format=csv,noheader"]) {
            Ok(o) if o.ok() => crate::host::health::parse_ecc(&o.stdout),
            _ => BTreeMap::new(),
        };
        *self.ecc.borrow_mut() = Some((std::time::Instant::now(), key, ecc.clone()));
        ecc
    }

    fn observe_state(&mut self) -> Result<HostState, LocalError> {
        // Where an observation's time goes (debug log): each part's end, in ms from the start.
        let t0 = std::time::Instant::now();
        let mut parts: Vec<(&str, u128)> = Vec::new();
        let mut lap = |name: &'static str| parts.push((name, t0.elapsed().as_millis()));
        let mut devices = pci::scan(&self.root, &self.filter);
        lap("pci");
        self.health.set_gpus(
            devices
                .values()
                .filter(|d| d.vendor == self.filter.vendor && d.is_display())
                .map(|d| d.address.clone())
                .collect(),
        );
        // The holder scan (most of an observation on a busy host) runs beside the parts below,
        // which neither need nor change the devices' holders.
        let scan = HolderScan::start(&self.root, holders::all_nodes(&self.root, &devices));
        for (addr, (uuid, serial)) in self.nvml_ids(&devices) {
            if let Some(d) = devices.get_mut(&addr) {
                d.identity.uuid = Some(uuid);
                d.identity.serial = serial;
            }
        }
        for (addr, ecc) in self.nvml_ecc(&devices) {
            if let Some(d) = devices.get_mut(&addr) {
                d.health.ecc = Some(ecc);
            }
        }
        lap("nvml");
        let log = self.kernel_log.read(&self.root);
        lap("kernel log");
        let mut st = HostState {
            node_name: self.node(),
            pci_devices: devices,
            pci_drivers: pci::drivers(&self.root),
            iommu: iommu::observe_with(&self.root, &log),
            confidential: confidential::observe(&self.root, &log),
            boot: boot::observe(&self.root, &self.state_dir),
            nvidia: self.observe_nvidia(),
            gpu_events: crate::host::health::parse_gpu_events(&log),
            ..HostState::default()
        };
        lap("iommu, boot, nvidia");
        if self.root.path("/etc/pve").is_dir() {
            st.containers = pve::containers(self)?;
            st.vms = pve::vms(self)?;
            st.pci_mappings = pve::mappings(self, &st.node_name);
        }
        lap("proxmox");
        for (addr, hs) in scan.finish() {
            if let Some(d) = st.pci_devices.get_mut(&addr) {
                d.holders = hs;
            }
        }
        lap("holders");
        self.observe_watched_units(&mut st);
        self.observe_holder_units(&mut st);
        self.observe_managed_host_units(&mut st);
        lap("units");
        self.observe_listening(&mut st);
        let containers = st.containers.clone();
        st.preflight = self.observe_preflight(&|loc| match loc {
            Location::Host => true,
            Location::Container(v) => containers
                .get(&v)
                .is_some_and(|c| c.state == RunState::Running),
        });
        st.p2p_probes = probe::load_cache(&self.state_dir);
        st.notes = absent::notes(&self.root, &st, &self.filter.vendor);
        match ledger::load(&self.state_dir) {
            Ok(l) => st.gpu_ledger = l,
            Err(note) => st.notes.push(note),
        }
        lap("listening, preflight, state files");
        tracing::debug!(?parts, "observe: parts done at (ms)");
        Ok(st)
    }

    /// The NVIDIA driver's module and userspace versions and the uvm device's major.
    fn observe_nvidia(&self) -> NvidiaState {
        NvidiaState {
            module_version: self
                .root
                .read("/sys/module/nvidia/version")
                .map(|s| s.trim().to_string())
                .or_else(|| {
                    self.root
                        .read("/proc/driver/nvidia/version")
                        .and_then(|t| module_version(&t))
                }),
            uvm_major: self
                .root
                .read("/proc/devices")
                .and_then(|t| uvm_major(&t))
                .unwrap_or(NvidiaState::default().uvm_major),
            userspace_version: ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
                .iter()
                .find_map(|d| pve::nvml_version(self.root.list(d).iter().map(String::as_str))),
        }
    }

    /// The watched units and their servers (a unit in a container that is not running is
    /// inactive, not asked).
    fn observe_watched_units(&self, st: &mut HostState) {
        for r in &self.units {
            let running_container = match r.location {
                Location::Host => true,
                Location::Container(v) => st
                    .containers
                    .get(&v)
                    .is_some_and(|c| c.state == RunState::Running),
            };
            let mut u = if running_container {
                self.observe_unit(r)
            } else {
                Unit {
                    active_state: "inactive".into(),
                    sub_state: "dead".into(),
                    ..Unit::default()
                }
            };
            u.server = self.observe_server(r, &u);
            st.units.insert(r.key(), u);
        }
    }

    /// After a binding step, re-reads only the device it wrote to, and of it only what a binding
    /// changes (`pci::reread_binding`): `driver_override`, unbind, `drivers_probe` of one
    /// address change that device's driver, override and minor, and nothing else. Its holders are kept
    /// while its driver is the same (the unbind step scans them again right before it writes)
    /// and cleared when the driver changed (the old device nodes are gone). Anything else, a
    /// `modprobe` included (it may bind devices waiting on an override), asks for a full
    /// observation — but the ledger: the agent's own file, read back as it was just written
    /// (the layout guard writes it on every spec change: a full look after it cost a move of two
    /// GPUs in the qemu host about 160 ms).
    fn refresh_state(&self, step: &Step, st: &HostState) -> Option<HostState> {
        if let Step::WriteLedger { ledger } = step {
            let l = crate::host::ledger::Ledger::parse(&ledger.render())?;
            let mut st = st.clone();
            st.gpu_ledger = Some(l);
            return Some(st);
        }
        let address = match step {
            Step::SetDriverOverride { address, .. }
            | Step::Unbind { address, .. }
            | Step::Probe { address }
            | Step::ReturnToHostDriver { address } => address,
            _ => return None,
        };
        let old = st.pci_devices.get(address)?;
        let mut d = pci::reread_binding(&self.root, address, old)?;
        if old.driver != d.driver {
            d.holders.clear();
        }
        let mut st = st.clone();
        st.pci_devices.insert(address.clone(), d);
        Some(st)
    }

    /// Applies one step: the one place this backend writes to the host.
    fn step(&mut self, step: &Step) -> Result<StepOutcome, LocalError> {
        let mut leftovers: Vec<files::Leftover> = vec![];
        match step {
            Step::StopUnit { unit } => self.unit_action(unit, "stop")?,
            Step::StartUnit { unit, restart } => {
                self.unit_action(unit, if *restart { "restart" } else { "start" })?
            }
            Step::DaemonReload { location } => self.daemon_reload(*location)?,
            Step::WriteUnit { unit, content } => leftovers = self.write_unit(unit, content)?,
            Step::StopContainer { vmid } => self.pct_simple("stop", *vmid)?,
            Step::StartContainer { vmid } => self.pct_simple("start", *vmid)?,
            Step::LoadDriver { driver } => {
                let o = self.cmd(&[&self.tools.modprobe, driver])?;
                if !o.ok() {
                    return Err(LocalError::failed(format!("modprobe {driver}"), &o.stderr));
                }
            }
            Step::SetDriverOverride { address, driver } => {
                // An empty write (a newline) clears the override.
                let v = driver.clone().unwrap_or_else(|| "\n".into());
                self.sysfs(
                    &format!("/sys/bus/pci/devices/{address}/driver_override"),
                    &v,
                )?;
            }
            Step::Unbind { address, driver } => self.unbind(address, driver)?,
            Step::ReturnToHostDriver { address } => {
                self.sysfs(
                    &format!("/sys/bus/pci/devices/{address}/driver_override"),
                    "\n",
                )?;
                self.sysfs("/sys/bus/pci/drivers_probe", address)?;
            }
            Step::Probe { address } => self.probe(address)?,
            Step::ResetGpu { address, ledger: l } => {
                let reset = self.sysfs(&format!("/sys/bus/pci/devices/{address}/reset"), "1");
                let Err(e) = reset else {
                    leftovers = ledger::store(&self.state_dir, l)?;
                    return Ok(StepOutcome {
                        detail: None,
                        leftovers: leftovers.iter().map(|l| l.to_string()).collect(),
                    });
                };
                // The kernel refused (no method it may use now, or the device did not come
                // back): recorded as escalated, so no later pass tries again.
                let why = e.to_string();
                let failed = l.with_reset_failed(address, &why);
                leftovers = ledger::store(&self.state_dir, &failed)?;
                return Ok(StepOutcome {
                    detail: Some(format!(
                        "the reset failed, the quarantine is escalated: {why}"
                    )),
                    leftovers: leftovers.iter().map(|l| l.to_string()).collect(),
                });
            }
            Step::SetContainerGpus { vmid, minors } => {
                leftovers = self.set_container_gpus(*vmid, minors)?
            }
            Step::SetPciMapping { mapping, entries } => {
                leftovers = self.set_pci_mapping(mapping, entries)?
            }
            Step::ProbeP2p {
                location,
                python,
                user,
                gpus,
                cuda_indices,
            } => {
                return self
                    .run_probe(*location, python, user.as_deref(), gpus, cuda_indices)
                    .map(|d| StepOutcome {
                        detail: Some(d),
                        leftovers: vec![],
                    });
            }
            Step::SaveReadyUnit { unit, content } => {
                leftovers = self.write_state(unit, "ready", content)?
            }
            Step::MarkUnitFailed { unit, hash } => {
                leftovers = self.write_state(unit, "failed", hash)?
            }
            Step::RemoveUnit { unit } => self.remove_unit(unit)?,
            Step::WriteLedger { ledger } => leftovers = ledger::store(&self.state_dir, ledger)?,
            Step::SetKernelArgs {
                bootloader,
                present,
                absent,
            } => leftovers = self.set_kernel_args(*bootloader, present, absent)?,
            Step::RefreshBootloader { bootloader } => {
                leftovers = self.refresh_bootloader(*bootloader)?
            }
            Step::Reboot { boot_id } => leftovers = self.reboot(boot_id)?,
            Step::WaitReady { .. } => {}
        }
        Ok(StepOutcome {
            detail: None,
            leftovers: leftovers.iter().map(|l| l.to_string()).collect(),
        })
    }

    /// Unbinds a GPU from `driver`, unless a process holds it (checked right before the write).
    fn unbind(&self, address: &str, driver: &str) -> Result<(), LocalError> {
        let dev =
            pci::read_for_binding(&self.root, address).ok_or_else(|| LocalError::NoDevice {
                address: address.to_string(),
            })?;
        if dev.driver.as_deref() != Some(driver) {
            return Ok(());
        }
        let mut one = std::collections::BTreeMap::new();
        one.insert(address.to_string(), dev);
        let hs = holders::scan(&self.root, &one);
        if let Some(h) = hs.get(address).filter(|h| !h.is_empty()) {
            return Err(LocalError::InUse {
                address: address.to_string(),
                holders: h.iter().map(|h| h.to_string()).collect(),
            });
        }
        self.sysfs(
            &format!("/sys/bus/pci/devices/{address}/driver/unbind"),
            address,
        )?;
        Ok(())
    }

    /// `drivers_probe` for a device, then checks that it landed on its `driver_override`.
    fn probe(&self, address: &str) -> Result<(), LocalError> {
        self.sysfs("/sys/bus/pci/drivers_probe", address)?;
        let dev =
            pci::read_for_binding(&self.root, address).ok_or_else(|| LocalError::NoDevice {
                address: address.to_string(),
            })?;
        // drivers_probe reports success even when no driver took the device.
        if let Some(want) = &dev.driver_override {
            if dev.driver.as_deref() != Some(want.as_str()) {
                return Err(LocalError::WrongDriver {
                    address: address.to_string(),
                    bound: dev.driver.clone(),
                    want: want.clone(),
                });
            }
        }
        Ok(())
    }

    /// Makes the GPU lines of `/etc/pve/lxc/<vmid>.conf` give exactly `minors`, under the
    /// container's config lock.
    fn set_container_gpus(
        &self,
        vmid: u32,
        minors: &std::collections::BTreeSet<u32>,
    ) -> Result<Vec<files::Leftover>, LocalError> {
        let uvm = self
            .root
            .read("/proc/devices")
            .and_then(|t| uvm_major(&t))
            .unwrap_or(NvidiaState::default().uvm_major);
        let path = self.root.path(&format!("/etc/pve/lxc/{vmid}.conf"));
        let lock = self
            .root
            .path(&format!("/run/lock/lxc/pve-config-{vmid}.lock"));
        files::with_flock(&lock, self.lock_timeout, || {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| LocalError::io("cannot read", &path, e))?;
            let mut cfg = LxcConfig::parse(&text);
            let desired = DesiredGpuMounts {
                minors: minors.clone(),
                uvm_major: uvm,
                default_style: MountStyle::MountEntry,
            };
            if cfg.set_gpu_mounts(&desired) {
                return files::write_atomic(&path, &cfg.render());
            }
            Ok(vec![])
        })
    }

    /// Makes this node's entries of `mapping` in `/etc/pve/mapping/pci.cfg` exactly `entries`,
    /// under the cluster lock of that file.
    fn set_pci_mapping(
        &self,
        mapping: &str,
        entries: &[crate::proxmox::pci_cfg::MapEntry],
    ) -> Result<Vec<files::Leftover>, LocalError> {
        let node = self.node();
        let path = self.root.path("/etc/pve/mapping/pci.cfg");
        let lock = self.root.path("/etc/pve/priv/lock/file-mapping_pci_cfg");
        let (mut left, stale) = files::with_cfs_lock(&lock, self.lock_timeout, || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut cfg = PciCfg::parse(&text);
            if cfg
                .try_set_node_entries(mapping, &node, entries)
                .map_err(|e| LocalError::Edit(e.to_string()))?
            {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| LocalError::io("cannot create", dir, e))?;
                }
                return files::write_atomic(&path, &cfg.render());
            }
            Ok(vec![])
        })?;
        left.extend(stale);
        Ok(left)
    }

    fn pct_simple(&self, action: &str, vmid: u32) -> Result<(), LocalError> {
        let o = self.cmd(&[&self.tools.pct, action, &vmid.to_string()])?;
        if !o.ok() {
            return Err(LocalError::failed(
                format!("pct {action} {vmid}"),
                &o.stderr,
            ));
        }
        Ok(())
    }
}

/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ...` (or `... Open Kernel Module
/// for x86_64  580.159.04  Release Build ...`) -> `580.159.04`.
pub fn module_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    let after = line.split("Kernel Module").nth(1)?;
    after
        .split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

/// The `nvidia-uvm` major from `/proc/devices`.
pub fn uvm_major(text: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        let (num, name) = l.trim().split_once(' ')?;
        (name.trim() == "nvidia-uvm")
            .then(|| num.parse().ok())
            .flatten()
    })
}

impl Host for LocalHost {
    /// One look at the whole host within [`LocalHost::observe_budget`]. A look that ran out of
    /// it is an error, not a partial state: a state missing a container's holders could let
    /// the planner unbind a GPU in use.
    fn observe(&mut self) -> Result<HostState, HostError> {
        tracing::debug!("observe: the whole host");
        let start = std::time::Instant::now();
        self.observe_until.set(Some(start + self.observe_budget));
        let st = self.observe_state();
        self.observe_until.set(None);
        if start.elapsed() >= self.observe_budget {
            return Err(HostError::Other(
                LocalError::ObserveBudget {
                    seconds: self.observe_budget.as_secs(),
                }
                .to_string(),
            ));
        }
        st.map_err(|e| HostError::Other(e.to_string()))
    }

    fn apply(&mut self, step: &Step) -> Result<StepOutcome, HostError> {
        self.step(step).map_err(|e| e.into_host_error(step))
    }

    fn refresh(&mut self, step: &Step, st: &HostState) -> Result<Option<HostState>, HostError> {
        let done = self.refresh_state(step, st);
        tracing::debug!(done = done.is_some(), "refresh after {}", step.kind());
        Ok(done)
    }

    fn sleep(&mut self, secs: u64) {
        std::thread::sleep(Duration::from_secs(secs));
    }

    fn now(&self) -> u64 {
        crate::clock::system_time()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    fn watch_units(&mut self, units: &[UnitRef]) {
        self.units = units.to_vec();
    }

    fn health_mark(&mut self) -> Option<u64> {
        Some(self.health.mark(&self.root))
    }

    fn probe_ready(&mut self, unit: &UnitRef) -> Option<bool> {
        self.probe_health(unit, Duration::from_secs(2))
    }

    fn watch_preflight(&mut self, requests: &[PreflightRequest]) {
        self.preflight = requests.to_vec();
    }
}

#[cfg(test)]
mod tests;
