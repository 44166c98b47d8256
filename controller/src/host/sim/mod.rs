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
//!
//! `file.rs` holds the description's types, `load.rs` reads and saves it (and keeps its file
//! in step, step by step), `observe.rs` shows it as a real host would, `apply.rs` applies steps to it, `fault.rs`
//! injects the faults the description lists,
//! and `server.rs` plays the SGLang process a unit starts.

mod apply;
mod boot;
mod fault;
mod file;
mod files;
mod load;
mod memo;
mod observe;
mod server;

pub use boot::SimBoot;
pub use fault::{FaultEffect, SimFault};
pub use file::{Behaviour, SimContainer, SimDevice, SimHolder, SimHostFile, SimUnit};
pub use files::{SimFiles, SimInterpreter, SimModel};

use super::model::*;
use super::{Host, HostError, StepOutcome};
use crate::step::Step;
use load::Live;

/// The simulated host.
#[derive(Debug, Clone)]
pub struct SimHost {
    pub file: SimHostFile,
    live: Option<Live>,
    /// The file this host is kept in (`open`, `live`): written after every step.
    backing: Option<std::path::PathBuf>,
    /// Servers to preflight (`Host::watch_preflight`).
    preflight: Vec<PreflightRequest>,
    /// Its texts, parsed once each (`memo.rs`).
    memo: memo::Memos,
}

impl SimHost {
    /// Whether `loc` runs: the host always does, a container while it is running.
    pub fn runs(&self, loc: Location) -> bool {
        match loc {
            Location::Host => true,
            Location::Container(v) => self
                .file
                .containers
                .get(&v)
                .is_some_and(|c| c.state == RunState::Running),
        }
    }

    /// Process `pid` running `command` holds the device at `address` (what `fuser` shows);
    /// the holder's other facts (its container, VM or unit) are the caller's to set.
    pub fn hold(&mut self, address: &str, pid: u32, command: &str) -> &mut Holder {
        self.file.holders.push(SimHolder {
            address: address.into(),
            holder: Holder {
                pid,
                command: command.into(),
                ..Holder::default()
            },
        });
        &mut self.file.holders.last_mut().expect("just pushed").holder
    }

    /// The device at `addr`, or the step fails.
    fn dev_mut(&mut self, addr: &str, step: &Step) -> Result<&mut SimDevice, HostError> {
        self.file
            .pci_devices
            .iter_mut()
            .find(|d| d.address == addr)
            .ok_or_else(|| fail(step, format!("no PCI device {addr}")))
    }

    /// The unit at `r`, created empty when the description has none.
    fn unit_mut(&mut self, r: &UnitRef) -> &mut SimUnit {
        self.file.units.entry(r.key()).or_default()
    }

    /// The container `vmid`, or the step fails.
    fn container_mut(&mut self, step: &Step, vmid: u32) -> Result<&mut SimContainer, HostError> {
        self.file
            .containers
            .get_mut(&vmid)
            .ok_or_else(|| fail(step, format!("no container {vmid}")))
    }

    /// Fails the step unless `loc` runs (the host always does); `why` ends the message.
    fn require_running(&self, step: &Step, loc: Location, why: &str) -> Result<(), HostError> {
        if self.runs(loc) {
            Ok(())
        } else {
            Err(fail(step, format!("{loc} is not running{why}")))
        }
    }
}

/// The error of a step that failed with `message`.
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
        if step.is_write() {
            self.inject_fault(step)?;
        }
        let out = self.apply_step(step)?;
        self.persist()?;
        Ok(out)
    }

    fn sleep(&mut self, secs: u64) {
        match &self.live {
            Some(l) => std::thread::sleep(std::time::Duration::from_millis(secs * 1000 / l.speed)),
            None => {
                self.file.clock += secs;
                // The file keeps the host's time too; a failure shows at the next step's write.
                if let Err(e) = self.persist() {
                    tracing::warn!("{e}");
                }
            }
        }
    }

    fn now(&self) -> u64 {
        match &self.live {
            Some(l) => l.clock(),
            None => self.file.clock,
        }
    }

    fn watch_preflight(&mut self, requests: &[PreflightRequest]) {
        self.preflight = requests.to_vec();
    }

    fn probe_ready(&mut self, unit: &crate::host::model::UnitRef) -> Option<bool> {
        self.refresh().ok()?;
        let st = self.observe_inner();
        let server = st.unit(unit)?.server.as_ref()?;
        Some(server.http == crate::host::model::HttpState::Healthy)
    }

    fn health_mark(&mut self) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        self.refresh().ok()?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for d in &self.file.pci_devices {
            (&d.address, &d.health).hash(&mut h);
        }
        self.file.kernel_log.hash(&mut h);
        Some(h.finish())
    }

    fn save(&self) -> Option<Result<String, HostError>> {
        Some(
            serde_yaml::to_string(&self.file)
                .map_err(|e| HostError::Other(format!("cannot write host description: {e}"))),
        )
    }
}

#[cfg(test)]
mod tests;
