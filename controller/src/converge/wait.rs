//! Waiting for a server to become ready, and telling a slow start from a stall.
//!
//! StartupTrack is the startup phase from the journal plus GPU memory per device: the
//! reference hang loaded weights (59.6 GB per GPU in 20 s) and then sat flat while the
//! unit stayed `active`. No change in either for `stall_after` seconds is a stall.

use crate::host::model::{HostState, HttpState, UnitRef};
use crate::host::Host;
use crate::sglang::StartupPhase;
use serde::Serialize;

/// How waiting ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "outcome",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum WaitOutcome {
    Ready {
        after_seconds: u64,
        phases: Vec<(String, u64)>,
    },
    Stalled {
        phase: String,
        stalled_seconds: u64,
        gpu_memory_mib: Vec<u64>,
        log_tail: Vec<String>,
    },
    Crashed {
        exit_status: Option<i32>,
        log_tail: Vec<String>,
    },
    DeadlineExceeded {
        phase: String,
        after_seconds: u64,
    },
    ObserveFailed {
        error: String,
    },
}

impl WaitOutcome {
    /// One line for the user.
    pub fn summary(&self) -> String {
        match self {
            WaitOutcome::Ready { after_seconds, phases } => {
                let p: Vec<String> = phases.iter().map(|(n, t)| format!("{n} at {t}s")).collect();
                format!("ready after {after_seconds} s ({})", p.join(", "))
            }
            WaitOutcome::Stalled { phase, stalled_seconds, gpu_memory_mib, .. } => format!(
                "stalled in phase {phase}: no progress and GPU memory flat at {} MiB for {stalled_seconds} s",
                gpu_memory_mib.iter().map(u64::to_string).collect::<Vec<_>>().join("/")
            ),
            WaitOutcome::Crashed { exit_status, log_tail } => format!(
                "crashed (exit status {}): {}",
                exit_status.map(|s| s.to_string()).unwrap_or_else(|| "?".into()),
                log_tail.last().cloned().unwrap_or_default()
            ),
            WaitOutcome::DeadlineExceeded { phase, after_seconds } => {
                format!("not ready after {after_seconds} s (deadline), still in phase {phase}")
            }
            WaitOutcome::ObserveFailed { error } => format!("cannot observe the host: {error}"),
        }
    }
}

/// Startup progress of one unit across observations: the phases seen and the last change of
/// (phase, GPU memory). Kept by the caller between polls (in memory: it is observation history,
/// not host state; losing it only restarts the stall timer).
#[derive(Debug, Clone)]
pub struct StartupTrack {
    start: u64,
    last_sig: Option<(Option<StartupPhase>, Vec<u64>)>,
    last_progress: u64,
    phases: Vec<(String, u64)>,
    /// `stall_after` of the last check (for [`StartupTrack::stall_due_in`]).
    stall_after: Option<u64>,
    /// Ready also needs the smoke test's result for the running unit.
    pub smoke_test: bool,
}

impl StartupTrack {
    pub fn new(now: u64) -> StartupTrack {
        StartupTrack {
            start: now,
            last_sig: None,
            last_progress: now,
            phases: vec![],
            stall_after: None,
            smoke_test: false,
        }
    }

    /// Seconds until a stall would be due by the last check's `stall_after` (`None` before the
    /// first check): an agent that waits no longer than this sees a stall when it happens.
    pub fn stall_due_in(&self, now: u64) -> Option<u64> {
        self.stall_after.map(|s| self.seconds_to_stall(s, now))
    }

    /// Seconds until no progress would count as a stall.
    pub fn seconds_to_stall(&self, stall_after: u64, now: u64) -> u64 {
        (self.last_progress + stall_after).saturating_sub(now)
    }

