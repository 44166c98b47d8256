//! `GpuPartition`: which GPUs of a host are owned by whom.

use crate::condition::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A PCI address in full (`0000:01:00.0`) or short (`01:00.0`, domain 0000) form, lower-case hex.
pub const PCI_ADDRESS_PATTERN: &str = r"^([0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$";

/// Declares how the GPUs of one host are split between consumers.
///
/// One `GpuPartition` per host. Each slice takes a set of GPUs, binds them to a
/// driver (`nvidia` for containers and host processes, `vfio-pci` for VM passthrough)
/// and hands them to its consumer. A GPU may belong to at most one slice; GPUs in no
/// slice are left as they are.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gpuplane.dev",
    version = "v1alpha1",
    kind = "GpuPartition",
    plural = "gpupartitions",
    shortname = "gpup",
    status = "GpuPartitionStatus",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.nodeName"}"#,
    printcolumn = r#"{"name":"Slices","type":"integer","jsonPath":".status.sliceCount"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GpuPartitionSpec {
    /// Name of the host (Kubernetes node / Proxmox node) this partition applies to. Label the
    /// partition `gpuplane.dev/node=<nodeName>` too: the node's agent watches only objects so
    /// labelled (an unlabelled one gets Ready=False, reason NodeLabelMissing).
    #[schemars(length(min = 1, max = 253))]
    pub node_name: String,
    /// The slices of the host's GPUs. Slice names must be unique.
    #[schemars(length(min = 1))]
    pub slices: Vec<GpuSlice>,
    /// Expectations about the host's IOMMU. A mismatch is reported, never changed
    /// (changing it needs a reboot with a new kernel command line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu: Option<IommuExpectation>,
    /// What the host itself needs: its kernel arguments, and who reboots it to apply them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostSpec>,
    /// What happens to the host when this resource is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// What the agent does with a GPU it judges sick (`status.gpus[].health`): which GPUs it
    /// takes out of their slice, and whether it resets one. Absent: the safe default, quarantine
    /// an Unhealthy or Lost GPU and reset it once where the evidence says a reset repairs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthPolicy>,
}

/// The admin's rule for sick GPUs (`spec.health`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthPolicy {
    /// Which GPUs are quarantined: taken out of their slice (the one server that uses one is
    /// stopped, its container loses exactly that device node, its VM's mapping that entry;
    /// everything else keeps running).
    #[serde(default)]
    pub quarantine: QuarantinePolicy,
    /// Whether a quarantined GPU whose evidence calls for a reset (`repair: ResetGpu`) is reset
    /// (its function only, through sysfs), once; it rejoins its slice when it answers and no new
    /// fault shows, and a fault that returns escalates.
    #[serde(default)]
    pub reset: ResetPolicy,
}

/// Which judged states take a GPU out of its slice.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum QuarantinePolicy {
    /// Unhealthy or Lost GPUs (the default).
    #[default]
    Unhealthy,
    /// Only Lost GPUs (gone, or not answering).
    Lost,
    /// None: health is reported only.
    Never,
}

/// Whether the agent resets a quarantined GPU.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ResetPolicy {
    /// Once per fault, where the evidence calls for a reset (the default).
    #[default]
    Auto,
    /// Never: a person repairs, then accepts (`gpuplane.dev/accept-health`).
    Never,
}

/// One group of GPUs with one driver and one consumer.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuSlice {
    /// Slice name, referenced by InferenceServers (`partitionRef.slice`). DNS label.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// Which GPUs this slice takes: give exactly one of `addresses`, `numaNode`, `count`,
    /// `uuids`, `serials` or `slots`.
    pub gpus: GpuSelector,
    /// Kernel driver the slice's GPUs must be bound to.
    pub driver: GpuDriver,
    /// Who uses the GPUs. Omit for GPUs that are only bound to a driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<Consumer>,
    /// What `InferenceServer`s may do on this slice: the partition's admin decides, a server
    /// (a tenant, in its namespace) asks only within it. Omit and no server may use the slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<ServerPolicy>,
}

