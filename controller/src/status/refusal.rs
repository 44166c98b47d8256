//! The conditions of a refusal, where the host is not touched at all: a spec that failed
//! validation, a server whose partition cannot be applied. Pure builders, shared by the
//! Kubernetes agent (`reconcile/`) and the file agent (`standalone/`).

use super::ResourceStatus;
use gpuplane_crds::condition::{Condition, Time};

/// Conditions for a spec that failed validation.
pub fn invalid(messages: &[String], generation: Option<i64>) -> ResourceStatus {
    let now = Time(jiff::Timestamp::now());
    let c = |t: &str, s: &str, reason: &str, m: String| Condition {
        type_: t.into(),
        status: s.into(),
        reason: reason.into(),
        message: m,
        observed_generation: generation,
        last_transition_time: now.clone(),
    };
    ResourceStatus {
        conditions: vec![
            c("Ready", "False", "InvalidSpec", messages.join("; ")),
            c(
                "Progressing",
                "False",
                "InvalidSpec",
                "fix the spec; nothing on the host was changed".into(),
            ),
            c(
                "Reconciling",
                "False",
                "InvalidSpec",
                "waiting for a spec change".into(),
            ),
            c("Stalled", "True", "InvalidSpec", messages.join("; ")),
        ],
    }
}

/// Conditions for a server whose partition cannot be applied (invalid or missing): not Ready
/// and Stalled, since only a change to a spec can move it.
pub fn waiting_for_partition(
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> ResourceStatus {
    let now = Time(jiff::Timestamp::now());
    let c = |t: &str, s: &str| Condition {
        type_: t.into(),
        status: s.into(),
        reason: reason.into(),
        message: message.clone(),
        observed_generation: generation,
        last_transition_time: now.clone(),
    };
    ResourceStatus {
        conditions: vec![
            c("Ready", "False"),
            c("Reconciling", "False"),
            c("Stalled", "True"),
        ],
    }
}
