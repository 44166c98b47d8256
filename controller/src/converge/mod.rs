//! The converge loop: observe → plan → apply one step → observe again.
//!
//! There is no hidden progress state: every iteration re-observes the host and
//! re-plans, so a crash at any point is finished by the next run. The loop ends
//! when the plan is empty (converged), when something blocks, when a step fails,
//! when a server does not become ready, or after a bounded number of steps.
//!
//! # Re-observing only what a step changed
//! After a step the backend may bring the last observation up to date itself
//! ([`crate::host::Host::refresh`]: the local host re-reads the one device a binding write
//! touched) instead of observing the whole host again. Such a state is used only to pick the
//! next step: before the loop ends, converged or blocked, it observes everything once more and
//! plans again, so what it reports is always a full, fresh observation.

mod wait;

pub use wait::{wait_ready, StartupTrack, WaitOutcome};

use crate::desired::Desired;
use crate::door::Door;
use crate::host::model::HostState;
use crate::host::HostError;
use crate::plan::{plan, Blocker, Note, Plan, PlannedStep, Step};
use serde::Serialize;
use std::collections::BTreeMap;

/// A pool's disruption slot: what a pool member must hold before a step that disrupts its
/// host's users ([`crate::plan::disruption`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Slot {
    /// The `GpuNodePool` the member belongs to.
    pub pool: String,
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "disruption slot of pool {}", self.pool)
    }
}

/// Loop limits.
#[derive(Debug, Clone)]
pub struct Options {
    /// Upper bound on applied steps (guards against a plan that never shrinks).
    pub max_steps: usize,
    /// Seconds between readiness polls.
    pub poll_seconds: u64,
    /// `true`: block on readiness (CLI); `false`: look once and return `Stop::Waiting` (controller).
    pub block_on_ready: bool,
    /// A pool member without a disruption slot: the slot it lacks. The loop then stops before
    /// any step that disrupts the host's users ([`crate::plan::disruption`]) with
    /// [`Stop::WaitingForSlot`], having done nothing for that step. `None`: no such limit.
    pub hold_disruptions: Option<Slot>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_steps: 500,
            poll_seconds: 5,
            block_on_ready: true,
            hold_disruptions: None,
        }
    }
}

/// One applied step.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    #[serde(flatten)]
    pub planned: PlannedStep,
    /// What it reported (probe results, readiness).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What a killed writer had left (a stale lock, a temporary file) and this step removed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leftovers: Vec<String>,
    /// Host clock when it was applied.
    pub at: u64,
}

/// Why the loop stopped before converging.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum Stop {
    Blocked {
        blockers: Vec<Blocker>,
    },
    /// A host step failed (`step`: its text).
    StepFailed {
        step: String,
        error: String,
    },
    /// The host could not be read: nothing was planned or done.
    ObserveFailed {
        error: String,
    },
    NotReady {
        unit: String,
    },
    NoProgress {
        steps: usize,
    },
    /// A server is still starting (non-blocking mode): look again later.
    Waiting {
        unit: String,
    },
    /// Another writer holds a lock the step needs (a Proxmox file lock): nothing was done for
    /// the step; look again soon. A dead writer's lock expires by itself.
    WaitingForLock {
        step: String,
        lock: String,
        message: String,
    },
    /// The next step would disrupt the host's users and this pool member holds no slot of its
    /// pool: nothing was done for the step; ask the pool, then run again.
    WaitingForSlot {
        step: String,
        slot: Slot,
        /// Why the step disrupts (`plan::disruption`'s words).
        why: String,
    },
}

impl Stop {
    /// What failed and how, when the host failed the run (a step, or reading the host): the
    /// cases reported as `ApplyFailed`.
    pub fn failure(&self) -> Option<(String, &str)> {
        match self {
            Stop::StepFailed { step, error } => Some((step.clone(), error)),
            Stop::ObserveFailed { error } => Some(("observing the host".into(), error)),
            _ => None,
        }
    }
}