/// The trust boundary between the admin of a (cluster-scoped) `GpuPartition` and the tenants
/// whose (namespaced) `InferenceServer`s run on one of its slices. Every list is an allow-list:
/// what is not named is refused, with a reason, by the agent, the CLI and the webhook.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerPolicy {
    /// Namespaces whose `InferenceServer`s may use this slice.
    #[schemars(length(min = 1))]
    pub namespaces: Vec<String>,
    /// Absolute paths a server's `spec.python` may name (the interpreters of the admin's
    /// SGLang environments). A server's unit runs this program, so only the admin chooses it.
    #[schemars(length(min = 1))]
    pub interpreters: Vec<String>,
    /// Absolute directories under which a server's model (and draft model) must lie.
    #[serde(default)]
    pub model_roots: Vec<String>,
    /// Whether a model may be a Hugging Face repo id (`org/name`), downloaded by the server.
    #[serde(default)]
    pub allow_hub_models: bool,
    /// Whether a server may run its unit on the host itself (`unit.location: Host`). Needs
    /// `user`; off by default, as the unit then shares the host with the agent.
    #[serde(default)]
    pub allow_host_placement: bool,
    /// The user the server's unit runs as (`User=`): a name or a numeric UID that exists where
    /// the unit runs. Omit to run as the unit's default (root) — inside an unprivileged
    /// container only: in a privileged one (root there is the host's root) the agent blocks the
    /// server (`RootInPrivilegedContainer`) unless `root` is written here, and `Host` placement
    /// needs a user (`root` only if written here explicitly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Units not written by gpuplane (no `# Managed by gpuplane` header) that a server of
    /// this slice may take over, by name (e.g. a hand-written `sglang-qwen` being migrated).
    /// Every other server unit must be named `gpuplane-...`, and the agent never writes,
    /// stops or removes a unit it did not write unless it is named here.
    #[serde(default)]
    pub adopt_units: Vec<String>,
    /// Environment the admin sets for every server of this slice (e.g. `LD_LIBRARY_PATH`,
    /// which a tenant may not set). A server's `env` may not set these names.
    #[serde(default)]
    pub env: Vec<crate::server::EnvVar>,
    /// SGLang flags a server's `extraArgs` may set beyond the ones any tenant may (the serving
    /// tunables the project lists in `controller/src/sglang/flag-policy.tsv`), e.g.
    /// `--lora-paths` or `--trust-remote-code`. A flag that loads code, plugins or remote
    /// content is never a tenant's to set unless listed here. Full names (`--flag`); the
    /// flags the agent sets from the spec cannot be listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_flags: Vec<String>,
    /// Environment names a server's `env` may set beyond the ones any tenant may (the CUDA,
    /// NCCL and threading tunables the project lists in `controller/src/desired/tenancy/env.rs`),
    /// e.g. `HF_HUB_OFFLINE`. Names the agent sets itself cannot be listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_env: Vec<String>,
    /// What a server of this slice does when a GPU it uses is quarantined (`spec.health`):
    /// `Stop` (the default: it waits for the GPU), or `Shrink`: it restarts on its remaining
    /// GPUs at the largest tensor-parallel size that divides its own (so the model's attention
    /// heads still divide it) and that they can hold (the server's preflight, where read), and
    /// goes back to its own size when the GPU rejoins.
    #[serde(default, skip_serializing_if = "OnGpuQuarantine::is_stop")]
    pub on_gpu_quarantine: OnGpuQuarantine,
}

/// What a server does when a GPU it uses is quarantined.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum OnGpuQuarantine {
    /// Stop and wait for the GPU (the default).
    #[default]
    Stop,
    /// Restart on the remaining GPUs at a smaller tensor-parallel size.
    Shrink,
}

impl OnGpuQuarantine {
    fn is_stop(&self) -> bool {
        *self == OnGpuQuarantine::Stop
    }
}

/// Selects GPUs on the host. Exactly one field must be set.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuSelector {
    /// PCI addresses of the GPUs (function 0), e.g. `0000:01:00.0` or `01:00.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub addresses: Option<Vec<PciAddress>>,
    /// Every GPU attached to this NUMA node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub numa_node: Option<i32>,
    /// This many GPUs not claimed by another slice (those already serving this slice first, then by PCI address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub count: Option<u32>,
    /// NVML UUIDs of the GPUs (`GPU-624a3d49-...`, as `nvidia-smi -L` prints them). The slice
    /// follows these GPUs wherever their addresses go; a GPU on `vfio-pci` is known by the
    /// UUID the agent's ledger remembers from when it was last on `nvidia`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub uuids: Option<Vec<String>>,
    /// Board serial numbers of the GPUs (`nvidia-smi --query-gpu=serial`), remembered like UUIDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub serials: Option<Vec<String>>,
    /// Physical slot names of the GPUs (`/sys/bus/pci/slots/<name>`, the slot numbers the
    /// server's firmware gives its PCIe slots): the slice keeps these slots when a firmware
    /// update or a reseated riser renumbers the buses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub slots: Option<Vec<String>>,
}