    /// Looks at one observation; `None` while the server is still starting normally.
    pub fn check(
        &mut self,
        st: &HostState,
        unit: &UnitRef,
        served_name: &str,
        stall_after: u64,
        deadline: u64,
        now: u64,
    ) -> Option<WaitOutcome> {
        self.stall_after = Some(stall_after);
        let u = st.unit(unit).cloned().unwrap_or_default();
        if u.active_state == "failed" || (!u.is_active() && now > self.start) {
            return Some(WaitOutcome::Crashed {
                exit_status: u.exit_status,
                log_tail: clean(&u.log_tail),
            });
        }
        let obs = u.server.clone().unwrap_or_default();
        if let Some(ph) = obs.phase {
            if self.phases.last().map(|(n, _)| n.as_str()) != Some(ph.reason()) {
                self.phases
                    .push((ph.reason().to_string(), now.saturating_sub(self.start)));
            }
        }
        if obs.http == HttpState::Healthy && obs.models.iter().any(|m| m == served_name) {
            // Ready; with a smoke test, done once the test of this very unit has a result (it
            // runs beside the observation and ends within its own budget: no stall clock).
            let hash = crate::digest::sha256(u.file.as_deref().unwrap_or(""));
            if self.smoke_test && obs.smoke.as_ref().is_none_or(|r| r.unit_hash != hash) {
                return (now.saturating_sub(self.start) >= deadline).then(|| {
                    WaitOutcome::DeadlineExceeded {
                        phase: "SmokeTest".into(),
                        after_seconds: now - self.start,
                    }
                });
            }
            return Some(WaitOutcome::Ready {
                after_seconds: now.saturating_sub(self.start),
                phases: self.phases.clone(),
            });
        }
        let sig = (obs.phase, obs.gpu_memory_mib.clone());
        if self.last_sig.as_ref() != Some(&sig) {
            let new_phase = self.last_sig.as_ref().map(|(p, _)| *p) != Some(obs.phase);
            self.last_sig = Some(sig);
            // A new phase counts from the line that began it (the agent may look seconds
            // later), never from before this wait began; other progress from now.
            self.last_progress = match obs.phase_since {
                Some(t) if new_phase => t.max(self.start.max(self.last_progress)).min(now),
                _ => now,
            };
        }
        let phase = obs
            .phase
            .map(|p| p.reason().to_string())
            .unwrap_or_else(|| "Unknown".into());
        if now.saturating_sub(self.last_progress) >= stall_after {
            return Some(WaitOutcome::Stalled {
                phase,
                stalled_seconds: now - self.last_progress,
                gpu_memory_mib: obs.gpu_memory_mib,
                log_tail: clean(&u.log_tail),
            });
        }
        if now.saturating_sub(self.start) >= deadline {
            return Some(WaitOutcome::DeadlineExceeded {
                phase,
                after_seconds: now - self.start,
            });
        }
        None
    }
}

/// Polls until the unit's server answers `/health_generate` 200 and lists `served_name` (and,
/// with `smoke_test`, its smoke test has a result), or stalls, crashes, or passes the deadline.
pub fn wait_ready(
    host: &mut dyn Host,
    unit: &UnitRef,
    served_name: &str,
    stall_after: u64,
    deadline: u64,
    poll: u64,
    smoke_test: bool,
) -> WaitOutcome {
    let mut p = StartupTrack::new(host.now());
    p.smoke_test = smoke_test;
    loop {
        let st = match host.observe() {
            Ok(s) => s,
            Err(e) => {
                return WaitOutcome::ObserveFailed {
                    error: e.to_string(),
                }
            }
        };
        let now = host.now();
        if let Some(o) = p.check(&st, unit, served_name, stall_after, deadline, now) {
            return o;
        }
        // Look again after `poll`, or right when a stall would be due, whichever comes first.
        host.sleep(poll.min(p.seconds_to_stall(stall_after, now)).max(1));
    }
}

/// Log lines from a server (any backend) as status and events may carry them: the last 30,
/// one line each, at most 512 bytes each, cut on character boundaries.
fn clean(lines: &[String]) -> Vec<String> {
    let from = lines.len().saturating_sub(30);
    lines[from..]
        .iter()
        .map(|l| crate::text::sanitize(l, 512))
        .collect()
}

#[cfg(test)]
mod tests;
