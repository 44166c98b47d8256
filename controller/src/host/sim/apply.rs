//! Applying one step to the simulated host, with the kernel's, Proxmox's and systemd's rules.

use super::{fail, parse_unit_key, SimHost};
use crate::host::model::*;
use crate::host::{HostError, StepOutcome};
use crate::proxmox::lxc_conf::{DesiredGpuMounts, LxcConfig, MountStyle};
use crate::proxmox::pci_cfg::PciCfg;
use crate::step::Step;
use std::collections::BTreeSet;

impl SimHost {
    pub(super) fn apply_step(&mut self, step: &Step) -> Result<StepOutcome, HostError> {
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
