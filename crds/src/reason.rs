//! Every reason a gpuplane condition can carry: a closed set, each with its standing and what
//! it means to the person who reads it.
//!
//! A condition's `reason` is a string on the wire (Kubernetes' `metav1.Condition`), but the
//! agent writes only these, so a dashboard, an alert or a GitOps health check can rely on the
//! list. Each reason has a [`Standing`]: when it is the reason of a resource's `Ready`, it says
//! whether the agent is still working (`Reconciling=True`: kstatus InProgress, Argo CD
//! Progressing), stuck until a person acts (`Stalled=True`: Failed, Degraded), or done
//! (Current, Healthy). Reasons of the other condition types (`P2PSafe`, `PreflightPassed`,
//! `Degraded`, …) are [`Standing::Detail`]. The status code derives the kstatus pair from the
//! standing, so the three readers cannot disagree; `e2e/tests/gitops_health.rs` and the kstatus
//! table check them against this one list.

use serde::{Deserialize, Serialize};

/// What a reason means for the resource's standing when it is the reason of its `Ready`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The agent is doing the work, or waits for something that ends by itself.
    Working,
    /// Nothing goes on without a person or a spec change.
    Stuck,
    /// Nothing left to do.
    Done,
    /// A reason of another condition type (never `Ready`'s).
    Detail,
}

macro_rules! reasons {
    ($( $(#[doc = $doc:literal])+ $name:ident => $standing:ident, )+) => {
        /// A condition reason written by gpuplane (see the module's documentation).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum Reason {
            $( $(#[doc = $doc])+ $name, )+
        }

        impl Reason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [Reason] = &[$(Reason::$name),+];

            /// The reason as written into a condition.
            pub fn as_str(self) -> &'static str {
                match self { $(Reason::$name => stringify!($name),)+ }
            }

            /// The resource's standing when this is its `Ready`'s reason.
            pub fn standing(self) -> Standing {
                match self { $(Reason::$name => Standing::$standing,)+ }
            }

            /// What it means and what to do, for the person who reads it.
            pub fn meaning(self) -> &'static str {
                match self { $(Reason::$name => concat!($($doc),+).trim_ascii(),)+ }
            }
        }
    };
}

