//! Steps: the words the planner and the host backends share.
//!
//! The planner (`plan/`) produces steps; every backend (`host/`) applies them one at a time
//! through the one door (`apply.rs`). The type lives below both so that neither imports the
//! other: backends never see the planner, the planner never sees a backend.

use crate::host::model::{Location, UnitRef};
use crate::proxmox::pci_cfg::MapEntry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// One step. Applying a step twice has the same effect as once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Step {
    /// `systemctl stop` a unit.
    StopUnit { unit: UnitRef },
    /// `pct stop <vmid>`.
    StopContainer { vmid: u32 },
    /// `modprobe <module>` for a PCI driver that is not registered.
    LoadDriver { driver: String },
    /// Write `driver_override` (`None` clears it).
    SetDriverOverride {
        address: String,
        driver: Option<String>,
    },
    /// Write the address to `/sys/bus/pci/drivers/<driver>/unbind`.
    Unbind { address: String, driver: String },
    /// Write the address to `/sys/bus/pci/drivers_probe` (binds per `driver_override`).
    Probe { address: String },
    /// Clear `driver_override`, then `drivers_probe`: the kernel binds its default driver (one
    /// step, so no state in between looks finished).
    ReturnToHostDriver { address: String },
    /// Write `1` to `/sys/bus/pci/devices/<address>/reset` (the kernel resets that function
    /// only, by the first method it offers, `reset_method`: FLR, PM, bus), then store `ledger`,
    /// which records the reset: one step, so a plan never sees the record without the reset
    /// (a crash between the two resets once more). Planned only for a quarantined GPU nothing
    /// uses (`plan/quarantine.rs`).
    ResetGpu {
        address: String,
        ledger: crate::host::ledger::Ledger,
    },
    /// Make the GPU device lines of `/etc/pve/lxc/<vmid>.conf` give exactly these minors.
    SetContainerGpus { vmid: u32, minors: BTreeSet<u32> },
    /// Make this node's map lines of a mapping in `/etc/pve/mapping/pci.cfg` exactly `entries`.
    SetPciMapping {
        mapping: String,
        entries: Vec<MapEntry>,
    },
    /// `pct start <vmid>`.
    StartContainer { vmid: u32 },
    /// Run the P2P correctness probe over the GPUs (CUDA indices where it runs) and cache the result.
    ProbeP2p {
        location: Location,
        python: String,
        /// The unit's user (`None`: root): the probe runs as it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        gpus: Vec<String>,
        cuda_indices: Vec<u32>,
    },
    /// Keep a copy of a unit that reached Ready (what `rollback: Auto` goes back to).
    SaveReadyUnit { unit: UnitRef, content: String },
    /// Record that the unit with this SHA-256 failed to start, so it is not written again.
    MarkUnitFailed { unit: UnitRef, hash: String },
    /// Stop-and-forget for a deleted server or an older unit of a renamed or moved one: stop it
    /// if it runs, remove the unit file (and the agent's records of it), `systemctl
    /// daemon-reload`.
    RemoveUnit { unit: UnitRef },
    /// Write the unit file (atomically).
    WriteUnit { unit: UnitRef, content: String },
    /// `systemctl daemon-reload` at a location.
    DaemonReload { location: Location },
    /// Write the agent's GPU ledger (`/var/lib/gpuplane/gpus.json`, atomically).
    WriteLedger { ledger: crate::host::ledger::Ledger },
    /// Edit the bootloader's config (`/etc/kernel/cmdline` or `/etc/default/grub`): add the
    /// `present` words it lacks, remove the `absent` ones; every other byte kept, written
    /// atomically after the agent's record says what it writes.
    SetKernelArgs {
        bootloader: crate::bootloader::Bootloader,
        present: Vec<String>,
        absent: Vec<String>,
    },
    /// Run the bootloader's refresh command (`proxmox-boot-tool refresh`, `update-grub`) and
    /// record the config it was refreshed from and the boot it ran in.
    RefreshBootloader {
        bootloader: crate::bootloader::Bootloader,
    },
    /// Reboot the host (`reboot: Auto`) to boot the kernel arguments the bootloader was
    /// refreshed with, planned in boot `boot_id` and refused in any other: `systemctl reboot`,
    /// then the agent's record says the reboot was asked from that boot (no run in it asks
    /// again). The agent ends with the boot; it verifies the arguments when it runs again.
    Reboot { boot_id: String },
    /// `systemctl start` (or `restart` when `restart`).
    StartUnit { unit: UnitRef, restart: bool },
    /// Wait until the server answers `/health_generate` 200 and lists its model, or stalls;
    /// with `smoke_test`, until its smoke test (which runs beside the observation) has a result.
    WaitReady {
        unit: UnitRef,
        served_name: String,
        stall_after_seconds: u64,
        deadline_seconds: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        smoke_test: bool,
    },
}

