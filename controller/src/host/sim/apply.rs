//! Applying one step to the simulated host, with the kernel's, Proxmox's and systemd's rules.

use super::{fail, SimHost};
use crate::host::model::*;
use crate::host::{HostError, StepOutcome};
use crate::proxmox::lxc_conf::{DesiredGpuMounts, LxcConfig, MountStyle};
use crate::proxmox::pci_cfg::{MapEntry, PciCfg};
use crate::step::Step;
use std::collections::BTreeSet;

impl SimHost {
    /// Applies `step` with the function of its kind; they follow below by family: systemd units,
    /// containers, PCI binding, Proxmox files, the P2P probe.
    pub(super) fn apply_step(&mut self, step: &Step) -> Result<StepOutcome, HostError> {
        match step {
            // systemd units
            Step::StopUnit { unit } => self.stop_unit(unit),
            Step::WriteUnit { unit, content } => self.write_unit(step, unit, content)?,
            Step::DaemonReload { location } => self.daemon_reload(step, *location)?,
            Step::StartUnit { unit, restart } => self.start_unit(step, unit, *restart)?,
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
            Step::WriteLedger { ledger } => self.file.gpu_ledger = Some(ledger.clone()),
            // the bootloader
            Step::SetKernelArgs {
                bootloader,
                present,
                absent,
            } => self.set_kernel_args(step, *bootloader, present, absent)?,
            Step::RefreshBootloader { bootloader } => self.refresh_bootloader(step, *bootloader)?,
            Step::Reboot { boot_id } => self.ask_reboot(step, boot_id)?,
            // containers
            Step::StopContainer { vmid } => self.stop_container(step, *vmid)?,
            Step::StartContainer { vmid } => self.start_container(step, *vmid)?,
            // PCI binding
            Step::LoadDriver { driver } => {
                self.file.pci_drivers.insert(driver.clone());
            }
            Step::SetDriverOverride { address, driver } => {
                self.dev_mut(address, step)?.driver_override = driver.clone();
            }
            Step::Unbind { address, driver } => self.unbind(step, address, driver)?,
            Step::ReturnToHostDriver { address } => {
                self.dev_mut(address, step)?.driver_override = None;
                return self.apply_step(&Step::Probe {
                    address: address.clone(),
                });
            }
            Step::Probe { address } => self.probe(step, address)?,
            Step::ResetGpu { address, ledger } => {
                if let Err(e) = self.reset(step, address) {
                    // As the real backend: a refused reset is recorded as escalated.
                    let why = e.to_string();
                    self.file.gpu_ledger = Some(ledger.with_reset_failed(address, &why));
                    return Ok(StepOutcome {
                        detail: Some(format!(
                            "the reset failed, the quarantine is escalated: {why}"
                        )),
                        leftovers: vec![],
                    });
                }
                self.file.gpu_ledger = Some(ledger.clone());
            }
            // Proxmox files
            Step::SetContainerGpus { vmid, minors } => {
                self.set_container_gpus(step, *vmid, minors)?
            }
            Step::SetPciMapping { mapping, entries } => self.set_pci_mapping(mapping, entries),
            // the P2P probe
            Step::ProbeP2p { location, gpus, .. } => return self.probe_p2p(step, *location, gpus),
        }
        Ok(StepOutcome::default())
    }

    // systemd units, and the agent's records of them.

    /// `systemctl stop`.
    fn stop_unit(&mut self, unit: &UnitRef) {
        self.unit_mut(unit).stop();
    }

    /// Writes the unit file (`pct push` into a container, which must run).
    fn write_unit(&mut self, step: &Step, unit: &UnitRef, content: &str) -> Result<(), HostError> {
        self.require_running(step, unit.location, " (pct push needs a running container)")?;
        self.unit_mut(unit).file = Some(content.to_string());
        Ok(())
    }

    /// `systemctl daemon-reload`: every unit at `location` loads its file.
    fn daemon_reload(&mut self, step: &Step, location: Location) -> Result<(), HostError> {
        self.require_running(step, location, "")?;
        for (k, u) in self.file.units.iter_mut() {
            if crate::host::model::UnitRef::from_key(k).is_some_and(|r| r.location == location) {
                u.loaded = u.file.clone();
            }
        }
        Ok(())
    }

