//! What the agents' own identity may do to the two kinds: change finalizers (status is a
//! subresource the webhook is not asked about), on objects of its own node, and nothing else.
//! The agent never creates, deletes or edits a spec; a stolen agent credential must not either.
//!
//! The agent is recognised by the request's user name (`--agent-user`, which the chart sets to
//! `system:serviceaccount:<namespace>:<agent service account>`). Its node is read from the
//! token's node binding (`authentication.kubernetes.io/node-name` in the user's extra
//! information, which bound service-account tokens carry on Kubernetes 1.30 and later). On older
//! clusters the node is unknown and only the finalizers-only rule applies.

use serde_json::Value;

/// The user-info key that names the node a bound token's pod runs on.
const NODE_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// `Some(refusal)` when the request comes from an agent and asks for more than it may; `None`
/// when it is not an agent's or is allowed.
pub fn refuse(
    req: &Value,
    agents: &[String],
    node_of: impl Fn(&Value) -> Option<String>,
) -> Option<String> {
    let user = req["userInfo"]["username"].as_str()?;
    if !agents.iter().any(|a| a == user) {
        return None;
    }
    let op = req["operation"].as_str().unwrap_or_default();
    if op != "UPDATE" {
        return Some(format!(
            "{user} is the gpuplane agent: it may not {} these objects (only change finalizers and status)",
            op.to_ascii_lowercase()
        ));
    }
    if !only_finalizers_changed(&req["object"], &req["oldObject"]) {
        return Some(format!(
            "{user} is the gpuplane agent: it may change only finalizers and status, not the spec, labels or annotations"
        ));
    }
    let mine = req["userInfo"]["extra"][NODE_EXTRA][0].as_str()?;
    match node_of(&req["object"]) {
        Some(node) if node != mine => Some(format!(
            "{user} acts for node {mine}; this object belongs to node {node}"
        )),
        _ => None,
    }
}

/// Whether `new` differs from `old` only in finalizers and the API server's bookkeeping.
pub fn only_finalizers_changed(new: &Value, old: &Value) -> bool {
    strip(new) == strip(old)
}

/// The object without what an update of finalizers or status may change.
fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "finalizers",
                "resourceVersion",
                "managedFields",
                "generation",
            ] {
                m.remove(k);
            }
        }
    }
    v
}

#[cfg(test)]
mod tests;