impl GpuSelector {
    /// The selector kinds that are set, by their field names.
    pub fn kinds(&self) -> Vec<&'static str> {
        let set = [
            ("addresses", self.addresses.is_some()),
            ("numaNode", self.numa_node.is_some()),
            ("count", self.count.is_some()),
            ("uuids", self.uuids.is_some()),
            ("serials", self.serials.is_some()),
            ("slots", self.slots.is_some()),
        ];
        set.iter().filter(|(_, on)| *on).map(|(k, _)| *k).collect()
    }

    /// Whether the slice names its GPUs by what they are (UUID, serial, slot), not by where
    /// they sit on the bus or how many.
    pub fn by_identity(&self) -> bool {
        self.uuids.is_some() || self.serials.is_some() || self.slots.is_some()
    }
}

/// A PCI address string, validated by pattern.
#[derive(
    Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(transparent)]
pub struct PciAddress(
    #[schemars(regex(pattern = r"^([0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"))] pub String,
);

impl PciAddress {
    /// The full form with domain (`0000:01:00.0`).
    pub fn full(&self) -> String {
        if self.0.len() == 7 {
            format!("0000:{}", self.0)
        } else {
            self.0.clone()
        }
    }
}

/// Kernel driver for a slice's GPUs.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum GpuDriver {
    /// The NVIDIA kernel driver: containers and host processes use the GPU.
    #[serde(rename = "nvidia")]
    Nvidia,
    /// VFIO: the GPU is passed through to a VM.
    #[serde(rename = "vfio-pci")]
    VfioPci,
}

impl GpuDriver {
    /// The driver's name in sysfs (`/sys/bus/pci/drivers/<name>`).
    pub fn sysfs_name(self) -> &'static str {
        match self {
            GpuDriver::Nvidia => "nvidia",
            GpuDriver::VfioPci => "vfio-pci",
        }
    }
}

/// The consumer of a slice: exactly one of `lxc` or `vm`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Consumer {
    /// A Proxmox LXC container that gets the GPUs' device nodes (needs driver `nvidia`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lxc: Option<LxcConsumer>,
    /// A Proxmox VM that gets the GPUs by PCI passthrough through a resource mapping (needs driver `vfio-pci`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmConsumer>,
}

/// An LXC container consumer.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LxcConsumer {
    /// Proxmox container ID (`/etc/pve/lxc/<vmid>.conf`).
    #[schemars(range(min = 100, max = 999_999_999))]
    pub vmid: u32,
}

/// A VM consumer that takes GPUs through a Proxmox PCI resource mapping.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VmConsumer {
    /// Proxmox VM ID. The agent never starts or stops the VM; while it runs and holds the
    /// GPUs, they are not moved.
    #[schemars(range(min = 100, max = 999_999_999))]
    pub vmid: u32,
    /// Name of the mapping in `/etc/pve/mapping/pci.cfg` that gets exactly this slice's GPUs
    /// for this node (the VM refers to it as `hostpciN: mapping=<name>`).
    #[schemars(
        length(min = 2, max = 40),
        regex(pattern = r"^[a-zA-Z][a-zA-Z0-9_\-]+$")
    )]
    pub pci_mapping: String,
}

/// Expected IOMMU mode of the host.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IommuExpectation {
    /// `Translated` (DMA/DMA-FQ domains, as SEV-SNP forces), `Passthrough` (identity, `iommu=pt`) or `Any`.
    #[serde(default)]
    pub mode: IommuModeExpectation,
}

/// IOMMU mode the host is expected to run in.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum IommuModeExpectation {
    #[default]
    Any,
    Translated,
    Passthrough,
}

/// The most arguments `kernelArgs` may list (`present` and `absent` together).
pub const KERNEL_ARGS_MAX: usize = 32;
/// The longest one kernel argument may be.
pub const KERNEL_ARG_MAX_LEN: usize = 256;
/// What one kernel argument may look like: letters, digits and `_ . , : = / + @ % -` only (no
/// whitespace, quotes or shell metacharacters), not starting with `-`.
pub const KERNEL_ARG_PATTERN: &str = r"^[A-Za-z0-9_.,:=/+@%][A-Za-z0-9_.,:=/+@%-]*$";
/// The most keys `kernelArgs.allowKeys` may list.
pub const KERNEL_ARG_ALLOW_KEYS_MAX: usize = 16;
/// The longest key `kernelArgs.allowKeys` may list.
pub const KERNEL_ARG_KEY_MAX_LEN: usize = 64;
/// What a key of `kernelArgs.allowKeys` may look like: the part of an argument before `=`.
pub const KERNEL_ARG_KEY_PATTERN: &str = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$";