/// The human words for why a run stopped: the CLI prints them, events carry them.
impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Blocked { blockers } => {
                for (i, b) in blockers.iter().enumerate() {
                    if i > 0 {
                        writeln!(f)?;
                    }
                    write!(f, "BLOCKED {} ({}): {}", b.resource, b.reason, b.message)?;
                }
                Ok(())
            }
            Stop::StepFailed { step, error } => write!(f, "STOPPED: {step} failed: {error}"),
            Stop::ObserveFailed { error } => {
                write!(f, "STOPPED: observing the host failed: {error}")
            }
            Stop::NotReady { unit } => write!(f, "STOPPED: {unit} did not become ready."),
            Stop::Waiting { unit } => write!(f, "{unit} is still starting."),
            Stop::WaitingForLock { step, message, .. } => write!(
                f,
                "WAITING: {step}: {message}. Nothing more was changed; run again later (the agent retries by itself)."
            ),
            Stop::WaitingForSlot { step, slot, why } => write!(
                f,
                "WAITING: {step}: {why}: this pool member needs a {slot} first. Nothing more was changed; the agent asks the pool and retries by itself."
            ),
            Stop::NoProgress { steps } => {
                write!(f, "STOPPED: no convergence after {steps} steps.")
            }
        }
    }
}

/// What a converge run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub applied: Vec<Applied>,
    pub writes: u64,
    pub writes_by_kind: BTreeMap<&'static str, u64>,
    /// The plan on the final observation (empty when converged).
    pub final_plan: Plan,
    pub final_host: Option<HostState>,
    pub stop: Option<Stop>,
    /// Readiness outcomes by unit key.
    pub waits: BTreeMap<String, WaitOutcome>,
    /// Every planner decision seen during the run (deduplicated).
    pub notes: Vec<Note>,
}

impl Report {
    /// This run followed by `next` (the same pass, run again once a slot was granted): the
    /// writes and steps of both, the rest as `next` left it.
    pub fn then(self, next: Report) -> Report {
        let mut r = next;
        let mut applied = self.applied;
        applied.append(&mut r.applied);
        r.applied = applied;
        r.writes += self.writes;
        for (kind, n) in self.writes_by_kind {
            *r.writes_by_kind.entry(kind).or_default() += n;
        }
        for n in self.notes {
            if !r.notes.contains(&n) {
                r.notes.push(n);
            }
        }
        r
    }

    pub fn converged(&self) -> bool {
        self.stop.is_none() && self.final_plan.is_empty()
    }

    /// Converged but for blockers of reason `r` only (a server stopped for a quarantined GPU:
    /// the host is as whole as the agent can make it).
    pub fn converged_apart_from(&self, r: crate::plan::Reason) -> bool {
        let only_r = |b: &[crate::plan::Blocker]| b.iter().all(|b| b.reason == r);
        self.final_plan.steps.is_empty()
            && only_r(&self.final_plan.blockers)
            && match &self.stop {
                None => true,
                Some(Stop::Blocked { blockers }) => only_r(blockers),
                Some(_) => false,
            }
    }

    /// Whether the run stopped on another writer's lock or a pool's slot: retry after a poll
    /// interval, not the drift interval.
    pub fn waits_for_lock(&self) -> bool {
        matches!(
            self.stop,
            Some(Stop::WaitingForLock { .. } | Stop::WaitingForSlot { .. })
        )
    }

    /// The step a run without a slot stopped before, and why it disrupts.
    pub fn slot_needed(&self) -> Option<(&str, &str)> {
        match &self.stop {
            Some(Stop::WaitingForSlot { step, why, .. }) => Some((step, why)),
            _ => None,
        }
    }

    /// The units of `desired`'s servers the run left starting (`Stop::Waiting`) and not yet
    /// answering (a Ready unit that waits for its smoke test gains nothing from a readiness
    /// probe: its answer would only wake the agent again and again); `None` when it waits for
    /// nothing.
    pub fn waiting_units(&self, desired: &Desired) -> Option<Vec<crate::host::model::UnitRef>> {
        let Some(Stop::Waiting { unit }) = &self.stop else {
            return None;
        };
        let healthy = |u: &crate::host::model::UnitRef| {
            self.final_host
                .as_ref()
                .and_then(|h| h.unit(u))
                .and_then(|u| u.server.as_ref())
                .is_some_and(|o| o.http == crate::host::model::HttpState::Healthy)
        };
        Some(
            desired
                .servers
                .iter()
                .map(|s| s.unit.clone())
                .filter(|u| u.to_string() == *unit && !healthy(u))
                .collect(),
        )
    }
}

/// Runs the loop until converged or stopped.
pub fn converge(desired: &Desired, door: &mut Door<'_>, opts: &Options) -> Report {
    converge_with(desired, door, opts, &mut BTreeMap::new())
}