impl Step {
    /// Whether applying the step changes the host. Only `WaitReady` is a pure read; the P2P
    /// probe counts as a write: it runs a program on the GPUs and stores its result in the
    /// agent's state directory.
    pub fn is_write(&self) -> bool {
        !matches!(self, Step::WaitReady { .. })
    }

    /// `kind:target`, e.g. `unbind:0000:81:00.0`: distinct per target, so event recorders that
    /// merge events by action keep one event per host change (at most 128 characters).
    pub fn action(&self) -> String {
        let target = match self {
            Step::StopUnit { unit }
            | Step::WriteUnit { unit, .. }
            | Step::StartUnit { unit, .. }
            | Step::WaitReady { unit, .. } => unit.key(),
            Step::SaveReadyUnit { unit, .. }
            | Step::MarkUnitFailed { unit, .. }
            | Step::RemoveUnit { unit } => unit.key(),
            Step::StopContainer { vmid }
            | Step::StartContainer { vmid }
            | Step::SetContainerGpus { vmid, .. } => vmid.to_string(),
            Step::LoadDriver { driver } => driver.clone(),
            Step::SetDriverOverride { address, .. }
            | Step::Unbind { address, .. }
            | Step::Probe { address }
            | Step::ReturnToHostDriver { address }
            | Step::ResetGpu { address, .. } => address.clone(),
            Step::SetPciMapping { mapping, .. } => mapping.clone(),
            Step::ProbeP2p { gpus, .. } => gpus.join(","),
            Step::DaemonReload { location } => location.to_string(),
            Step::WriteLedger { .. } => "gpus".into(),
            Step::SetKernelArgs { bootloader, .. } | Step::RefreshBootloader { bootloader } => {
                bootloader.config_path().into()
            }
            Step::Reboot { boot_id } => boot_id.clone(),
        };
        crate::text::truncate(&format!("{}:{target}", self.kind()), 128)
    }