reasons! {
    // The partition's and a server's standing.
    /// The host matches the partition's spec.
    Converged => Done,
    /// The server answers and serves its model.
    ServerReady => Done,
    /// Startup finished (a server's `Progressing=False`).
    Ready => Done,
    /// Host steps are left; the agent applies them.
    Progressing => Working,
    /// The agent is applying host steps.
    Applying => Working,
    /// The server's unit is starting; `Progressing` names its phase.
    Starting => Working,
    /// The server has not reached a startup phase yet.
    NotStarted => Working,
    /// SGLang is launching.
    Launching => Working,
    /// SGLang is loading the weights.
    LoadingWeights => Working,
    /// SGLang is allocating its KV cache.
    AllocatingKvCache => Working,
    /// SGLang is capturing CUDA graphs.
    CapturingCudaGraphs => Working,
    /// SGLang is warming up.
    WarmingUp => Working,
    /// Another writer holds a Proxmox lock; the agent retries shortly.
    WaitingForLock => Working,
    /// A pool member waits for a disruption slot of its `GpuNodePool`; the pool's status says
    /// who holds the slots.
    WaitingForDisruptionBudget => Working,
    /// The host reboots by itself (`reboot: Auto`) to boot the partition's kernel arguments.
    Rebooting => Working,
    /// A reboot (`reboot: Auto`) waits for the partition's maintenance window.
    WaitingForMaintenanceWindow => Working,
    /// A host step failed; the message names it and the error. The next reconcile retries.
    ApplyFailed => Stuck,
    /// The spec is invalid: the message names each field and the fix.
    InvalidSpec => Stuck,
    /// The server's partition is invalid: fix the partition.
    PartitionInvalid => Stuck,
    /// The server names a partition that does not exist.
    PartitionNotFound => Stuck,
    /// The server asks for what an older server already has (GPUs, a port, a unit).
    Conflict => Stuck,
    /// The object lacks the `gpuplane.dev/node` label: the message has the `kubectl label`
    /// command.
    NodeLabelMissing => Stuck,
    /// The object's `gpuplane.dev/node` label names another node than its spec.
    NodeLabelMismatch => Stuck,
    /// A process holds a GPU the plan would take from its driver: stop it, or move the server.
    GpuInUse => Stuck,
    /// A GPU shares its IOMMU group with a device outside the slice: passthrough would take both.
    IommuGroupShared => Stuck,
    /// The slice's consumer (container or VM) does not exist on the host.
    ConsumerNotFound => Stuck,
    /// Another process listens on the server's port.
    PortInUse => Stuck,
    /// A GPU of the server's slice that it uses is quarantined (`spec.health`): the server is
    /// stopped, every other server keeps running. It starts again when the GPU rejoins (after
    /// the agent's reset, or a person's `gpuplane.dev/accept-health`), or on GPUs the admin
    /// gives the slice.
    GpuQuarantined => Stuck,
    /// `Degraded=True`: a GPU the server used is quarantined and the slice's admin allows
    /// `servers.onGpuQuarantine: Shrink`: it serves on its remaining GPUs at a smaller
    /// tensor-parallel size until the GPU rejoins.
    ShrunkForQuarantine => Detail,
    /// The server's unit exists and was not written by gpuplane: rename it, or adopt it
    /// (`servers.adoptUnits`).
    UnitNotManaged => Stuck,
    /// The adopted unit does not run an SGLang server.
    UnitNotSGLang => Stuck,
    /// A server would run as root in a privileged container: the slice's admin must allow it.
    RootInPrivilegedContainer => Stuck,
    /// The server's unit failed; the message has its exit status and last log lines.
    Crashed => Stuck,
    /// The server made no startup progress within `startup.stallAfterSeconds`.
    StartupStalled => Stuck,
    /// The server was not ready within `startup.deadlineSeconds`.
    DeadlineExceeded => Stuck,
    /// The server's partition is blocked; its message names why.
    WaitingForGpus => Stuck,
    /// Preflight found a problem (model files, SGLang, memory): the plan stops before the
    /// running server is touched.
    PreflightFailed => Stuck,
    /// Preflight could not look yet (its container is stopped); it is checked once the
    /// container runs (an event).
    PreflightNotChecked => Detail,
    /// A GPU of the partition is gone from the bus: accept the new layout once it is understood.
    GpuMissing => Stuck,
    /// A GPU was replaced in place (another serial number): accept the new layout.
    GpuReplaced => Stuck,
    /// The host's GPUs changed (addresses renumbered, a GPU added): the slices that would gain
    /// or lose a GPU are frozen until the layout is accepted.
    HostLayoutChanged => Stuck,
    /// Identical GPUs cannot be told apart (no serial, slot or path): accept the layout.
    GpuIdentityUnknown => Stuck,
    /// The host needs a reboot that the spec leaves to a person (`reboot: Manual`): for the
    /// partition's kernel arguments, or for a driver module older than its files.
    RebootRequired => Stuck,
    /// The host's bootloader was not found.
    BootloaderNotFound => Stuck,
    /// The bootloader's configuration is of a form the agent does not edit.
    BootloaderConfigUnsupported => Stuck,

    // Other condition types.
    /// `Degraded=False`: no known problem.
    AsExpected => Detail,
    /// `Degraded`: the host boots another IOMMU mode than the spec expects (a reboot with other
    /// kernel arguments changes it).
    IommuMismatch => Detail,
    /// `Degraded`: the container's NVIDIA user-space libraries and the host's driver differ in
    /// version.
    DriverMismatch => Detail,
    /// A change of the server failed its smoke test and the previous unit was restored.
    RolledBack => Detail,
    /// What the running server does differs from what its unit says.
    EffectiveConfigDrift => Detail,
    /// `ConfidentialReady=False`: the IOMMU is in passthrough mode, and Linux turns SNP off then
    /// (remove `iommu=pt`).
    IommuPassthrough => Detail,
    /// `ConfidentialReady=False`: the AMD IOMMU uses the v2 page table, which SNP does not support.
    IommuV2PageTable => Detail,
    /// `ConfidentialReady=False`: vfio-pci's `disable_idle_d3` is not set (add
    /// `vfio-pci.disable_idle_d3=1`).
    VfioIdleD3 => Detail,
    /// `ConfidentialMixed=True`: slices keep GPUs on nvidia beside a confidential VM, a shape
    /// outside NVIDIA's support matrix (informational).
    MixedPartition => Detail,
    /// `P2PSafe`: peer-to-peer is on because the spec says `Enabled` (not checked).
    PolicyEnabled => Detail,
    /// `P2PSafe`: peer-to-peer is off because the spec says `Disabled`.
    PolicyDisabled => Detail,
    /// `P2PSafe`: the probe copied correctly between every GPU pair.
    P2PVerified => Detail,
    /// `P2PSafe`: peer-to-peer was switched off for the server (the message says why).
    P2PDisabled => Detail,
    /// `P2PSafe`: the probe found corrupted copies between GPUs.
    P2PCorruption => Detail,
    /// `P2PSafe`: the IOMMU does not translate; peer-to-peer is safe without a probe.
    NotTranslated => Detail,
    /// `P2PSafe`: the probe has not run yet.
    ProbePending => Detail,
    /// `PreflightPassed=True`.
    PreflightPassed => Detail,
    /// `SmokeTested=True`: every smoke request got what it expects.
    SmokeTestPassed => Detail,
    /// `SmokeTested=False`: a smoke request failed (the message says which and how).
    SmokeTestFailed => Detail,
    /// `RebootRequired=False`: the running kernel has the partition's arguments.
    KernelArgsBooted => Detail,
    /// `RebootRequired=True`: the arguments are written; they take effect at the next boot.
    KernelArgsPending => Detail,
    /// The host booted after the agent wrote the kernel arguments, but the running kernel lacks
    /// them: the bootloader did not boot what it was given; fix the boot and reboot (the agent
    /// does not reboot again).
    KernelArgsNotBooted => Stuck,
    /// `/proc/cmdline` could not be read: whether the kernel runs the arguments is unknown.
    KernelArgsUnknown => Stuck,
    /// `ConfidentialReady=False`: `kvm_amd`'s `sev_snp` is off.
    SevSnpDisabled => Detail,
    /// `ConfidentialReady=False`: the kernel log names no SEV-SNP API version (SNP firmware not
    /// initialised).
    SevFirmwareUnknown => Detail,
    /// `ConfidentialReady=False`: the SNP firmware is older than the API version needed.
    SevFirmwareTooOld => Detail,
    /// `ConfidentialReady=False`: `/dev/sev` is missing.
    SevDeviceMissing => Detail,
    /// `ConfidentialReady=False`: the kernel logged that it refused SNP.
    KernelRefusedSnp => Detail,
    /// `ConfidentialReady=False`: Proxmox's host capabilities say no SNP, so Proxmox refuses
    /// `amd-sev: type=snp`.
    ProxmoxSaysNoSnp => Detail,
    /// `ConfidentialReady=False`: Proxmox says SNP (it reads CPUID only) where the kernel cannot
    /// run SNP guests.
    ProxmoxDisagrees => Detail,
    /// `ConfidentialReady=Unknown`: every host prerequisite is met; the GPUs' confidential-
    /// computing mode was not checked (it needs NVIDIA's gpu-admin-tools).
    CcModeNotChecked => Detail,

    // A partition's GPU health (`GpusHealthy`).
    /// `GpusHealthy=True`: nothing the kernel shows speaks against any GPU of the host.
    GpusHealthy => Detail,
    /// `GpusHealthy=False`: a GPU shows PCIe errors, a narrowed link or an unknown Xid; it
    /// still serves. Read its `status.gpus[].evidence`; watch whether the counters grow.
    GpuSuspect => Detail,
    /// `GpusHealthy=False`: a GPU should not serve until repaired (a fatal PCIe error, an Xid
    /// that needs a reset, a reboot or NVIDIA's support); `status.gpus[].repair` says which.
    GpuUnhealthy => Detail,
    /// `GpusHealthy=False`: a GPU does not answer (config space all ones, fallen off the bus)
    /// or is gone from the bus; its consumer cannot use it. Reboot the node, or reseat or
    /// replace the board named by its serial and slot.
    GpuLost => Detail,
    /// `GpusHealthy=False`: a GPU is quarantined (`spec.health`): out of its slice, its one
    /// server stopped, everything else running. `status.gpus[].quarantine` says its stage; the
    /// agent resets it where the rule allows, else a person repairs it and writes
    /// `gpuplane.dev/accept-health: <hash>` on the partition.
    GpusQuarantined => Detail,

    // A GpuNodePool's conditions.
    /// Every member is updated and whole, no slot is held.
    AllUpdated => Done,
    /// Members hold slots or wait for one, or are not updated yet.
    Updating => Working,
    /// A member failed: the pool is paused until a person clears `status.failure`.
    MemberFailed => Stuck,
    /// `Degraded`: members are degraded (`Stalled`, or their agent is gone).
    MembersDegraded => Detail,
    /// `Updating=False`: no member holds or waits for a slot.
    Idle => Detail,
    /// `Paused=True`: `spec.paused` is true.
    Paused => Detail,
    /// `Paused=True`: `maxUnavailable` gives no slot (`0`, `"0%"`).
    NoBudget => Detail,
    /// `Paused=False`: members may take slots.
    NotPaused => Detail,
}

