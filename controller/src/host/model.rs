//! The host model: everything the agent observes about a GPU host, in one value.
//!
//! `HostState` is produced by a backend's `observe()` (real sysfs/proc/pve, or the
//! simulated twin) and consumed by the pure planner. It knows nothing of Kubernetes.
//! Every field is plain data so it can be printed (`gpuplane observe`), diffed and
//! generated at random in property tests.

pub use super::health::{GpuEvent, PcieHealth};
pub use super::identity::GpuIdentity;
use crate::proxmox::lxc_conf::GpuMounts;
use crate::proxmox::pci_cfg::MapEntry;
use crate::sglang::StartupPhase;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Everything observed on one host.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostState {
    /// The host's node name (Proxmox node / Kubernetes node).
    pub node_name: String,
    /// GPUs (and devices sharing their IOMMU groups), by full PCI address.
    #[serde(default)]
    pub pci_devices: BTreeMap<String, PciDevice>,
    /// PCI drivers registered with the kernel (`/sys/bus/pci/drivers/*`).
    #[serde(default)]
    pub pci_drivers: BTreeSet<String>,
    #[serde(default)]
    pub iommu: IommuState,
    #[serde(default)]
    pub nvidia: NvidiaState,
    /// Proxmox LXC containers, by vmid.
    #[serde(default)]
    pub containers: BTreeMap<u32, Container>,
    /// Proxmox VMs, by vmid.
    #[serde(default)]
    pub vms: BTreeMap<u32, Vm>,
    /// Proxmox PCI resource mappings (`/etc/pve/mapping/pci.cfg`): this node's map entries by mapping name.
    #[serde(default)]
    pub pci_mappings: BTreeMap<String, Vec<MapEntry>>,
    /// systemd units the agent looks at, by [`UnitRef::key`].
    #[serde(default)]
    pub units: BTreeMap<String, Unit>,
    /// Results of P2P correctness probes the agent ran (its cache).
    #[serde(default)]
    pub p2p_probes: Vec<P2pProbe>,
    /// TCP ports in LISTEN state per network namespace, by `Location::key` (`host`, `lxc-129`):
    /// the host's, and each running consumer container's. Absent: not looked at.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub listening: BTreeMap<String, BTreeSet<u16>>,
    /// Preflight reads for each server the agent was told about ([`PreflightRequest`]), by
    /// server id (`namespace/name`). Absent: the backend was asked for none, or cannot look.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub preflight: BTreeMap<String, PreflightFacts>,
    /// The agent's GPU ledger (`/var/lib/gpuplane/gpus.json`): what it last saw of each GPU
    /// and which slice owned it. `None`: never written (or unreadable, said in `notes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_ledger: Option<super::ledger::Ledger>,
    /// What decides whether a confidential (SEV-SNP) VM can start here (`host/local/confidential.rs`).
    #[serde(default, skip_serializing_if = "ConfidentialFacts::is_empty")]
    pub confidential: ConfidentialFacts,
    /// The kernel's command line as booted and as the bootloader will boot it next
    /// (`host/local/boot.rs`).
    #[serde(default, skip_serializing_if = "BootFacts::is_empty")]
    pub boot: BootFacts,
    /// What this host lacks that a person should know (no GPUs, no Proxmox, no systemd):
    /// situations that are normal on some hosts, said plainly, never an error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The GPU driver's events in the kernel log (Xid lines, fallen off the bus), oldest first
    /// (`host/health.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_events: Vec<GpuEvent>,
}

