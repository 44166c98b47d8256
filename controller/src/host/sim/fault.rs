//! Faults the simulated host injects, as a real host throws them: a sysfs write that returns
//! `EBUSY` or `EIO`, an unbind that blocks until the write deadline fires, `pct` or `systemctl`
//! failing, a full disk or a read-only `/etc/pve` on a config write, and a config file changed
//! by someone else between the agent's read and its write.
//!
//! A fault matches a step by kind and, optionally, by a piece of the step's text (an address,
//! a vmid, a unit name); it fires `times` times and then is gone (it is consumed in the host
//! file, so a later run finds it gone, as when the fault clears). A failing step changes
//! nothing: the host is left exactly as before the step (no partial file). An edit fault
//! changes the file first and then lets the step run on the edited text.

use super::{fail, SimHost};
use crate::host::HostError;
use crate::step::Step;
use serde::{Deserialize, Serialize};

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimFault {
    /// The step kind it hits (`unbind`, `setContainerGpus`, `startUnit`, ...).
    pub step: String,
    /// Only steps whose text contains this (e.g. `0000:81:00.0`, `container 129`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matching: Option<String>,
    /// How many times it still fires.
    #[serde(default = "one")]
    pub times: u32,
    /// What happens.
    #[serde(flatten)]
    pub effect: FaultEffect,
}

fn one() -> u32 {
    1
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FaultEffect {
    /// The step fails with this message and changes nothing.
    Error(String),
    /// Before the step, this text is appended to container `vmid`'s config (someone else's
    /// edit between the agent's read and its write); then the step runs.
    AppendToContainerConfig { vmid: u32, text: String },
}

impl SimHost {
    /// Fires the first fault that matches `step`, if any: consumes one of its times, and fails
    /// the step or makes the edit.
    pub(super) fn inject_fault(&mut self, step: &Step) -> Result<(), HostError> {
        let text = step.to_string();
        let Some(i) = self.file.faults.iter().position(|f| {
            f.times > 0
                && f.step == step.kind()
                && f.matching
                    .as_ref()
                    .is_none_or(|m| text.contains(m.as_str()))
        }) else {
            return Ok(());
        };
        self.file.faults[i].times -= 1;
        let effect = self.file.faults[i].effect.clone();
        self.file.faults.retain(|f| f.times > 0);
        // The fault is spent whatever the step does next: persist that first.
        self.persist()?;
        match effect {
            FaultEffect::Error(message) => Err(fail(step, message)),
            FaultEffect::AppendToContainerConfig { vmid, text } => {
                if let Some(c) = self.file.containers.get_mut(&vmid) {
                    c.config.push_str(&text);
                }
                self.persist()
            }
        }
    }
}
