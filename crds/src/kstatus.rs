//! A test oracle for kstatus: what `sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute`
//! (v0.37.x) says about one of our objects, the rule Flux's `wait`/`healthChecks` and Helm 4's
//! `--wait` apply to custom resources.
//!
//! Written from the rules of `generic.go` and `status.go` (not a port of their code), for
//! objects without kind-specific rules (every custom resource):
//!
//! 1. `metadata.deletionTimestamp` set → `Terminating`;
//! 2. `status.observedGeneration` present and not `metadata.generation` → `InProgress`
//!    (`LatestGenerationNotObserved`); absent → no decision;
//! 3. the first condition, in list order, that is `Reconciling=True` → `InProgress`, or
//!    `Stalled=True` → `Failed`;
//! 4. a `Ready` condition: `True` → `Current`, `False` or `Unknown` → `InProgress`;
//! 5. otherwise `Current` (an object without any known condition counts as reconciled).
//!
//! # Caveats
//! Rule 5 makes an object that no controller has looked at yet `Current`: kstatus cannot tell
//! "no status yet" from "no status ever". The Argo CD and Flux CEL checks in
//! `examples/gitops/` treat a missing status as progressing instead.

use serde_json::Value;

/// kstatus's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kstatus {
    InProgress,
    Failed,
    Current,
    Terminating,
}

impl Kstatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Kstatus::InProgress => "InProgress",
            Kstatus::Failed => "Failed",
            Kstatus::Current => "Current",
            Kstatus::Terminating => "Terminating",
        }
    }
}

/// The verdict and the reason behind it (a condition's reason, or the rule that decided).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub status: Kstatus,
    pub reason: String,
}

/// kstatus's `Compute` for an object without kind-specific rules, given as JSON.
pub fn compute(obj: &Value) -> Verdict {
    let verdict = |status, reason: &str| Verdict {
        status,
        reason: reason.to_string(),
    };
    if obj["metadata"]["deletionTimestamp"]
        .as_str()
        .is_some_and(|t| !t.is_empty())
    {
        return verdict(Kstatus::Terminating, "DeletionTimestamp");
    }
    if let (Some(g), Some(og)) = (
        obj["metadata"]["generation"].as_i64(),
        obj["status"]["observedGeneration"].as_i64(),
    ) {
        if g != og {
            return verdict(Kstatus::InProgress, "LatestGenerationNotObserved");
        }
    }
    let conditions = obj["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let field = |c: &Value, k: &str| c[k].as_str().unwrap_or("").to_string();
    for c in &conditions {
        match (field(c, "type").as_str(), field(c, "status").as_str()) {
            ("Reconciling", "True") => return verdict(Kstatus::InProgress, &field(c, "reason")),
            ("Stalled", "True") => return verdict(Kstatus::Failed, &field(c, "reason")),
            _ => {}
        }
    }
    for c in conditions.iter().filter(|c| field(c, "type") == "Ready") {
        match field(c, "status").as_str() {
            "True" => return verdict(Kstatus::Current, "Ready"),
            "False" | "Unknown" => return verdict(Kstatus::InProgress, &field(c, "reason")),
            _ => {}
        }
    }
    verdict(Kstatus::Current, "NoKnownConditions")
}

#[cfg(test)]
mod tests;