/// One PCI function.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PciDevice {
    /// Full address, `0000:01:00.0`.
    pub address: String,
    /// Vendor ID, 4 lower-case hex digits without `0x`.
    pub vendor: String,
    /// Device ID, 4 lower-case hex digits without `0x`.
    pub device: String,
    /// Class code, 6 hex digits (`030000` VGA, `030200` 3D controller).
    pub class: String,
    /// Subsystem `vendor:device`, when the device reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem: Option<String>,
    /// NUMA node, -1 when the platform does not say.
    #[serde(default = "minus_one")]
    pub numa_node: i32,
    /// IOMMU group number; `None` when the IOMMU is off or exposes no groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu_group: Option<u32>,
    /// Bound driver (the `driver` link), `None` when unbound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// `driver_override`, `None` when it reads `(null)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_override: Option<String>,
    /// NVIDIA device minor (`/dev/nvidiaN`), from `/proc/driver/nvidia/gpus/<addr>/information`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_minor: Option<u32>,
    /// Processes holding the device (`/dev/nvidiaN`, or `/dev/vfio/<group>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
    /// Which physical device this is beyond its address (`host/local/identity.rs`).
    #[serde(default, skip_serializing_if = "GpuIdentity::is_empty")]
    pub identity: GpuIdentity,
    /// What the kernel tells of its health: AER counters, link, config space answering
    /// (`host/health.rs`; judged by `crate::health`).
    #[serde(default, skip_serializing_if = "PcieHealth::is_empty")]
    pub health: PcieHealth,
}

fn minus_one() -> i32 {
    -1
}

impl PciDevice {
    /// Whether the class code says display controller (`03xxxx`).
    pub fn is_display(&self) -> bool {
        self.class.starts_with("03")
    }

    /// `vendor:device` (`10de:2bb1`), as Proxmox's mappings and the GPU ledger name a model.
    /// Built in one allocation: the planner makes one per GPU and plan.
    pub fn model_id(&self) -> String {
        // One allocation of the exact size (`format!` grows its buffer through the
        // formatting machinery: several times the cost, for a name made every plan).
        [self.vendor.as_str(), ":", &self.device].concat()
    }
}

/// A process that holds a device open.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    pub pid: u32,
    pub command: String,
    /// The LXC container the process runs in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<u32>,
    /// The VM (qemu process) that holds it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<u32>,
    /// The host systemd unit the process belongs to (from its cgroup), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

impl Holder {
    /// The systemd unit the process runs in, where it runs (the host's, or its container's own
    /// systemd's); `None` for a VM's process or one in no service.
    pub fn unit_ref(&self) -> Option<UnitRef> {
        if self.vm.is_some() {
            return None;
        }
        Some(UnitRef {
            location: match self.container {
                Some(c) => Location::Container(c),
                None => Location::Host,
            },
            name: self.unit.clone()?,
        })
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.command)?;
        if let Some(c) = self.container {
            write!(f, " in container {c}")?;
        }
        if let Some(v) = self.vm {
            write!(f, " of VM {v}")?;
        }
        if let Some(u) = &self.unit {
            write!(f, " of unit {u}")?;
        }
        Ok(())
    }
}

/// IOMMU summary.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IommuState {
    /// IOMMU-related kernel command line options (`iommu=pt`, `intel_iommu=on`, ...).
    #[serde(default)]
    pub cmdline: Vec<String>,
    /// From the boot line "iommu: Default domain type: ...".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_domain_type: Option<String>,
    /// Domain type of each group (`identity`, `DMA`, `DMA-FQ`, `blocked`, `unmanaged`).
    #[serde(default)]
    pub group_types: BTreeMap<u32, String>,
    /// Host-wide fact from the platform: SEV-SNP active (forces translation).
    #[serde(default)]
    pub sev_snp: bool,
    /// Recent `IO_PAGE_FAULT` log lines per device address.
    #[serde(default)]
    pub page_faults: BTreeMap<String, u32>,
    /// Things a person should know (no groups exposed, invalid kernel options).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// How the IOMMU treats device DMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IommuMode {
    /// No IOMMU groups: IOMMU off or not exposed.
    Off,
    /// Identity domains (`iommu=pt`): DMA is not translated.
    Passthrough,
    /// DMA/DMA-FQ domains: every DMA is translated (P2P may break).
    Translated,
}

