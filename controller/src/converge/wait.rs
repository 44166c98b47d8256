//! Waiting for a server to become ready, and telling a slow start from a stall.
//!
//! Progress is the startup phase from the journal plus GPU memory per device: the
//! reference hang loaded weights (59.6 GB per GPU in 20 s) and then sat flat while the
//! unit stayed `active`. No change in either for `stall_after` seconds is a stall.

use crate::host::model::{HttpState, StartupPhase, UnitRef};
use crate::host::Host;
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

/// Polls until the unit's server answers `/health_generate` 200 and lists `served_name`,
/// or stalls, crashes, or passes the deadline.
pub fn wait_ready(
    host: &mut dyn Host,
    unit: &UnitRef,
    served_name: &str,
    stall_after: u64,
    deadline: u64,
    poll: u64,
) -> WaitOutcome {
    let start = host.now();
    let mut last_sig: Option<(Option<StartupPhase>, Vec<u64>)> = None;
    let mut last_progress = start;
    let mut phases: Vec<(String, u64)> = vec![];
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
        let u = st.unit(unit).cloned().unwrap_or_default();
        if u.active_state == "failed" || (!u.is_active() && now > start) {
            return WaitOutcome::Crashed {
                exit_status: u.exit_status,
                log_tail: u.log_tail,
            };
        }
        let obs = u.server.clone().unwrap_or_default();
        if let Some(ph) = obs.phase {
            if phases.last().map(|(n, _)| n.as_str()) != Some(ph.reason()) {
                phases.push((ph.reason().to_string(), now - start));
            }
        }
        if obs.http == HttpState::Healthy && obs.models.iter().any(|m| m == served_name) {
            return WaitOutcome::Ready {
                after_seconds: now - start,
                phases,
            };
        }
        let sig = (obs.phase, obs.gpu_memory_mib.clone());
        if last_sig.as_ref() != Some(&sig) {
            last_sig = Some(sig);
            last_progress = now;
        }
        let phase = obs
            .phase
            .map(|p| p.reason().to_string())
            .unwrap_or_else(|| "Unknown".into());
        if now - last_progress >= stall_after {
            return WaitOutcome::Stalled {
                phase,
                stalled_seconds: now - last_progress,
                gpu_memory_mib: obs.gpu_memory_mib,
                log_tail: u.log_tail,
            };
        }
        if now - start >= deadline {
            return WaitOutcome::DeadlineExceeded {
                phase,
                after_seconds: now - start,
            };
        }
        host.sleep(poll);
    }
}
