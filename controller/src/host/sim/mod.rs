//! The simulated host: a YAML description that behaves like the kernel and the services.
//!
//! Binding follows `driver_override` / unbind / `drivers_probe` semantics (probe
//! "succeeds" even when nothing binds); a held GPU cannot be unbound; Proxmox files
//! are kept as raw text and edited through the same parsers the real backend uses;
//! systemd runs the unit it *loaded* (a changed file needs `daemon-reload`); an SGLang
//! unit is "run" by reading its ExecStart and Environment: it fails when its GPUs are
//! not visible, and on a host whose IOMMU translates DMA and whose P2P is corrupt it
//! hangs in NCCL init (P2P on) or after loading weights (custom all-reduce on), exactly
//! like the reference story. Time is a clock that only `sleep` advances, so runs are
//! deterministic.

mod server;

use super::model::*;
use super::{Host, HostError, StepOutcome};
use crate::proxmox::lxc_conf::{DesiredGpuMounts, LxcConfig, MountStyle};
use crate::proxmox::pci_cfg::PciCfg;
use crate::step::Step;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// How simulated services behave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Behaviour {
    /// GPU peer-to-peer copies are corrupted when the IOMMU translates DMA.
    pub p2p_corrupt: bool,
    /// Seconds from start to the first weight loading (process start, NCCL init).
    pub init_seconds: u64,
    pub load_seconds: u64,
    pub kv_seconds: u64,
    pub graph_seconds: u64,
    pub warmup_seconds: u64,
    /// GPU memory after process start, MiB per GPU.
    pub base_mib: u64,
    /// GPU memory with weights loaded, MiB per GPU.
    pub weights_mib: u64,
    /// KV cache, MiB per GPU.
    pub kv_mib: u64,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            p2p_corrupt: false,
            init_seconds: 10,
            load_seconds: 10,
            kv_seconds: 10,
            graph_seconds: 45,
            warmup_seconds: 5,
            base_mib: 757,
            weights_mib: 59_607,
            kv_mib: 32_768,
        }
    }
}

/// A PCI function of the simulated host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimDevice {
    pub address: String,
    pub vendor: String,
    pub device: String,
    pub class: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem: Option<String>,
    #[serde(default)]
    pub numa_node: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu_group: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_override: Option<String>,
    /// The driver the kernel picks when no override is set (`None`: none, or nvidia for NVIDIA GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_driver: Option<String>,
    /// The minor the nvidia driver gives this GPU when bound (visible only while bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
}

/// A container of the simulated host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimContainer {
    pub state: RunState,
    /// The raw `/etc/pve/lxc/<vmid>.conf`.
    pub config: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_userspace_version: Option<String>,
}

/// A systemd unit of the simulated host.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimUnit {
    /// The unit file on disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// What systemd loaded at the last daemon-reload (`None`: loads the file on first start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded: Option<String>,
    /// Clock second the unit was started; `None` when stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// The content it was started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<String>,
    /// The agent's copy of the last unit that reached Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ready: Option<String>,
    /// Hash of a unit recorded as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_hash: Option<String>,
}

/// A process holding a device, as given in the description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimHolder {
    pub address: String,
    #[serde(flatten)]
    pub holder: Holder,
}

/// The host description file (`--host sim:FILE`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimHostFile {
    pub node_name: String,
    #[serde(default)]
    pub clock: u64,
    #[serde(default)]
    pub behaviour: Behaviour,
    pub pci_devices: Vec<SimDevice>,
    #[serde(default)]
    pub pci_drivers: BTreeSet<String>,
    #[serde(default)]
    pub iommu: IommuState,
    #[serde(default)]
    pub nvidia: NvidiaState,
    #[serde(default)]
    pub containers: BTreeMap<u32, SimContainer>,
    #[serde(default)]
    pub vms: BTreeMap<u32, Vm>,
    /// The raw `/etc/pve/mapping/pci.cfg`.
    #[serde(default)]
    pub pci_cfg: String,
    /// Units by key (`host/<name>` or `lxc-<vmid>/<name>`).
    #[serde(default)]
    pub units: BTreeMap<String, SimUnit>,
    #[serde(default)]
    pub p2p_probes: Vec<P2pProbe>,
    #[serde(default)]
    pub holders: Vec<SimHolder>,
}

/// The simulated host.
#[derive(Debug, Clone)]
pub struct SimHost {
    pub file: SimHostFile,
    live: Option<Live>,
}

