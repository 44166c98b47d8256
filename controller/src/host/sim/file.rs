//! The host description (`--host sim:FILE`): the serialized form of the simulated host, as the
//! YAML files in `examples/hosts/` spell it.

use crate::host::model::*;
use crate::proxmox::lxc_conf::{GpuMounts, LxcConfig};
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
    /// The server answers chat requests without a parsed tool call (a broken tool-call parser).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub smoke_no_tool_call: bool,
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
            smoke_no_tool_call: false,
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
    /// What this physical GPU is: its slot, path and serial number are seen on any driver, its
    /// UUID and board serial only while it is on `nvidia` (as NVML shows them).
    #[serde(default, skip_serializing_if = "GpuIdentity::is_empty")]
    pub identity: GpuIdentity,
    /// What the kernel tells of its health (AER counters, link, config space answering), as
    /// the real backend reads it from sysfs; `notResponding` also hides the NVIDIA identity.
    #[serde(default, skip_serializing_if = "PcieHealth::is_empty")]
    pub health: PcieHealth,
}

impl SimDevice {
    /// The minor of `/dev/nvidiaN`, which exists only while the GPU is bound to nvidia.
    pub(super) fn nvidia_minor(&self) -> Option<u32> {
        if self.driver.as_deref() == Some("nvidia") {
            self.minor
        } else {
            None
        }
    }
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
    /// The minors its config gave it when it last started: a running container keeps the
    /// devices it started with (its bind mounts and device cgroup) whatever its config says
    /// meanwhile. `None`: not started since the description was written (its config counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_with: Option<BTreeSet<u32>>,
}

impl SimContainer {
    /// The GPU device lines of its config.
    pub(super) fn gpu_mounts(&self) -> GpuMounts {
        LxcConfig::parse(&self.config).gpu_mounts()
    }

    /// The `/dev/nvidiaN` minors a process inside sees: those it started with while running.
    pub(super) fn visible_minors(&self) -> BTreeSet<u32> {
        match &self.started_with {
            Some(m) if self.state == crate::host::model::RunState::Running => m.clone(),
            _ => self.gpu_mounts().minors,
        }
    }
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

impl SimUnit {
    /// Its process ends (`systemctl stop`, or its container stops).
    pub(super) fn stop(&mut self) {
        self.started_at = None;
        self.running = None;
    }
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
    /// The confidential-computing facts the host shows.
    #[serde(default, skip_serializing_if = "ConfidentialFacts::is_empty")]
    pub confidential: ConfidentialFacts,
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
    /// Files preflight reads (model directories, interpreters, paths); `None`: not simulated,
    /// and preflight reports nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<super::files::SimFiles>,
    /// The agent's GPU ledger, as it wrote it (`/var/lib/gpuplane/gpus.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_ledger: Option<crate::host::ledger::Ledger>,
    /// The kernel command line and the bootloader's config (`None`: not described; the host
    /// then shows no boot facts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<super::SimBoot>,
    /// Faults still to inject (each consumed as it fires).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<super::SimFault>,
    /// Kernel-log lines (`dmesg` without timestamps): the GPU driver's Xid and "fallen off the
    /// bus" lines among them are read as on a real host (`host/health.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_log: Vec<String>,
}