/// What a partition needs of its host beyond its GPUs.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostSpec {
    /// Kernel arguments the host must boot with (`present`) or without (`absent`). The agent
    /// writes them where the bootloader reads them (`/etc/kernel/cmdline` on hosts managed by
    /// `proxmox-boot-tool`, else `GRUB_CMDLINE_LINUX_DEFAULT` in `/etc/default/grub`), refreshes
    /// the bootloader, and reports `RebootRequired` until `/proc/cmdline` matches. Only the keys
    /// the agent manages (the IOMMU, VFIO passthrough, AMD SEV, keeping other drivers off the
    /// GPUs) with the values that serve passthrough, or keys listed in `allowKeys`; never one that
    /// switches off what a `vfio-pci` slice or a confidential VM of the partition needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_args: Option<KernelArgs>,
    /// Who reboots the host to apply new kernel arguments: `Manual` (default: a person) or
    /// `Auto`: the agent reboots once, holding a disruption slot of the partition's pool (label
    /// `gpuplane.dev/pool`) and inside `maintenanceWindow` when one is set; `Auto` needs one of
    /// the two.
    #[serde(default)]
    pub reboot: RebootPolicy,
    /// When `reboot: Auto` may reboot the host (UTC). Required for `Auto` without a pool (and
    /// on hosts whose agent runs on manifest files, which cannot ask a pool); with a pool the
    /// agent reboots only inside the window and holding a slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_window: Option<MaintenanceWindow>,
}

/// A daily window of time in UTC, e.g. `{start: "02:00", end: "04:00", days: [Sat, Sun]}`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// Opens at, `HH:MM` UTC.
    #[schemars(regex(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"))]
    pub start: String,
    /// Closes at, `HH:MM` UTC; earlier than `start`: the window runs past midnight.
    #[schemars(regex(pattern = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"))]
    pub end: String,
    /// The days (UTC) it opens on; empty: every day. A window past midnight belongs to the
    /// day it opens on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<Weekday>,
}

/// A day of the week.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum Weekday {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

/// Kernel arguments, each matched as a whole word of the command line (`iommu=pt` is not
/// `iommu=on`): to change a value, list the old word in `absent` and the new one in `present`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KernelArgs {
    /// Words the kernel command line must hold, e.g. `vfio-pci.disable_idle_d3=1`.
    #[serde(default)]
    #[schemars(
        length(max = 32),
        inner(
            length(min = 1, max = 256),
            regex(pattern = r"^[A-Za-z0-9_.,:=/+@%][A-Za-z0-9_.,:=/+@%-]*$")
        )
    )]
    pub present: Vec<String>,
    /// Words the kernel command line must not hold, e.g. `iommu=pt`.
    #[serde(default)]
    #[schemars(
        length(max = 32),
        inner(
            length(min = 1, max = 256),
            regex(pattern = r"^[A-Za-z0-9_.,:=/+@%][A-Za-z0-9_.,:=/+@%-]*$")
        )
    )]
    pub absent: Vec<String>,
    /// Keys beyond the ones the agent manages by itself (the IOMMU, VFIO passthrough, AMD SEV,
    /// keeping other drivers off the GPUs: docs/partition.md lists them and their values) that
    /// `present` and `absent` may use, with any value, e.g. `[console]`: the admin takes
    /// responsibility for them. A managed key listed here takes any value too (`iommu` for
    /// `iommu=off`). Keys that choose what the host boots, open a shell, run a program or set
    /// init's environment (`root`, `init`, `systemd.*`, `rd.break`, `single`, `LD_PRELOAD`, ...)
    /// are refused even here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(
            length(min = 1, max = 64),
            regex(pattern = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
        )
    )]
    pub allow_keys: Vec<String>,
}

/// Who reboots the host.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum RebootPolicy {
    /// A person reboots; the agent says when (`RebootRequired=True`) and never reboots.
    #[default]
    Manual,
    /// The agent reboots, once per change of the arguments: with a slot of its pool and/or
    /// inside `maintenanceWindow`, after stopping the partition's servers and containers; it
    /// gives the slot back only when the new boot runs with exactly the arguments and the host
    /// is whole. A boot without them stalls (`KernelArgsNotBooted`) and is not retried.
    Auto,
}

/// What deleting the resource does to the host.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum DeletionPolicy {
    /// Leave the host exactly as it is.
    #[default]
    Retain,
    /// Return the GPUs to the host driver and remove the agent's lines from Proxmox configs.
    Restore,
}