impl IommuState {
    /// The mode, from the group types (the kernel's own word). No groups means no IOMMU that
    /// translates device DMA here, whatever the boot log's default domain type says (the kernel
    /// prints it even when no IOMMU hardware is present).
    pub fn mode(&self) -> IommuMode {
        let translated = |t: &str| t == "DMA" || t == "DMA-FQ";
        if self.group_types.values().any(|t| translated(t)) {
            IommuMode::Translated
        } else if !self.group_types.is_empty() {
            IommuMode::Passthrough
        } else {
            IommuMode::Off
        }
    }
}

/// NVIDIA driver facts of the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NvidiaState {
    /// Kernel module version (`/sys/module/nvidia/version`), `None` when not loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_version: Option<String>,
    /// Major number of `/dev/nvidia-uvm` (differs per host).
    #[serde(default = "default_uvm_major")]
    pub uvm_major: u32,
    /// The NVIDIA userspace installed on the host (its `libnvidia-ml.so.<version>`): differs
    /// from the loaded module after a driver upgrade until the host reboots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userspace_version: Option<String>,
}

fn default_uvm_major() -> u32 {
    511
}

impl Default for NvidiaState {
    fn default() -> Self {
        NvidiaState {
            module_version: None,
            uvm_major: default_uvm_major(),
            userspace_version: None,
        }
    }
}

/// Run state of a container or VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Running,
    #[default]
    Stopped,
}

/// A Proxmox LXC container.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub vmid: u32,
    pub state: RunState,
    /// GPU device lines of its config's main section.
    pub gpu_mounts: GpuMounts,
    /// NVIDIA userspace driver version inside the container, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_userspace_version: Option<String>,
    /// A privileged container (its config lacks `unprivileged: 1`): its root is the host's
    /// root. `false` also where it is not known (the webhook's stand-in host).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
}

/// A Proxmox VM.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Vm {
    pub vmid: u32,
    pub state: RunState,
    /// PCI mappings it references (`hostpciN: mapping=<name>`).
    #[serde(default)]
    pub pci_mappings: Vec<String>,
    /// Its `amd-sev:` type (`std`, `es`, `snp`), when it is a confidential VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amd_sev: Option<String>,
}

impl Vm {
    /// Whether it is an SEV-SNP confidential VM.
    pub fn is_snp(&self) -> bool {
        self.amd_sev.as_deref() == Some("snp")
    }
}

/// The host facts a confidential VM with passed-through GPUs depends on, each read the way the
/// kernel and Proxmox decide it. Facts only: `status/confidential.rs` judges them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfidentialFacts {
    /// `/sys/module/kvm_amd/parameters/sev_snp`; `None`: kvm_amd is not loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_sev_snp: Option<bool>,
    /// `/dev/sev` (the PSP's device) exists.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dev_sev: bool,
    /// The SEV firmware's SNP API version (`major.minor`) from the kernel log
    /// (`ccp ...: SEV-SNP API:1.55 build:21`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snp_api: Option<String>,
    /// The kernel's own refusals, as logged (`AMD-Vi: SNP: IOMMU disabled or configured in
    /// passthrough mode, SNP cannot be supported.`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_refusals: Vec<String>,
    /// Proxmox's view (`/run/qemu-server/host-hw-capabilities.json`, `amd-sev.sev-support-snp`):
    /// read from CPUID only, so it may say yes where the kernel said no.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxmox_snp: Option<bool>,
    /// `/sys/module/vfio_pci/parameters/disable_idle_d3`; `None`: vfio-pci not loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vfio_disable_idle_d3: Option<bool>,
}

impl ConfidentialFacts {
    pub fn is_empty(&self) -> bool {
        *self == ConfidentialFacts::default()
    }
}

/// Where a unit lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Location {
    Host,
    Container(u32),
}

impl Location {
    /// `host` or `lxc-<vmid>`: the prefix of [`UnitRef::key`], and the key of
    /// [`HostState::listening`].
    pub fn key(&self) -> String {
        match self {
            Location::Host => "host".into(),
            Location::Container(v) => format!("lxc-{v}"),
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Host => write!(f, "host"),
            Location::Container(v) => write!(f, "container {v}"),
        }
    }
}

/// A unit name at a location.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnitRef {
    pub location: Location,
    /// Full unit name, `sglang-qwen.service`.
    pub name: String,
}

