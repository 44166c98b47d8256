//! Host backends behind one trait.
//!
//! A backend observes (reads only) and applies one plan step at a time. Backends
//! know nothing of Kubernetes. All host writes reach a backend through
//! [`crate::door::Door`], the one place that counts, logs and dry-runs them.

pub mod health;
pub mod identity;
pub mod ledger;
pub mod local;
pub mod model;
pub mod preflight;
pub mod sim;

use crate::step::Step;
use model::HostState;

/// A failure of a backend.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot read host description {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("host description {path} is invalid: {message}")]
    Parse { path: String, message: String },
    #[error("{step} failed: {message}")]
    Step { step: String, message: String },
    /// A process holds a GPU the step would take away (the step was not done).
    #[error("{step} failed: GpuInUse: {address} is held by {}; not unbinding", holders.join(", "))]
    InUse {
        step: String,
        address: String,
        holders: Vec<String>,
    },
    /// Another writer holds a lock the step needs (Proxmox's file locks): the step was not
    /// done; retry later.
    #[error("{step} waits: {message}")]
    LockHeld {
        step: String,
        lock: String,
        message: String,
    },
    #[error("{0}")]
    Other(String),
}

/// What applying a step reports back (beyond success).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StepOutcome {
    /// A line for the user, e.g. the P2P probe's result.
    pub detail: Option<String>,
    /// What a killed writer had left (a stale lock, a temporary file) and this step removed.
    pub leftovers: Vec<String>,
}

/// How often an agent asks a starting server whether it is ready ([`Host::probe_ready`]).
pub const PROBE_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// How often a waiting agent compares the host's health mark ([`Host::health_mark`]).
pub const HEALTH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A host: real, or simulated.
pub trait Host {
    /// Reads the whole host state. Never changes anything.
    fn observe(&mut self) -> Result<HostState, HostError>;
    /// Applies one step. Must be idempotent: applying it again changes nothing more.
    fn apply(&mut self, step: &Step) -> Result<StepOutcome, HostError>;
    /// Lets `secs` seconds pass (the simulated host advances its clock).
    fn sleep(&mut self, secs: u64);
    /// Seconds on the host's clock.
    fn now(&self) -> u64;
    /// `state` brought up to date after `step` was applied, reading only what that step can
    /// change; `Ok(None)` when the backend cannot (then the caller observes everything again).
    /// Takes the state by reference so that a backend that cannot refresh costs no copy.
    /// The converge loop still observes everything before it calls the host converged, and a
    /// step's own safety checks (holders before an unbind) read the host right before writing.
    fn refresh(
        &mut self,
        _step: &Step,
        _state: &HostState,
    ) -> Result<Option<HostState>, HostError> {
        Ok(None)
    }
    /// Names the units to observe (the agent's servers); backends that see all units ignore it.
    fn watch_units(&mut self, _units: &[model::UnitRef]) {}
    /// Names the servers to preflight (what to read, where); `observe` then fills
    /// `HostState::preflight` for them. Backends that cannot look ignore it.
    fn watch_preflight(&mut self, _requests: &[model::PreflightRequest]) {}
    /// A cheap look at whether the server `unit` runs answers `/health_generate` with 200 now
    /// (both agents ask every [`PROBE_EVERY`] while a server starts),
    /// to wake a waiting agent early (readiness is still decided by a full observation);
    /// `None` when the backend cannot tell cheaply (the agent then waits its poll interval).
    fn probe_ready(&mut self, _unit: &model::UnitRef) -> Option<bool> {
        None
    }
    /// A cheap fingerprint of the GPUs' health facts (AER counters, links, config space
    /// answering, the GPU driver's events in the kernel log; `host/health.rs`): it changes when
    /// one of them does. Both agents compare it every [`HEALTH_EVERY`] while they wait, to run a
    /// pass as soon as the kernel reports a fault (the judgment is still made on a full
    /// observation). `None` when the backend cannot tell cheaply.
    fn health_mark(&mut self) -> Option<u64> {
        None
    }
    /// The host as a description file that can be loaded again (`--save-host`), if the backend can.
    fn save(&self) -> Option<Result<String, HostError>> {
        None
    }
}