/// Observed state of a `GpuPartition`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuPartitionStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing`, `Degraded`, in the `metav1.Condition` shape.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Number of slices.
    #[serde(default)]
    pub slice_count: u32,
    /// GPUs per slice as observed on the host.
    #[serde(default)]
    pub slices: Vec<SliceStatus>,
    /// The steps of the last plan that was applied, in order.
    #[serde(default)]
    pub last_applied_plan: Vec<String>,
    /// Every GPU of the host as the agent knows it: where it is, what it is, who owns it. A GPU
    /// the ledger remembers but the bus does not show is listed with `missing: true`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuStatus>,
    /// The hash of the GPU layout on the bus now: what `gpuplane.dev/accept-layout` takes to
    /// acknowledge a layout change the agent stalled on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout_hash: Option<String>,
}

/// One GPU of the host in status: the agent's ledger and observation together.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuStatus {
    /// PCI address now (the last one seen, for a missing GPU).
    pub address: String,
    /// Physical slot name, where the platform names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// Topology path from the root complex, without bus numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// NVML UUID: read while on `nvidia`, remembered after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Board serial: read while on `nvidia`, remembered after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// PCIe Device Serial Number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsn: Option<String>,
    /// NUMA node, -1 when the platform does not say.
    pub numa: i32,
    /// IOMMU group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u32>,
    /// Bound driver, `none` when unbound.
    pub driver: String,
    /// The slice that owns it, by the spec's selection now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// In the ledger, not on the bus.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
    /// Its health as the agent judges it from the kernel's facts (AER counters, link, config
    /// space, the NVIDIA driver's Xid lines), on any driver, `vfio-pci` included. (Absent from
    /// an agent older than the health check.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<GpuHealthState>,
    /// What the evidence calls for, in the terms of NVIDIA's Xid catalogue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<GpuRepair>,
    /// What the judgment rests on, one line each: the Xid and its line, the counter and where
    /// it was read, the link.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// Out of its slice for a fault (`spec.health`), with why, since when and the way out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<GpuQuarantine>,
}

/// A GPU's quarantine as the agent records it (in its ledger, so it outlives the kernel log).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuQuarantine {
    /// When the agent took it out of its slice (RFC 3339).
    pub since: String,
    /// Where it stands: `Quarantined` (out, waiting for a reset or a person), `Reset` (reset,
    /// being proved), `Escalated` (the reset failed, the fault returned, or no reset helps: the
    /// repair says what a person does).
    pub stage: QuarantineStage,
    /// The evidence hash: `gpuplane.dev/accept-health: <hash>` on the partition returns the GPU
    /// to its slice (a later, different fault quarantines it again).
    pub hash: String,
    /// What it was quarantined for (the judgment's first evidence lines then).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// How often the agent reset it for this fault.
    #[serde(default)]
    pub resets: u32,
    /// What the evidence called for when it was quarantined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<GpuRepair>,
    /// The boot it was quarantined in: a GPU whose evidence called for no more than a reboot
    /// and that is judged healthy in a later boot rejoins its slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

/// The stages of a quarantine.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum QuarantineStage {
    /// Out of its slice; a reset comes next where the rule allows one.
    #[default]
    Quarantined,
    /// Reset by the agent; it rejoins once it answers with no new fault.
    Reset,
    /// Needs a person: the repair (`RebootNode`, `ContactSupport`) names what, the row the board.
    Escalated,
}

/// A GPU's health, from best to worst.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default, JsonSchema,
)]
pub enum GpuHealthState {
    /// Nothing the kernel shows speaks against it.
    #[default]
    Healthy,
    /// Something a person should look at (correctable or non-fatal PCIe errors, a link narrower
    /// than it can be, an Xid gpuplane does not know).
    Suspect,
    /// It should not serve until repaired (a fatal PCIe error; an Xid that needs a reset, a
    /// reboot or the vendor's support).
    Unhealthy,
    /// It does not answer: config space reads all ones, it fell off the bus, or it is gone.
    Lost,
}

/// What the evidence calls for.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum GpuRepair {
    /// A reset of that GPU's function.
    ResetGpu,
    /// A reboot of the node.
    RebootNode,
    /// A field diagnostic or a replacement board: NVIDIA's support.
    ContactSupport,
}

/// Observed state of one slice.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SliceStatus {
    pub name: String,
    /// PCI addresses the selector resolved to.
    pub gpus: Vec<String>,
    /// Driver each GPU is bound to now (`address=driver`).
    pub drivers: Vec<String>,
}
