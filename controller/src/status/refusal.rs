//! The conditions of a refusal, where the host is not touched at all: a spec that failed
//! validation, a server whose partition cannot be applied, the younger of two claims. Pure
//! builders, one per reason, shared by the Kubernetes agent (`reconcile/`) and the file agent
//! (`standalone/`); the clock is the caller's.
//!
//! Every `Ready=False` reason of a refusal and its builder:
//!
//! | reason | builder |
//! |---|---|
//! | [`INVALID_SPEC`] | [`invalid`] |
//! | [`PARTITION_INVALID`] | [`partition_invalid`] |
//! | [`PARTITION_NOT_FOUND`] | [`partition_not_found`] |
//! | `NodeLabelMissing`, `NodeLabelMismatch` (per-node scope) | [`label_problem`] |
//! | [`CONFLICT`] | [`conflict`] |
//!
//! The reasons of a reconcile that reached the host (`ApplyFailed`, `GpuInUse`, ...) are
//! computed from its report by [`super::compute`].

use super::{Reason, ResourceStatus};
use gpuplane_crds::condition::{Condition, Time};

/// A spec that failed validation.
pub const INVALID_SPEC: Reason = Reason::InvalidSpec;
/// A server whose partition failed validation.
pub const PARTITION_INVALID: Reason = Reason::PartitionInvalid;
/// A server whose `partitionRef` names no `GpuPartition`.
pub const PARTITION_NOT_FOUND: Reason = Reason::PartitionNotFound;
/// The younger of two claims on one node, slice, unit or port (the oldest claim wins).
pub const CONFLICT: Reason = Reason::Conflict;

fn condition(
    t: &str,
    s: &str,
    reason: Reason,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: t.into(),
        status: s.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// Conditions for a spec that failed validation (`messages`: `field: message` each).
pub fn invalid(messages: &[String], generation: Option<i64>, now: &Time) -> ResourceStatus {
    let c = |t: &str, s: &str, m: String| condition(t, s, INVALID_SPEC, m, generation, now);
    ResourceStatus {
        conditions: vec![
            c("Ready", "False", messages.join("; ")),
            c(
                "Progressing",
                "False",
                "fix the spec; nothing on the host was changed".into(),
            ),
            c("Reconciling", "False", "waiting for a spec change".into()),
            c("Stalled", "True", messages.join("; ")),
        ],
        ..Default::default()
    }
}

/// Conditions for a server whose partition cannot be applied: not Ready and Stalled, since
/// only a change to a spec can move it. The shape of every reason but [`INVALID_SPEC`] and
/// [`CONFLICT`]; callers use the named builders below.
fn waiting(reason: Reason, message: String, generation: Option<i64>, now: &Time) -> ResourceStatus {
    let c = |t: &str, s: &str| condition(t, s, reason, message.clone(), generation, now);
    ResourceStatus {
        conditions: vec![
            c("Ready", "False"),
            c("Reconciling", "False"),
            c("Stalled", "True"),
        ],
        ..Default::default()
    }
}

/// A server of the invalid partition `partition` (`messages` are the partition's problems).
pub fn partition_invalid(
    partition: &str,
    messages: &[String],
    generation: Option<i64>,
    now: &Time,
) -> ResourceStatus {
    waiting(
        PARTITION_INVALID,
        format!(
            "GpuPartition {partition} is invalid: {}",
            messages.join("; ")
        ),
        generation,
        now,
    )
}

/// A server whose `spec.partitionRef.name`, `partition`, names no `GpuPartition`.
pub fn partition_not_found(partition: &str, generation: Option<i64>, now: &Time) -> ResourceStatus {
    waiting(
        PARTITION_NOT_FOUND,
        format!(
            "spec.partitionRef.name: GpuPartition {partition:?} does not exist; create it or name an existing one (kubectl get gpupartitions)"
        ),
        generation,
        now,
    )
}

/// An object whose node label is missing or wrong (`reason` `NodeLabelMissing` or
/// `NodeLabelMismatch`; `message` names the label to set).
pub fn label_problem(
    reason: Reason,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> ResourceStatus {
    waiting(reason, message, generation, now)
}

/// The younger claim: `Ready=False` and `Progressing=False` with reason [`CONFLICT`] and
/// `message` (which names the older claim).
pub fn conflict(message: &str, generation: Option<i64>, now: &Time) -> ResourceStatus {
    let c = |t: &str, m: String| condition(t, "False", CONFLICT, m, generation, now);
    ResourceStatus {
        conditions: vec![
            c("Ready", message.to_string()),
            c(
                "Progressing",
                "nothing on the host is changed for this object while the older claim stands"
                    .into(),
            ),
        ],
        ..Default::default()
    }
}