impl UnitRef {
    /// The unit of a map key ([`UnitRef::key`]); `None` for anything else.
    pub fn from_key(key: &str) -> Option<UnitRef> {
        let (loc, name) = key.split_once('/')?;
        let location = match loc {
            "host" => Location::Host,
            l => Location::Container(l.strip_prefix("lxc-")?.parse().ok()?),
        };
        Some(UnitRef {
            location,
            name: name.to_string(),
        })
    }

    /// Map key: `host/<name>` or `lxc-<vmid>/<name>`.
    pub fn key(&self) -> String {
        match self.location {
            Location::Host => ["host/", self.name.as_str()].concat(),
            Location::Container(v) => {
                use std::fmt::Write as _;
                let mut k = String::with_capacity(15 + self.name.len());
                // Writing to a String cannot fail.
                let _ = write!(k, "lxc-{v}/");
                k.push_str(&self.name);
                k
            }
        }
    }
}

impl std::fmt::Display for UnitRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} on {}", self.name, self.location)
    }
}

/// A systemd unit and, for inference servers, what its server shows.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unit {
    /// `ActiveState`: active, activating, inactive, failed, ...
    pub active_state: String,
    /// `SubState`: running, exited, dead, ...
    #[serde(default)]
    pub sub_state: String,
    /// The unit file's content, `None` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// systemd's `NeedDaemonReload`: the file on disk differs from what systemd loaded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_reload: bool,
    /// The main process (running, or the last one if it failed) was started from an older
    /// unit than the one loaded now: a crash between daemon-reload and restart leaves this
    /// behind, and a failure then says nothing about the current unit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub running_stale: bool,
    /// The agent's copy of the last unit that reached Ready (`/var/lib/gpuplane/units/<name>.ready`
    /// where the unit lives), for `rollback: Auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ready: Option<String>,
    /// SHA-256 of a unit the agent saw fail to start (`/var/lib/gpuplane/units/<name>.failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_hash: Option<String>,
    /// Exit status of the main process after a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    /// Last journal lines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_tail: Vec<String>,
    /// When each of `log_tail`'s lines was logged (seconds since the epoch), where known.
    #[serde(skip)]
    pub log_times: Vec<Option<u64>>,
    /// When the main process started (seconds since the epoch), where known.
    #[serde(skip)]
    pub started_at: Option<u64>,
    /// What the server answers and uses, when the unit runs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerObservation>,
}

impl Unit {
    pub fn is_active(&self) -> bool {
        self.active_state == "active" || self.active_state == "activating"
    }
}

/// HTTP-level state of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum HttpState {
    /// Nothing listens (SGLang opens the port only after loading and graph capture).
    #[default]
    Refused,
    /// Listening, `/health_generate` answers 503 (warm-up not done).
    Starting,
    /// `/health_generate` answers 200.
    Healthy,
}

/// What an inference server shows from outside.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerObservation {
    /// The latest startup phase seen in the journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<StartupPhase>,
    /// When the running process logged the line that began `phase` (seconds since the epoch),
    /// where the journal says: the stall clock starts there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<u64>,
    pub http: HttpState,
    /// The address (no port) the agent reached the server at, as the host side names it: a
    /// host server's loopback or own address, a container's address from the host's view
    /// (`host/local/container_net.rs`); `None` while the unit is not active or when the agent
    /// must not go there. Prometheus service discovery starts from it (`discovery/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached_at: Option<String>,
    /// Model names `/v1/models` lists.
    #[serde(default)]
    pub models: Vec<String>,
    /// Memory used per GPU, MiB, in CUDA order.
    #[serde(default)]
    pub gpu_memory_mib: Vec<u64>,
    /// Effective settings reported by `/server_info` (tp_size, speculative_algorithm, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub server_info: BTreeMap<String, String>,
    /// The smoke test's outcome for the unit running now (servers with a `smokeTest`, once Ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoke: Option<SmokeResult>,
}