/// Like [`converge`], with readiness progress kept by the caller across runs (by unit key).
pub fn converge_with(
    desired: &Desired,
    door: &mut Door<'_>,
    opts: &Options,
    progress: &mut BTreeMap<String, StartupTrack>,
) -> Report {
    converge_seeded(desired, door, opts, progress, None)
}

/// Like [`converge_with`], starting from `seed`, an observation the caller made moments ago
/// (with the same units and preflight requests watched), instead of observing again.
///
/// The seed stands for the loop's first full observation: it must be one (`Host::observe`
/// under the same watched units and preflight requests), made right before the call.
pub fn converge_seeded(
    desired: &Desired,
    door: &mut Door<'_>,
    opts: &Options,
    progress: &mut BTreeMap<String, StartupTrack>,
    seed: Option<HostState>,
) -> Report {
    let mut r = Report {
        applied: vec![],
        writes: 0,
        writes_by_kind: BTreeMap::new(),
        final_plan: Plan::default(),
        final_host: None,
        stop: None,
        waits: BTreeMap::new(),
        notes: vec![],
    };
    let mut steps = 0usize;
    // The caller's full observation, then the last one brought up to date by the backend after
    // a step (`None`: observe).
    let mut known: Option<Known> = seed.map(Known::Full);
    while let Some(next) = next_step(desired, door, opts, &mut r, steps, &mut known) {
        steps += 1;
        let at = door.host().now();
        let whole_plan = (steps == 1).then_some(&r.final_plan);
        if let Some(stop) = disruption_held(opts, &next.step, whole_plan, r.final_host.as_ref()) {
            r.stop = Some(stop);
            break;
        }
        let go_on = match &next.step {
            Step::WaitReady { .. } => wait_step(desired, door, opts, progress, &mut r, &next, at),
            step => match door.apply(step) {
                Ok(out) => {
                    // A (re)started unit starts its readiness clock afresh.
                    if let Step::StartUnit { unit, .. } = step {
                        progress.remove(&unit.key());
                    }
                    if let Some(st) = &r.final_host {
                        if let Ok(Some(st)) = door.host().refresh(step, st) {
                            known = Some(Known::Refreshed(st));
                        }
                    }
                    r.applied.push(Applied {
                        planned: next.clone(),
                        detail: out.detail,
                        leftovers: out.leftovers,
                        at,
                    });
                    true
                }
                Err(HostError::LockHeld {
                    step,
                    lock,
                    message,
                }) => {
                    r.stop = Some(Stop::WaitingForLock {
                        step,
                        lock,
                        message,
                    });
                    false
                }
                Err(e) => {
                    r.stop = Some(Stop::StepFailed {
                        step: step.to_string(),
                        error: e.to_string(),
                    });
                    false
                }
            },
        };
        if !go_on {
            break;
        }
    }
    r.writes = door.writes();
    r.writes_by_kind = door.writes_by_kind().clone();
    r
}

/// The stop before a disruptive `step` that `opts` does not allow (no slot held); `None` when
/// the step may run. Before the run's first step, `whole_plan` is judged instead: a run that
/// will need a slot does nothing until it has one, so a waiting member's host does not change
/// at all. A host not yet known counts as disrupted (nothing is risked).
fn disruption_held(
    opts: &Options,
    step: &Step,
    whole_plan: Option<&Plan>,
    host: Option<&HostState>,
) -> Option<Stop> {
    let slot = opts.hold_disruptions.as_ref()?;
    let (step, why) = match (host, whole_plan) {
        (Some(h), Some(p)) => crate::plan::disruption::first_disruption(p, h)?,
        (Some(h), None) => (
            step.to_string(),
            crate::plan::disruption::disruption(step, h)?,
        ),
        (None, _) if step.is_write() => (step.to_string(), "the host was not observed".into()),
        (None, _) => return None,
    };
    Some(Stop::WaitingForSlot {
        step,
        slot: slot.clone(),
        why,
    })
}

/// What the loop knows of the host without observing it again.
enum Known {
    /// A full observation (the caller's seed).
    Full(HostState),
    /// The last observation brought up to date by [`crate::host::Host::refresh`] after a step.
    Refreshed(HostState),
}

