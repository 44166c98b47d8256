//! `gpuplane wait`: `kubectl wait --for=condition=Ready` for what the agents publish (the
//! standalone agent's status directory, or the cluster). Pure: one read in, one verdict out; the
//! front door (`cli/wait_cmd.rs`) reads again until the verdict is final or the time is up.
//!
//! Guarantees: never "met" on an empty read, nor while a resource the manifests name has no
//! status yet (an agent that has not written its first status is not a converged host); a
//! resource that is `Stalled=True` (kstatus's Failed: only a person or a spec change moves it)
//! or manifests refused as a whole end the wait at once, as Flux's and Helm's waiters do.

use super::model::{Kind, Resource};

/// What one read says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every resource has the condition `True`: one line per resource.
    Met(Vec<String>),
    /// Some resource can no longer get there by itself: why, one line each.
    Failed(Vec<String>),
    /// Not yet: who is waited for, one line each.
    Waiting(Vec<String>),
}

/// Judges `resources` for `condition` (e.g. `Ready`), requiring each of `expected`
/// (`GpuPartition/NAME`, `InferenceServer/NAMESPACE/NAME`) to be among them.
pub fn judge(resources: &[Resource], condition: &str, expected: &[String]) -> Verdict {
    let failed: Vec<String> = resources.iter().filter_map(failure).collect();
    if !failed.is_empty() && condition != "Stalled" {
        return Verdict::Failed(failed);
    }
    let mut waiting: Vec<String> = expected
        .iter()
        .filter(|e| !resources.iter().any(|r| &r.name == *e))
        .map(|e| format!("{e}: no status yet"))
        .collect();
    let mut met = vec![];
    for r in resources.iter().filter(|r| r.kind != Kind::Invalid) {
        match r.conditions.iter().find(|c| c.type_ == condition) {
            Some(c) if c.status == "True" => met.push(format!("{}: condition met", r.name)),
            Some(c) => waiting.push(format!(
                "{}: {condition}={} {}: {}",
                r.name, c.status, c.reason, c.message
            )),
            None => waiting.push(format!("{}: no {condition} condition yet", r.name)),
        }
    }
    if met.is_empty() && waiting.is_empty() {
        waiting
            .push("no status yet: is the agent running, and is this its status directory?".into());
    }
    if waiting.is_empty() {
        Verdict::Met(met)
    } else {
        Verdict::Waiting(waiting)
    }
}

/// Why `r` can no longer reach a condition by itself, if so.
fn failure(r: &Resource) -> Option<String> {
    if let Some(e) = &r.unreadable {
        return Some(format!("{}: unreadable: {e}", r.name));
    }
    let c = r.conditions.iter().find(|c| {
        (c.type_ == "Stalled" && c.status == "True") || (c.type_ == "Valid" && c.status == "False")
    })?;
    Some(format!(
        "{}: {}={} {}: {}",
        r.name, c.type_, c.status, c.reason, c.message
    ))
}

#[cfg(test)]
mod tests;