impl Reason {
    /// The reason named `s`, if it is one.
    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.iter().copied().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Reason {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<Reason> for String {
    fn eq(&self, other: &Reason) -> bool {
        self == other.as_str()
    }
}

impl From<Reason> for String {
    fn from(r: Reason) -> String {
        r.as_str().to_string()
    }
}

impl Standing {
    /// `(Reconciling, Stalled)` as a resource whose `Ready` reason has this standing writes
    /// them: at most one is true, so kstatus's "first abnormal-true condition wins" never
    /// depends on the order of the list.
    pub fn pair(self) -> (bool, bool) {
        match self {
            Standing::Working => (true, false),
            Standing::Stuck => (false, true),
            Standing::Done | Standing::Detail => (false, false),
        }
    }

    /// What kstatus (and so Argo CD's and Flux's health checks shipped in `examples/gitops/`)
    /// reads of a resource in this standing whose status describes its generation; `None` for
    /// a detail.
    pub fn kstatus(self) -> Option<crate::kstatus::Kstatus> {
        use crate::kstatus::Kstatus;
        match self {
            Standing::Working => Some(Kstatus::InProgress),
            Standing::Stuck => Some(Kstatus::Failed),
            Standing::Done => Some(Kstatus::Current),
            Standing::Detail => None,
        }
    }
}

#[cfg(test)]
mod tests;