    /// `systemctl start` of an active unit does nothing; of a failed one, starts it again.
    fn start_unit(&mut self, step: &Step, unit: &UnitRef, restart: bool) -> Result<(), HostError> {
        let now = self.file.clock;
        self.require_running(step, unit.location, "")?;
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
            return Ok(());
        }
        u.started_at = Some(now);
        u.running = Some(content);
        Ok(())
    }

    // Containers.

    /// `pct stop`: the container's units stop with it.
    fn stop_container(&mut self, step: &Step, vmid: u32) -> Result<(), HostError> {
        let c = self.container_mut(step, vmid)?;
        c.state = RunState::Stopped;
        c.started_with = None;
        let prefix = format!("lxc-{vmid}/");
        for (k, u) in self.file.units.iter_mut() {
            if k.starts_with(&prefix) {
                u.stop();
            }
        }
        Ok(())
    }

    /// `pct start`: fails like PVE when a `devN` GPU line names a `/dev/nvidiaN` that is not there.
    fn start_container(&mut self, step: &Step, vmid: u32) -> Result<(), HostError> {
        let mounts = self.container_mut(step, vmid)?.gpu_mounts();
        if mounts.style == Some(MountStyle::DevN) {
            // PVE stats every devN path at start: a missing /dev/nvidiaN fails the start.
            let present: BTreeSet<u32> = self
                .file
                .pci_devices
                .iter()
                .filter_map(|d| d.nvidia_minor())
                .collect();
            if let Some(m) = mounts.minors.iter().find(|m| !present.contains(m)) {
                return Err(fail(step, format!("Device /dev/nvidia{m} does not exist")));
            }
        }
        let c = self.container_mut(step, vmid)?;
        c.state = RunState::Running;
        c.started_with = Some(mounts.minors);
        Ok(())
    }

    // PCI binding: the kernel's `driver_override`, unbind, `drivers_probe`.

    /// Unbinds `address` from `driver` (nothing when bound elsewhere); refused while it is held.
    fn unbind(&mut self, step: &Step, address: &str, driver: &str) -> Result<(), HostError> {
        let holders = self.holders_of(address);
        let d = self.dev_mut(address, step)?;
        if d.driver.as_deref() != Some(driver) {
            return Ok(());
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
        Ok(())
    }

    /// A function reset (`/sys/bus/pci/devices/<address>/reset`): refused while a process holds
    /// the device (the real kernel would pull it from under them; the planner never asks then)
    /// and for a device that does not answer. What the kernel counted and logged stays, as on
    /// a host: its AER counters are since boot, its log is the log.
    fn reset(&mut self, step: &Step, address: &str) -> Result<(), HostError> {
        let holders = self.holders_of(address);
        let d = self.dev_mut(address, step)?;
        if !holders.is_empty() {
            return Err(fail(
                step,
                format!("{address} is in use: not reset under its users"),
            ));
        }
        if d.health.not_responding {
            return Err(fail(
                step,
                format!("{address} does not answer: its reset fails"),
            ));
        }
        Ok(())
    }

    /// `drivers_probe`: an unbound device gets its override, else its default driver, if loaded.
    fn probe(&mut self, step: &Step, address: &str) -> Result<(), HostError> {
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
        Ok(())
    }

    // Proxmox files.

    /// Makes the GPU device lines of `/etc/pve/lxc/<vmid>.conf` give exactly `minors`.
    fn set_container_gpus(
        &mut self,
        step: &Step,
        vmid: u32,
        minors: &BTreeSet<u32>,
    ) -> Result<(), HostError> {
        let uvm = self.file.nvidia.uvm_major;
        let c = self.container_mut(step, vmid)?;
        let mut cfg = LxcConfig::parse(&c.config);
        cfg.set_gpu_mounts(&DesiredGpuMounts {
            minors: minors.clone(),
            uvm_major: uvm,
            default_style: MountStyle::MountEntry,
        });
        c.config = cfg.render();
        Ok(())
    }

    /// Makes this node's entries of `mapping` in `/etc/pve/mapping/pci.cfg` exactly `entries`.
    fn set_pci_mapping(&mut self, mapping: &str, entries: &[MapEntry]) {
        let mut cfg = PciCfg::parse(&self.file.pci_cfg);
        cfg.set_node_entries(mapping, &self.file.node_name.clone(), entries);
        self.file.pci_cfg = cfg.render();
    }

    // The P2P probe.

    /// The P2P probe: every pair of `gpus` fails on a corrupt host whose IOMMU translates; the
    /// result is cached for the current binding and IOMMU state.
    fn probe_p2p(
        &mut self,
        step: &Step,
        location: Location,
        gpus: &[String],
    ) -> Result<StepOutcome, HostError> {
        self.require_running(step, location, "")?;
        let visible = self.visible_gpus(location);
        if let Some(g) = gpus.iter().find(|g| !visible.contains(g)) {
            return Err(fail(step, format!("GPU {g} is not visible on {location}")));
        }
        let st = self.observe_inner();
        let corrupt = self.file.behaviour.p2p_corrupt && st.iommu.mode() == IommuMode::Translated;
        let mut failing = Vec::new();
        for (i, a) in gpus.iter().enumerate() {
            for b in gpus.iter().skip(i + 1) {
                if corrupt {
                    failing.push(format!("{a}<->{b}"));
                }
            }
        }
        let pairs = gpus.len() * (gpus.len() - 1) / 2;
        let detail = if failing.is_empty() {
            format!("all {pairs} pairs copied correctly")
        } else {
            format!("{} of {pairs} pairs returned corrupted data", failing.len())
        };
        let probe = P2pProbe {
            gpus: gpus.to_vec(),
            key: st.p2p_key(gpus),
            failing_pairs: failing,
            location: Some(location),
        };
        self.file
            .p2p_probes
            .retain(|p| !p.is_for(gpus, Some(location)));
        self.file.p2p_probes.push(probe);
        Ok(StepOutcome {
            detail: Some(detail),
            leftovers: vec![],
        })
    }
}
