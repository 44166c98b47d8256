//! What the planner returns: the ordered steps with their reasons, blockers and notes.

use crate::step::Step;
use gpuplane_crds::reason::Reason;
use serde::{Deserialize, Serialize};

/// A step and why the planner wants it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedStep {
    #[serde(flatten)]
    pub step: Step,
    pub why: String,
}

/// Something that keeps the plan from going on, to be reported as a condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    /// `GpuPartition/<name>` or `InferenceServer/<ns>/<name>`.
    pub resource: crate::resource_key::ResourceKey,
    /// Condition reason (`GpuInUse`, `HostLayoutChanged`, ...).
    pub reason: Reason,
    pub message: String,
}

/// The ordered steps from the observed to the desired host.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub steps: Vec<PlannedStep>,
    /// Problems that keep parts of the plan from being made; steps for other parts may remain.
    #[serde(default)]
    pub blockers: Vec<Blocker>,
    /// Why the plan stops early (later steps depend on a step's result), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues_after: Option<String>,
    /// Facts the planner decided (e.g. why P2P was disabled), for the status and the user.
    #[serde(default)]
    pub notes: Vec<Note>,
}

/// A decision worth telling the user about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Note {
    pub resource: crate::resource_key::ResourceKey,
    /// What it is (`P2PDisabled`, `RolledBack`, `PreflightFailed`): events and the status match
    /// on it, never on the message's words.
    pub reason: Reason,
    pub message: String,
}

impl Plan {
    /// Converged: nothing to do and nothing blocking.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty() && self.blockers.is_empty()
    }
}