/// A simulated host kept in a file that others may edit while the agent runs (`gpuplane run`):
/// every observation re-reads it, every step writes it back, and the clock follows wall time.
#[derive(Debug, Clone)]
struct Live {
    path: std::path::PathBuf,
    speed: u64,
    anchor: std::time::Instant,
    anchor_clock: u64,
    last_saved: String,
}

impl SimHost {
    /// Loads a description from YAML text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<SimHost, HostError> {
        let file: SimHostFile = serde_yaml::from_str(text).map_err(|e| HostError::Parse {
            path: origin.into(),
            message: e.to_string(),
        })?;
        let mut seen = BTreeSet::new();
        for d in &file.pci_devices {
            if !seen.insert(d.address.clone()) {
                return Err(HostError::Parse {
                    path: origin.into(),
                    message: format!("device {} is listed twice", d.address),
                });
            }
        }
        Ok(SimHost { file, live: None })
    }

    /// A host from an already parsed description.
    pub fn new(file: SimHostFile) -> SimHost {
        SimHost { file, live: None }
    }

    /// Opens `path` as a live host: re-read before each observation, written after each step,
    /// its clock running `speed` times faster than wall time.
    pub fn live(path: &str, speed: u64) -> Result<SimHost, HostError> {
        let text = std::fs::read_to_string(path).map_err(|e| HostError::Read {
            path: path.into(),
            source: e,
        })?;
        let mut h = Self::from_yaml(&text, path)?;
        h.live = Some(Live {
            path: path.into(),
            speed: speed.max(1),
            anchor: std::time::Instant::now(),
            anchor_clock: h.file.clock,
            last_saved: text,
        });
        Ok(h)
    }

    /// Live mode: pick up edits made by others and advance the clock.
    fn refresh(&mut self) -> Result<(), HostError> {
        let Some(live) = self.live.as_mut() else {
            return Ok(());
        };
        let path = live.path.to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&live.path).map_err(|e| HostError::Read {
            path: path.clone(),
            source: e,
        })?;
        if text != live.last_saved {
            let file: SimHostFile = serde_yaml::from_str(&text).map_err(|e| HostError::Parse {
                path,
                message: e.to_string(),
            })?;
            live.anchor_clock = file.clock.max(self.file.clock);
            live.anchor = std::time::Instant::now();
            live.last_saved = text;
            self.file = file;
        }
        self.file.clock = live.anchor_clock + live.anchor.elapsed().as_secs() * live.speed;
        Ok(())
    }

    /// Live mode: write the state back.
    fn persist(&mut self) -> Result<(), HostError> {
        let Some(live) = self.live.as_mut() else {
            return Ok(());
        };
        let text =
            serde_yaml::to_string(&self.file).map_err(|e| HostError::Other(e.to_string()))?;
        let tmp = live.path.with_extension("yaml.tmp");
        std::fs::write(&tmp, &text)
            .and_then(|_| std::fs::rename(&tmp, &live.path))
            .map_err(|e| HostError::Other(format!("cannot write {}: {e}", live.path.display())))?;
        live.last_saved = text;
        Ok(())
    }

    /// Loads a description file.
    pub fn load(path: &str) -> Result<SimHost, HostError> {
        let text = std::fs::read_to_string(path).map_err(|e| HostError::Read {
            path: path.into(),
            source: e,
        })?;
        Self::from_yaml(&text, path)
    }

    fn dev_mut(&mut self, addr: &str, step: &Step) -> Result<&mut SimDevice, HostError> {
        self.file
            .pci_devices
            .iter_mut()
            .find(|d| d.address == addr)
            .ok_or_else(|| fail(step, format!("no PCI device {addr}")))
    }

    /// GPU addresses visible at `loc` on nvidia, sorted by address (CUDA PCI_BUS_ID order).
    pub(crate) fn visible_gpus(&self, loc: Location) -> Vec<String> {
        let mounted: Option<BTreeSet<u32>> = match loc {
            Location::Host => None,
            Location::Container(v) => Some(
                self.file
                    .containers
                    .get(&v)
                    .map(|c| LxcConfig::parse(&c.config).gpu_mounts().minors)
                    .unwrap_or_default(),
            ),
        };
        let mut v: Vec<String> = self
            .file
            .pci_devices
            .iter()
            .filter(|d| d.class.starts_with("03") && d.driver.as_deref() == Some("nvidia"))
            .filter(|d| match (&mounted, d.minor) {
                (None, _) => true,
                (Some(m), Some(n)) => m.contains(&n),
                (Some(_), None) => false,
            })
            .map(|d| d.address.clone())
            .collect();
        v.sort();
        v
    }

    fn holders_of(&self, addr: &str) -> Vec<Holder> {
        let st = self.observe_inner();
        st.pci_devices
            .get(addr)
            .map(|d| d.holders.clone())
            .unwrap_or_default()
    }

    fn observe_inner(&self) -> HostState {
        let f = &self.file;
        let mut st = HostState {
            node_name: f.node_name.clone(),
            pci_drivers: f.pci_drivers.clone(),
            iommu: f.iommu.clone(),
            nvidia: f.nvidia.clone(),
            vms: f.vms.clone(),
            p2p_probes: f.p2p_probes.clone(),
            ..HostState::default()
        };
        for d in &f.pci_devices {
            let on_nvidia = d.driver.as_deref() == Some("nvidia");
            st.pci_devices.insert(
                d.address.clone(),
                PciDevice {
                    address: d.address.clone(),
                    vendor: d.vendor.clone(),
                    device: d.device.clone(),
                    class: d.class.clone(),
                    subsystem: d.subsystem.clone(),
                    numa_node: d.numa_node,
                    iommu_group: d.iommu_group,
                    driver: d.driver.clone(),
                    driver_override: d.driver_override.clone(),
                    nvidia_minor: if on_nvidia { d.minor } else { None },
                    holders: vec![],
                },
            );
        }
        for (vmid, c) in &f.containers {
            st.containers.insert(
                *vmid,
                Container {
                    vmid: *vmid,
                    state: c.state,
                    gpu_mounts: LxcConfig::parse(&c.config).gpu_mounts(),
                    nvidia_userspace_version: c.nvidia_userspace_version.clone(),
                },
            );
        }
        let cfg = PciCfg::parse(&f.pci_cfg);
        for (name, entries) in cfg.mappings() {
            let mine: Vec<_> = entries
                .into_iter()
                .filter(|e| e.node == f.node_name)
                .collect();
            if !mine.is_empty() {
                st.pci_mappings.insert(name, mine);
            }
        }
        // Holders: described processes, running VMs on their vfio GPUs, running servers.
        let mut holders: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
        for h in &f.holders {
            holders
                .entry(h.address.clone())
                .or_default()
                .push(h.holder.clone());
        }
        for (vmid, vm) in &f.vms {
            if vm.state != RunState::Running {
                continue;
            }
            for m in &vm.pci_mappings {
                for e in st.pci_mappings.get(m).into_iter().flatten() {
                    for p in &e.paths {
                        if st
                            .pci_devices
                            .get(p)
                            .is_some_and(|d| d.driver.as_deref() == Some("vfio-pci"))
                        {
                            holders.entry(p.clone()).or_default().push(Holder {
                                pid: 4000 + vmid,
                                command: "kvm".into(),
                                vm: Some(*vmid),
                                ..Holder::default()
                            });
                        }
                    }
                }
            }
        }
        for (key, u) in &f.units {
            let Some(unit_ref) = parse_unit_key(key) else {
                continue;
            };
            let run = server::run(self, &unit_ref, u);
            if let Some(server::Running { gpus, .. }) = &run.running {
                for (i, g) in gpus.iter().enumerate() {
                    holders.entry(g.clone()).or_default().push(Holder {
                        pid: 10_000 + i as u32,
                        command: "python3".into(),
                        container: match unit_ref.location {
                            Location::Container(v) => Some(v),
                            Location::Host => None,
                        },
                        vm: None,
                        unit: match unit_ref.location {
                            Location::Host => Some(unit_ref.name.clone()),
                            Location::Container(_) => None,
                        },
                    });
                }
            }
            st.units.insert(key.clone(), run.unit);
        }
        for (addr, hs) in holders {
            if let Some(d) = st.pci_devices.get_mut(&addr) {
                d.holders = hs;
            }
        }
        st
    }

    fn unit_mut(&mut self, r: &UnitRef) -> &mut SimUnit {
        self.file.units.entry(r.key()).or_default()
    }

    fn container_running(&self, loc: Location) -> bool {
        match loc {
            Location::Host => true,
            Location::Container(v) => self
                .file
                .containers
                .get(&v)
                .is_some_and(|c| c.state == RunState::Running),
        }
    }
}