/// Observes, plans and returns the next step to run; `None` (with `r.stop` set when it is not
/// plain convergence) when the loop ends: converged, blocked, out of steps, or a write that did
/// not take.
fn next_step(
    desired: &Desired,
    door: &mut Door<'_>,
    opts: &Options,
    r: &mut Report,
    steps: usize,
    known: &mut Option<Known>,
) -> Option<PlannedStep> {
    let (host, p) = match known.take() {
        Some(Known::Full(h)) => {
            let p = plan(desired, &h);
            (h, p)
        }
        // A refreshed state: good for choosing the next write, not for calling it done.
        Some(Known::Refreshed(h)) => {
            let p = plan(desired, &h);
            let next_is_write = p.steps.first().is_some_and(|s| s.step.is_write());
            if next_is_write {
                (h, p)
            } else {
                observe_and_plan(desired, door, r)?
            }
        }
        None => observe_and_plan(desired, door, r)?,
    };
    for n in &p.notes {
        if !r.notes.contains(n) {
            r.notes.push(n.clone());
        }
    }
    r.final_host = Some(host);
    // Blockers stop the loop once nothing else can be done: a server's blocker (a crash)
    // must not keep the partition's steps, which may fix its cause, from running.
    if !p.blockers.is_empty() && p.steps.is_empty() {
        r.stop = Some(Stop::Blocked {
            blockers: p.blockers.clone(),
        });
        r.final_plan = p;
        return None;
    }
    let Some(next) = p.steps.first().cloned() else {
        r.final_plan = p;
        return None;
    };
    r.final_plan = p;
    if steps >= opts.max_steps {
        r.stop = Some(Stop::NoProgress { steps });
        return None;
    }
    // A write that the host did not take (the same step planned right after applying it)
    // would repeat forever: stop and say which.
    if next.step.is_write()
        && r.applied
            .last()
            .is_some_and(|a| a.planned.step == next.step)
    {
        r.stop = Some(Stop::StepFailed {
            step: next.step.to_string(),
            error: "applied, but the host still shows the old state (the change did not take)"
                .into(),
        });
        return None;
    }
    Some(next)
}

/// A full observation and its plan; `None` (with `r.stop` set) when the host cannot be read.
fn observe_and_plan(
    desired: &Desired,
    door: &mut Door<'_>,
    r: &mut Report,
) -> Option<(HostState, Plan)> {
    match door.host().observe() {
        Ok(h) => {
            let p = plan(desired, &h);
            Some((h, p))
        }
        Err(e) => {
            r.stop = Some(Stop::ObserveFailed {
                error: e.to_string(),
            });
            None
        }
    }
}

/// Runs a `WaitReady` step (blocking, or one look in non-blocking mode); whether the loop goes on.
fn wait_step(
    desired: &Desired,
    door: &mut Door<'_>,
    opts: &Options,
    progress: &mut BTreeMap<String, StartupTrack>,
    r: &mut Report,
    next: &PlannedStep,
    at: u64,
) -> bool {
    let Step::WaitReady {
        unit,
        served_name,
        stall_after_seconds,
        deadline_seconds,
        smoke_test,
    } = &next.step
    else {
        return true;
    };
    let outcome = if opts.block_on_ready {
        Some(wait_ready(
            door.host(),
            unit,
            served_name,
            *stall_after_seconds,
            *deadline_seconds,
            opts.poll_seconds,
            *smoke_test,
        ))
    } else {
        let p = progress
            .entry(unit.key())
            .or_insert_with(|| StartupTrack::new(at));
        p.smoke_test = *smoke_test;
        let host = r.final_host.clone().unwrap_or_default();
        p.check(
            &host,
            unit,
            served_name,
            *stall_after_seconds,
            *deadline_seconds,
            at,
        )
    };
    let Some(outcome) = outcome else {
        r.stop = Some(Stop::Waiting {
            unit: unit.to_string(),
        });
        return false;
    };
    let ok = matches!(outcome, WaitOutcome::Ready { .. });
    // A crash is looked at by the next plan: it may roll back (rollback: Auto) or
    // report the crash as a blocker.
    let crashed = matches!(outcome, WaitOutcome::Crashed { .. });
    r.applied.push(Applied {
        planned: next.clone(),
        detail: Some(outcome.summary()),
        leftovers: vec![],
        at,
    });
    r.waits.insert(unit.key(), outcome);
    progress.remove(&unit.key());
    if !ok && !crashed {
        r.stop = Some(Stop::NotReady {
            unit: unit.to_string(),
        });
        if let Ok(h) = door.host().observe() {
            r.final_plan = plan(desired, &h);
            r.final_host = Some(h);
        }
        return false;
    }
    true
}

#[cfg(test)]
mod tests;