/// One cached P2P correctness probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct P2pProbe {
    /// GPU addresses probed, sorted.
    pub gpus: Vec<String>,
    /// Binding and IOMMU state the result is valid for; a change invalidates it.
    pub key: String,
    /// Pairs whose copied data differed (`a->b`).
    #[serde(default)]
    pub failing_pairs: Vec<String>,
    /// Where it ran (the host, or a container through `pct exec`). The result is trusted only
    /// there: a container's processes write the probe's answer, so its root could otherwise
    /// decide P2P for a server on the host or in another container. `None` (a cache written
    /// before this field): trusted nowhere, probed again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

impl P2pProbe {
    /// Whether this is the verdict for `gpus` probed at `location` (one per pair of them).
    pub fn is_for(&self, gpus: &[String], location: Option<Location>) -> bool {
        self.gpus == gpus && self.location == location
    }
}

impl HostState {
    /// The devices of each IOMMU group, by group number: one pass over the devices, so that
    /// what looks at a GPU's group mates (companions, mapping paths) stays linear in the GPUs.
    pub fn by_iommu_group(&self) -> BTreeMap<u32, Vec<&PciDevice>> {
        let mut groups: BTreeMap<u32, Vec<&PciDevice>> = BTreeMap::new();
        for d in self.pci_devices.values() {
            if let Some(g) = d.iommu_group {
                groups.entry(g).or_default().push(d);
            }
        }
        groups
    }

    /// The driver the device at `address` is bound to, `none` when unbound or absent (as the
    /// metrics and the slices' status show it).
    pub fn driver_name(&self, address: &str) -> String {
        self.pci_devices
            .get(address)
            .and_then(|d| d.driver.clone())
            .unwrap_or_else(|| "none".into())
    }

    /// Devices the GPU filter selects (display class, given vendor), by address.
    pub fn gpus<'a, 'v>(
        &'a self,
        vendor: &'v str,
    ) -> impl Iterator<Item = &'a PciDevice> + use<'a, 'v> {
        self.pci_devices
            .values()
            .filter(move |d| d.is_display() && d.vendor == vendor)
    }

    /// The unit at a ref, if observed.
    pub fn unit(&self, r: &UnitRef) -> Option<&Unit> {
        self.units.get(&r.key())
    }

    /// The cache key for a P2P probe over `gpus`: their drivers plus the IOMMU mode and group types.
    pub fn p2p_key(&self, gpus: &[String]) -> String {
        use std::fmt::Write as _;
        let mut key = format!("iommu={:?}", self.iommu.mode());
        for g in gpus {
            let d = self.pci_devices.get(g);
            let driver = d.and_then(|d| d.driver.as_deref()).unwrap_or_default();
            let group = d
                .and_then(|d| d.iommu_group)
                .and_then(|n| self.iommu.group_types.get(&n))
                .map_or("", String::as_str);
            // Writing to a String cannot fail.
            let _ = write!(key, ";{g}={driver}/{group}");
        }
        key
    }

    /// The cached probe result valid for `gpus` now, for a server at `location`, if any. The
    /// key is made only when a probe of these GPUs there is cached (the planner asks every plan).
    pub fn p2p_probe(&self, gpus: &[String], location: Location) -> Option<&P2pProbe> {
        let mut probes = self
            .p2p_probes
            .iter()
            .filter(|p| p.is_for(gpus, Some(location)))
            .peekable();
        probes.peek()?;
        let key = self.p2p_key(gpus);
        probes.find(|p| p.key == key)
    }
}

