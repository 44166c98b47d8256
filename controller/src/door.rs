//! The one door every host write goes through.
//!
//! [`Door::apply`] logs each step, counts the writes (by kind), honours dry-run and
//! can inject a failure at the N-th write, or kill the process right after it (for
//! crash-recovery tests). Backends are only ever mutated from here.

use crate::host::{Host, HostError, StepOutcome};
use crate::step::Step;
use std::collections::BTreeMap;

/// Counts, logs and optionally suppresses host writes.
pub struct Door<'h> {
    host: &'h mut dyn Host,
    dry_run: bool,
    writes: u64,
    by_kind: BTreeMap<&'static str, u64>,
    /// Fail the write with this 1-based index (tests: a crash mid-plan).
    fail_at: Option<u64>,
    /// SIGKILL the process right after the write with this 1-based index has reached the host.
    kill_after: Option<u64>,
}

/// The environment variable that makes `gpuplane converge` kill itself with SIGKILL right after
/// its N-th host write (the crash-recovery harness, `controller/tests/crash_points.rs`).
pub const KILL_AFTER_WRITE_ENV: &str = "GPUPLANE_KILL_AFTER_WRITE";

impl<'h> Door<'h> {
    pub fn new(host: &'h mut dyn Host) -> Self {
        Door {
            host,
            dry_run: false,
            writes: 0,
            by_kind: BTreeMap::new(),
            fail_at: None,
            kill_after: None,
        }
    }

    /// Makes every write a no-op that is still logged (and not counted).
    pub fn dry_run(mut self, yes: bool) -> Self {
        self.dry_run = yes;
        self
    }

    /// Fails the `n`-th write with an injected error, before it reaches the host.
    pub fn fail_at(mut self, n: Option<u64>) -> Self {
        self.fail_at = n;
        self
    }

    /// Kills the process with SIGKILL right after the `n`-th write has reached the host: no
    /// destructor, no flush, no later write runs, as when the machine or the agent is killed.
    pub fn kill_after(mut self, n: Option<u64>) -> Self {
        self.kill_after = n;
        self
    }

    /// Applies one step.
    pub fn apply(&mut self, step: &Step) -> Result<StepOutcome, HostError> {
        if !step.is_write() {
            return self.host.apply(step);
        }
        if self.dry_run {
            tracing::info!(kind = step.kind(), "dry-run: {step}");
            return Ok(StepOutcome::default());
        }
        if self.fail_at == Some(self.writes + 1) {
            return Err(HostError::Step {
                step: step.to_string(),
                message: "injected failure".into(),
            });
        }
        tracing::info!(kind = step.kind(), "host write: {step}");
        let out = self.host.apply(step)?;
        self.writes += 1;
        *self.by_kind.entry(step.kind()).or_default() += 1;
        if self.kill_after == Some(self.writes) {
            crate::crashpoint::kill_self();
        }
        Ok(out)
    }

    /// Host writes made so far.
    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// Host writes by step kind.
    pub fn writes_by_kind(&self) -> &BTreeMap<&'static str, u64> {
        &self.by_kind
    }

    /// The host, for reads (observe, sleep).
    pub fn host(&mut self) -> &mut dyn Host {
        self.host
    }
}