    /// A short machine-friendly kind, as in JSON output.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::StopUnit { .. } => "stopUnit",
            Step::StopContainer { .. } => "stopContainer",
            Step::LoadDriver { .. } => "loadDriver",
            Step::SetDriverOverride { .. } => "setDriverOverride",
            Step::Unbind { .. } => "unbind",
            Step::Probe { .. } => "probe",
            Step::ReturnToHostDriver { .. } => "returnToHostDriver",
            Step::ResetGpu { .. } => "resetGpu",
            Step::SetContainerGpus { .. } => "setContainerGpus",
            Step::SetPciMapping { .. } => "setPciMapping",
            Step::StartContainer { .. } => "startContainer",
            Step::ProbeP2p { .. } => "probeP2p",
            Step::WriteUnit { .. } => "writeUnit",
            Step::RemoveUnit { .. } => "removeUnit",
            Step::SaveReadyUnit { .. } => "saveReadyUnit",
            Step::MarkUnitFailed { .. } => "markUnitFailed",
            Step::DaemonReload { .. } => "daemonReload",
            Step::WriteLedger { .. } => "writeLedger",
            Step::SetKernelArgs { .. } => "setKernelArgs",
            Step::RefreshBootloader { .. } => "refreshBootloader",
            Step::Reboot { .. } => "reboot",
            Step::StartUnit { .. } => "startUnit",
            Step::WaitReady { .. } => "waitReady",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::StopUnit { unit } => write!(f, "stop unit {unit}"),
            Step::StopContainer { vmid } => write!(f, "stop container {vmid}"),
            Step::LoadDriver { driver } => write!(f, "load kernel module {driver}"),
            Step::SetDriverOverride {
                address,
                driver: Some(d),
            } => write!(f, "set driver_override of {address} to {d}"),
            Step::SetDriverOverride {
                address,
                driver: None,
            } => write!(f, "clear driver_override of {address}"),
            Step::Unbind { address, driver } => write!(f, "unbind {address} from {driver}"),
            Step::Probe { address } => write!(f, "probe drivers for {address}"),
            Step::ReturnToHostDriver { address } => {
                write!(f, "return {address} to its host driver")
            }
            Step::ResetGpu { address, .. } => {
                write!(f, "reset GPU {address} (its function only) and record it")
            }
            Step::SetContainerGpus { vmid, minors } => {
                let m: Vec<String> = minors.iter().map(|m| format!("/dev/nvidia{m}")).collect();
                write!(
                    f,
                    "set GPU devices of container {vmid} to [{}]",
                    m.join(", ")
                )
            }
            Step::SetPciMapping { mapping, entries } if entries.is_empty() => {
                write!(f, "remove this node's GPUs from PCI mapping {mapping}")
            }
            Step::SetPciMapping { mapping, entries } => {
                let p: Vec<String> = entries.iter().map(|e| e.paths.join(";")).collect();
                write!(f, "set PCI mapping {mapping} to [{}]", p.join(", "))
            }
            Step::StartContainer { vmid } => write!(f, "start container {vmid}"),
            Step::ProbeP2p { location, gpus, .. } => write!(
                f,
                "probe P2P correctness over {} GPUs on {location}",
                gpus.len()
            ),
            Step::WriteUnit { unit, .. } => write!(f, "write unit {unit}"),
            Step::RemoveUnit { unit } => write!(f, "remove unit {unit}"),
            Step::SaveReadyUnit { unit, .. } => {
                write!(f, "keep {unit} as the last unit that reached Ready")
            }
            Step::MarkUnitFailed { unit, hash } => write!(
                f,
                "mark this version of {unit} as failed ({})",
                &hash[..12.min(hash.len())]
            ),
            Step::DaemonReload { location } => write!(f, "systemctl daemon-reload on {location}"),
            Step::WriteLedger { ledger } => {
                write!(f, "record {} GPUs in the GPU ledger", ledger.gpus.len())
            }
            Step::SetKernelArgs {
                bootloader,
                present,
                absent,
            } => kernel_args_words(f, bootloader.config_path(), present, absent),
            Step::RefreshBootloader { bootloader } => {
                write!(f, "run {}", bootloader.refresh_command().join(" "))
            }
            Step::Reboot { .. } => write!(f, "reboot the host (systemctl reboot)"),
            Step::StartUnit {
                unit,
                restart: false,
            } => write!(f, "start unit {unit}"),
            Step::StartUnit {
                unit,
                restart: true,
            } => write!(f, "restart unit {unit}"),
            Step::WaitReady { unit, .. } => write!(f, "wait for {unit} to be ready"),
        }
    }
}

/// "set kernel arguments in FILE: add A B; remove C".
fn kernel_args_words(
    f: &mut std::fmt::Formatter<'_>,
    file: impl std::fmt::Display,
    present: &[String],
    absent: &[String],
) -> std::fmt::Result {
    write!(f, "set kernel arguments in {file}")?;
    if !present.is_empty() {
        write!(f, ": add {}", present.join(" "))?;
    }
    if !absent.is_empty() {
        let sep = if present.is_empty() { ":" } else { ";" };
        write!(f, "{sep} remove {}", absent.join(" "))?;
    }
    Ok(())
}