/// `host/<name>` or `lxc-<vmid>/<name>` back to a ref.
pub fn parse_unit_key(key: &str) -> Option<UnitRef> {
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

fn fail(step: &Step, message: String) -> HostError {
    HostError::Step {
        step: step.to_string(),
        message,
    }
}

impl Host for SimHost {
    fn observe(&mut self) -> Result<HostState, HostError> {
        self.refresh()?;
        Ok(self.observe_inner())
    }

    fn apply(&mut self, step: &Step) -> Result<StepOutcome, HostError> {
        self.refresh()?;
        let out = self.apply_step(step)?;
        self.persist()?;
        Ok(out)
    }

    fn sleep(&mut self, secs: u64) {
        match &self.live {
            Some(l) => std::thread::sleep(std::time::Duration::from_millis(secs * 1000 / l.speed)),
            None => self.file.clock += secs,
        }
    }

    fn now(&self) -> u64 {
        match &self.live {
            Some(l) => l.anchor_clock + l.anchor.elapsed().as_secs() * l.speed,
            None => self.file.clock,
        }
    }

    fn save(&self) -> Option<Result<String, HostError>> {
        Some(
            serde_yaml::to_string(&self.file)
                .map_err(|e| HostError::Other(format!("cannot write host description: {e}"))),
        )
    }
}

impl SimHost {
    fn apply_step(&mut self, step: &Step) -> Result<StepOutcome, HostError> {
        let now = self.file.clock;
        match step {
            Step::StopUnit { unit } => {
                let u = self.unit_mut(unit);
                u.started_at = None;
                u.running = None;
            }
            Step::StopContainer { vmid } => {
                let c = self
                    .file
                    .containers
                    .get_mut(vmid)
                    .ok_or_else(|| fail(step, format!("no container {vmid}")))?;
                c.state = RunState::Stopped;
                let prefix = format!("lxc-{vmid}/");
                for (k, u) in self.file.units.iter_mut() {
                    if k.starts_with(&prefix) {
                        u.started_at = None;
                        u.running = None;
                    }
                }
            }
            Step::StartContainer { vmid } => {
                let c = self
                    .file
                    .containers
                    .get(vmid)
                    .ok_or_else(|| fail(step, format!("no container {vmid}")))?;
                let mounts = LxcConfig::parse(&c.config).gpu_mounts();
                if mounts.style == Some(MountStyle::DevN) {
                    // PVE stats every devN path at start: a missing /dev/nvidiaN fails the start.
                    let present: BTreeSet<u32> = self
                        .file
                        .pci_devices
                        .iter()
                        .filter(|d| d.driver.as_deref() == Some("nvidia"))
                        .filter_map(|d| d.minor)
                        .collect();
                    if let Some(m) = mounts.minors.iter().find(|m| !present.contains(m)) {
                        return Err(fail(step, format!("Device /dev/nvidia{m} does not exist")));
                    }
                }
                if let Some(c) = self.file.containers.get_mut(vmid) {
                    c.state = RunState::Running;
                }
            }
            Step::LoadDriver { driver } => {
                self.file.pci_drivers.insert(driver.clone());
            }
            Step::SetDriverOverride { address, driver } => {
                self.dev_mut(address, step)?.driver_override = driver.clone();
            }
            Step::Unbind { address, driver } => {
                let holders = self.holders_of(address);
                let d = self.dev_mut(address, step)?;
                if d.driver.as_deref() != Some(driver.as_str()) {
                    return Ok(StepOutcome::default());
                }
                if !holders.is_empty() {
                    let hs: Vec<String> = holders.iter().map(|h| h.to_string()).collect();
                    return Err(fail(
                        step,
                        format!(
                            "the {driver} driver refuses to let go of {address}: held by {}",
                            hs.join(", ")
                        ),
                    ));
                }
                d.driver = None;
            }
            Step::ReturnToHostDriver { address } => {
                self.dev_mut(address, step)?.driver_override = None;
                return self.apply_step(&Step::Probe {
                    address: address.clone(),
                });
            }
            Step::Probe { address } => {
                let drivers = self.file.pci_drivers.clone();
                let d = self.dev_mut(address, step)?;
                if d.driver.is_none() {
                    let pick = match &d.driver_override {
                        Some(o) => Some(o.clone()),
                        None if d.default_driver.is_some() => d.default_driver.clone(),
                        None if d.vendor == "10de" && d.class.starts_with("03") => {
                            Some("nvidia".to_string())
                        }
                        None => None,
                    };
                    // Like the kernel: probing "succeeds" even when no driver takes the device.
                    d.driver = pick.filter(|p| drivers.contains(p));
                }
            }
            Step::SetContainerGpus { vmid, minors } => {
                let uvm = self.file.nvidia.uvm_major;
                let c = self
                    .file
                    .containers
                    .get_mut(vmid)
                    .ok_or_else(|| fail(step, format!("no container {vmid}")))?;
                let mut cfg = LxcConfig::parse(&c.config);
                cfg.set_gpu_mounts(&DesiredGpuMounts {
                    minors: minors.clone(),
                    uvm_major: uvm,
                    default_style: MountStyle::MountEntry,
                });
                c.config = cfg.render();
            }
            Step::SetPciMapping { mapping, entries } => {
                let mut cfg = PciCfg::parse(&self.file.pci_cfg);
                cfg.set_node_entries(mapping, &self.file.node_name.clone(), entries);
                self.file.pci_cfg = cfg.render();
            }
            Step::ProbeP2p { location, gpus, .. } => {
                if !self.container_running(*location) {
                    return Err(fail(step, format!("{location} is not running")));
                }
                let visible = self.visible_gpus(*location);
                if let Some(g) = gpus.iter().find(|g| !visible.contains(g)) {
                    return Err(fail(step, format!("GPU {g} is not visible on {location}")));
                }
                let st = self.observe_inner();
                let corrupt =
                    self.file.behaviour.p2p_corrupt && st.iommu.mode() == IommuMode::Translated;
                let mut failing = Vec::new();
                for (i, a) in gpus.iter().enumerate() {
                    for b in gpus.iter().skip(i + 1) {
                        if corrupt {
                            failing.push(format!("{a}<->{b}"));
                        }
                    }
                }
                let detail = if failing.is_empty() {
                    format!(
                        "all {} pairs copied correctly",
                        gpus.len() * (gpus.len() - 1) / 2
                    )
                } else {
                    format!(
                        "{} of {} pairs returned corrupted data",
                        failing.len(),
                        gpus.len() * (gpus.len() - 1) / 2
                    )
                };
                let probe = P2pProbe {
                    gpus: gpus.clone(),
                    key: st.p2p_key(gpus),
                    failing_pairs: failing,
                };
                self.file.p2p_probes.retain(|p| &p.gpus != gpus);
                self.file.p2p_probes.push(probe);
                return Ok(StepOutcome {
                    detail: Some(detail),
                });
            }
            Step::WriteUnit { unit, content } => {
                if !self.container_running(unit.location) {
                    return Err(fail(
                        step,
                        format!(
                            "{} is not running (pct push needs a running container)",
                            unit.location
                        ),
                    ));
                }
                self.unit_mut(unit).file = Some(content.clone());
            }
            Step::DaemonReload { location } => {
                if !self.container_running(*location) {
                    return Err(fail(step, format!("{location} is not running")));
                }
                for (k, u) in self.file.units.iter_mut() {
                    if parse_unit_key(k).is_some_and(|r| r.location == *location) {
                        u.loaded = u.file.clone();
                    }
                }
            }
            Step::StartUnit { unit, restart } => {
                if !self.container_running(unit.location) {
                    return Err(fail(step, format!("{} is not running", unit.location)));
                }
                // `systemctl start` of an active unit does nothing; of a failed one, starts it again.
                let active = self
                    .observe_inner()
                    .unit(unit)
                    .is_some_and(|u| u.is_active());
                let u = self.unit_mut(unit);
                let content = u.loaded.clone().or_else(|| u.file.clone());
                let Some(content) = content else {
                    return Err(fail(step, format!("Unit {} not found.", unit.name)));
                };
                if active && !restart {
                    return Ok(StepOutcome::default());
                }
                u.started_at = Some(now);
                u.running = Some(content);
            }
            Step::SaveReadyUnit { unit, content } => {
                self.unit_mut(unit).last_ready = Some(content.clone())
            }
            Step::MarkUnitFailed { unit, hash } => {
                self.unit_mut(unit).failed_hash = Some(hash.clone())
            }
            Step::RemoveUnit { unit } => {
                self.file.units.remove(&unit.key());
            }
            Step::WaitReady { .. } => {}
        }
        Ok(StepOutcome::default())
    }
}

#[cfg(test)]
mod tests;
