//! Status conditions in the Kubernetes `metav1.Condition` shape.
//!
//! [`set_condition`] is a port of apimachinery's `SetStatusCondition`: it keeps
//! `lastTransitionTime` unless the status flips, so dashboards that watch
//! conditions see real transitions, not every reconcile.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Well-known condition types.
pub mod types {
    pub const READY: &str = "Ready";
    pub const PROGRESSING: &str = "Progressing";
    pub const DEGRADED: &str = "Degraded";
    pub const P2P_SAFE: &str = "P2PSafe";
    /// Preflight (interpreter, model files, MTP layers, heads, memory, paths) found nothing
    /// that keeps the server from starting; the message holds versions and the KV headroom.
    pub const PREFLIGHT_PASSED: &str = "PreflightPassed";
    /// The smoke test's chat requests got the answers the spec expects (server with a
    /// `smokeTest`, once Ready).
    pub const SMOKE_TESTED: &str = "SmokeTested";
    /// kstatus's abnormal-true condition: `True` while work remains (steps left, a server
    /// starting); kstatus reads it as InProgress.
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus's abnormal-true condition: `True` when the agent cannot make progress without a
    /// person or a spec change (a blocker, a terminal failure); kstatus reads it as Failed.
    pub const STALLED: &str = "Stalled";
    /// A partition with a confidential (SEV-SNP) VM consumer: every host prerequisite of such a
    /// VM with passed-through GPUs is met (`Unknown` while the GPUs' CC mode cannot be read).
    pub const CONFIDENTIAL_READY: &str = "ConfidentialReady";
    /// A partition that gives some GPUs to a confidential VM and others to `nvidia`: a shape
    /// NVIDIA's confidential-computing support matrix does not cover (a warning, not a refusal).
    pub const CONFIDENTIAL_MIXED: &str = "ConfidentialMixed";
    /// A partition's: whether the running kernel lacks `spec.host.kernelArgs` and a reboot
    /// would apply them (only when the spec sets kernel arguments).
    pub const REBOOT_REQUIRED: &str = "RebootRequired";
    /// A partition's: every GPU of `status.gpus[]` is Healthy (issue 40); `False` names those
    /// that are not, with the worst state as the reason.
    pub const GPUS_HEALTHY: &str = "GpusHealthy";
}

/// `True`, `False` or `Unknown`, as the Kubernetes API spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// `new` applied onto `existing` with `SetStatusCondition` semantics; types no longer reported are dropped.
pub fn merge(existing: &[Condition], new: &[Condition]) -> Vec<Condition> {
    let mut out: Vec<Condition> = existing
        .iter()
        .filter(|c| new.iter().any(|n| n.type_ == c.type_))
        .cloned()
        .collect();
    for n in new {
        set_condition(&mut out, n.clone());
    }
    out
}

/// Inserts or updates `new` in `conditions` by type.
///
/// # Guarantees
/// - `lastTransitionTime` of an existing condition is kept unless its status changes.
/// - reason, message and observedGeneration always take the new values.
/// - order of other conditions is untouched; a new type is appended.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status != new.status {
                existing.last_transition_time = new.last_transition_time.clone();
            }
            existing.status = new.status;
            existing.reason = new.reason;
            existing.message = new.message;
            existing.observed_generation = new.observed_generation;
        }
        None => conditions.push(new),
    }
}

/// Finds a condition by type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests;