/// What preflight reads for one server, where the server will run: the backend reads exactly
/// this and nothing else (built from the validated spec by `desired::preflight_request`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreflightRequest {
    /// The server, `namespace/name`.
    pub server: String,
    /// Where the server runs: the reads happen there (inside the container for `Container`).
    pub location: Location,
    /// The interpreter, which must import `sglang`.
    pub python: String,
    /// The unit's user (`servers.user`; `None`: root): the import check runs as it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The model directory; `None` for a hub id (nothing local to read).
    pub model_dir: Option<String>,
    /// The draft model's directory, when speculative decoding names one.
    pub draft_dir: Option<String>,
    /// Paths the unit's environment names (`CUDA_HOME`, `LD_LIBRARY_PATH` entries): `(variable, path)`.
    pub env_paths: Vec<(String, String)>,
    /// The slice's GPUs (PCI addresses): their memory is read.
    pub gpus: Vec<String>,
    /// The only directories model reads may happen under (the slice's `modelRoots`); empty:
    /// no limit (a host without tenancy rules, the CLI on files).
    pub roots: Vec<String>,
    /// The server's unit: its smoke test runs against what this unit serves, once Ready.
    pub unit: UnitRef,
    /// The model name requests use (`--served-model-name`).
    pub served_name: String,
    /// The smoke test to run once the unit is Ready, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoke: Option<gpuplane_crds::SmokeTestSpec>,
}

/// The outcome of a smoke test against one unit.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmokeResult {
    /// SHA-256 of the unit file the server ran when tested.
    pub unit_hash: String,
    /// Requests sent.
    pub requests: u32,
    /// What failed, one line per request; empty: passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
}

/// What preflight read for one server. Facts only: the planner judges them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreflightFacts {
    /// The interpreter and what it imports.
    pub interpreter: InterpreterFacts,
    /// The model directory, when the model is local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::modelfiles::DirFacts>,
    /// The draft model directory, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<crate::modelfiles::DirFacts>,
    /// Environment paths that do not exist where the server runs: `CUDA_HOME=/usr/local/cuda`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_paths: Vec<String>,
    /// Total memory of each slice GPU, MiB, by PCI address; empty when the host cannot tell.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_memory_mib: BTreeMap<String, u64>,
}

/// The interpreter as preflight found it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterpreterFacts {
    /// Why it cannot run SGLang (missing, `import sglang` fails); `None`: it imports sglang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sglang: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<String>,
    /// CUDA version torch was built with (`torch.version.cuda`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
}

/// The kernel command line: what the running kernel was booted with, what the bootloader's
/// config gives the next boot, and the agent's record of its own edits of that config.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootFacts {
    /// The kernel's own arguments in `/proc/cmdline` (init's, after `--`, left out); `None`:
    /// not readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<Vec<String>>,
    /// `/proc/sys/kernel/random/boot_id`: a new one every boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The bootloader's config, found as Proxmox documents it; `None`: neither file exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<BootConfig>,
    /// The agent's record of its last edit and refresh (`/var/lib/gpuplane/kernel-args.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<KernelArgsRecord>,
}

impl BootFacts {
    pub fn is_empty(&self) -> bool {
        *self == BootFacts::default()
    }
}

/// A bootloader config file as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootConfig {
    pub bootloader: crate::bootloader::Bootloader,
    /// Its path on the host.
    pub path: String,
    /// The kernel arguments it gives the next boot (empty when `problem` is set); for GRUB with
    /// the drop-ins' words.
    #[serde(default)]
    pub args: Vec<String>,
    /// GRUB: the words each drop-in of `/etc/default/grub.d` adds (path, words); the agent edits
    /// only `path`, so a word it must remove that comes from a drop-in is a person's to remove.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop_ins: Vec<(String, Vec<String>)>,
    /// SHA-256 of the file's bytes.
    pub sha256: String,
    /// Why it cannot be read or edited with certainty (too large, a shell expansion, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// What the agent last did to the bootloader config: written before the file is renamed into
/// place (`written`), completed after the refresh command succeeded (`refreshed`, `bootId`).
/// A kill between the two leaves `written` equal to the file's hash and `refreshed` not: the
/// next plan runs the refresh again.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KernelArgsRecord {
    /// The config file edited.
    pub path: String,
    /// SHA-256 of the content the agent wrote.
    pub written: String,
    /// SHA-256 of the content the bootloader was last refreshed from by the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refreshed: Option<String>,
    /// The boot during which that refresh ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// `reboot: Auto`: the boot the agent asked the reboot from (written once `systemctl
    /// reboot` succeeded). In that boot no second reboot is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_from: Option<String>,
}
