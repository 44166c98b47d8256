//! What the agents' own identity may do: change finalizers on the two kinds, write their status
//! (the `status` subresource), hold its own node's Lease, publish events about its objects and
//! write its own member's entries of a `GpuNodePool`'s status (`pool.rs`), all for objects of
//! its own node, and nothing else. The agent never creates, deletes or edits
//! a spec; a stolen agent credential must not either.
//!
//! An object whose node the webhook cannot place (a server whose partition it does not know, a
//! cache not synced yet) is refused to an agent: a rule that cannot be checked does not pass.
//! The agent retries; the admin's own requests are not judged here.
//!
//! # Events
//! The agent publishes events (`events.k8s.io/v1`) about its partitions, in its own namespace
//! (`Agents::namespace`, the Lease namespace), and about its servers, in the server's namespace
//! (see `reconcile::kube_io::publish`). An agent's event must be about a `GpuPartition` or an
//! `InferenceServer` of its node, in that namespace; it may create and patch (a series) them,
//! never delete.
//!
//! The agent is recognised by the request's user name (`--agent-user`, which the chart sets to
//! `system:serviceaccount:<namespace>:<agent service account>`). Its node comes from its token
//! ([`binding`]): a node-bound token names the node itself (Kubernetes ≥ 1.30); a pod-bound
//! token (any projected service-account token, Kubernetes ≥ 1.20, which the chart mounts) names
//! the pod, and the server looks the pod up and reads its `spec.nodeName` after checking its UID
//! ([`AgentNode`]). A token bound to nothing (a legacy secret token, a static token) leaves the
//! node unknown: with `--require-agent-node` (the chart's default) the agent is then refused
//! everything, without it only the finalizers-only rule applies.
//!
//! # Leases
//! The chart registers the Lease rule with an object selector on [`NODE_LABEL`], so the API
//! server's own node heartbeats never reach the webhook. The agent labels its Lease with its
//! node and honours a Lease of its name only when it carries that label (an unlabelled one was
//! never judged here, see `kubeapi::lease`): a stolen credential can neither take another
//! node's labelled Lease nor keep an unlabelled one from its rightful agent.

pub mod pool;

use crate::kubeapi::lease::lease_name;
use gpuplane_crds::NODE_LABEL;
use serde_json::Value;

/// The user-info key that names the node a bound token's pod runs on (Kubernetes ≥ 1.30).
pub const NODE_EXTRA: &str = "authentication.kubernetes.io/node-name";
/// The user-info keys of a pod-bound token.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";

/// Who the agents are and how strictly their node must be known.
#[derive(Debug, Clone, Default)]
pub struct Agents {
    /// User names of the agents.
    pub users: Vec<String>,
    /// Refuse an agent whose token names no node or pod (`--require-agent-node`).
    pub require_node: bool,
    /// The agents' own namespace (the Lease namespace), where their partitions' events live;
    /// `None`: not checked.
    pub namespace: Option<String>,
}

/// Where objects are: what the agent rules need to know of the cluster.
pub trait Placement {
    /// The node of one of our objects: a partition's `spec.nodeName`, a server's partition's.
    fn node_of(&self, obj: &Value) -> Option<String>;
    /// The node of the object of `kind` `namespace`/`name` (an event's subject), if known.
    fn node_of_ref(&self, kind: &str, namespace: &str, name: &str) -> Option<String>;
    /// The members of pool `pool` (partitions labelled for it) with their nodes; `None` when
    /// the cluster cannot be read.
    fn pool_members(&self, _pool: &str) -> pool::Members {
        None
    }
}

/// A closure placing objects, knowing no object by reference (tests).
impl<F: Fn(&Value) -> Option<String>> Placement for F {
    fn node_of(&self, obj: &Value) -> Option<String> {
        self(obj)
    }
    fn node_of_ref(&self, _: &str, _: &str, _: &str) -> Option<String> {
        None
    }
}

/// What a request's token says about the node its agent runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// A node-bound token: the node itself.
    Node(String),
    /// A pod-bound token: the pod, to be looked up in the service account's namespace.
    Pod {
        namespace: String,
        name: String,
        uid: String,
    },
    /// Bound to nothing.
    Unbound,
}

/// The agent's node after the pod lookup, as the review sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentNode {
    Known(String),
    /// The token names a pod that does not exist, has another UID, or is not scheduled.
    Unresolved(String),
    Unbound,
}

/// The binding of the request's token, if the request is an agent's; `None` otherwise.
pub fn binding(req: &Value, agents: &Agents) -> Option<Binding> {
    let user = req["userInfo"]["username"].as_str()?;
    if !agents.users.iter().any(|a| a == user) {
        return None;
    }
    let extra = &req["userInfo"]["extra"];
    let one = |k: &str| extra[k][0].as_str().filter(|s| !s.is_empty());
    if let Some(n) = one(NODE_EXTRA) {
        return Some(Binding::Node(n.to_string()));
    }
    // system:serviceaccount:<namespace>:<name>
    let namespace = user
        .strip_prefix("system:serviceaccount:")?
        .split(':')
        .next();
    match (namespace, one(POD_NAME_EXTRA), one(POD_UID_EXTRA)) {
        (Some(ns), Some(name), Some(uid)) => Some(Binding::Pod {
            namespace: ns.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
        }),
        _ => Some(Binding::Unbound),
    }
}

/// `Some(refusal)` when the request comes from an agent and asks for more than it may; `None`
/// when it is not an agent's or is allowed. `node` is the agent's node as resolved from
/// [`binding`]; `place` gives an object's node (a partition's, a server's partition's).
pub fn refuse(
    req: &Value,
    agents: &Agents,
    node: &AgentNode,
    place: impl Placement,
) -> Option<String> {
    let user = req["userInfo"]["username"].as_str()?;
    if !agents.users.iter().any(|a| a == user) {
        return None;
    }
    let mine = match acts_for(user, agents, node) {
        Ok(mine) => mine,
        Err(refusal) => return Some(refusal),
    };
    let op = req["operation"].as_str().unwrap_or_default();
    match req["kind"]["kind"].as_str().unwrap_or_default() {
        "Lease" => return refuse_lease(user, op, req, mine),
        "Event" => return refuse_event(user, op, req, agents, mine, &place),
        "GpuNodePool" => {
            let Some(mine) = mine else {
                return Some(format!(
                    "{user} is the gpuplane agent, but its node is unknown: it may not write a pool's status"
                ));
            };
            let name = req["object"]["metadata"]["name"].as_str().unwrap_or_default();
            return pool::refuse(user, op, req, mine, &place.pool_members(name));
        }
        "GpuPartition" | "InferenceServer" => {}
        other => {
            return Some(format!(
                "{user} is the gpuplane agent: it may not {} a {other} (it writes only its partitions, servers, Lease and events)",
                op.to_ascii_lowercase()
            ))
        }
    }
    refuse_own_kind(user, op, req, mine, &place)
}

/// The node agent `user` acts for (`None`: unbound, allowed when no node is required); `Err`
/// with the refusal when its token's node cannot be known.
fn acts_for<'a>(
    user: &str,
    agents: &Agents,
    node: &'a AgentNode,
) -> Result<Option<&'a str>, String> {
    match node {
        AgentNode::Known(n) => Ok(Some(n.as_str())),
        AgentNode::Unresolved(why) => Err(format!(
            "{user} is the gpuplane agent, but its token's pod cannot be placed on a node: {why}"
        )),
        AgentNode::Unbound if agents.require_node => Err(format!(
            "{user} is the gpuplane agent, but its token is bound to no pod or node, so its node is unknown (mount a projected service-account token)"
        )),
        AgentNode::Unbound => Ok(None),
    }
}

/// A write of the agent to a partition or a server: only an update of finalizers or status,
/// and only of an object of its own node.
fn refuse_own_kind(
    user: &str,
    op: &str,
    req: &Value,
    mine: Option<&str>,
    place: &impl Placement,
) -> Option<String> {
    if op != "UPDATE" {
        return Some(format!(
            "{user} is the gpuplane agent: it may not {} these objects (only change finalizers and status)",
            op.to_ascii_lowercase()
        ));
    }
    // The status subresource changes only status (the API server keeps the rest as stored);
    // the object itself may change only in its finalizers.
    let status = req["subResource"].as_str() == Some("status");
    if !status && !only_finalizers_changed(&req["object"], &req["oldObject"]) {
        return Some(format!(
            "{user} is the gpuplane agent: it may change only finalizers and status, not the spec, labels or annotations"
        ));
    }
    let mine = mine?;
    // The node of the object as stored (an update cannot move it: its spec did not change).
    let stored = if req["oldObject"].is_object() {
        &req["oldObject"]
    } else {
        &req["object"]
    };
    let what = if status {
        "status of this object"
    } else {
        "this object"
    };
    match place.node_of(stored) {
        Some(node) if node == mine => None,
        Some(node) => Some(format!(
            "{user} acts for node {mine}; {what} belongs to node {node}"
        )),
        None => Some(format!(
            "{user} acts for node {mine}; the webhook cannot place {what} on a node (its partition is unknown or the webhook's cache is not synced), so it is refused"
        )),
    }
}

/// An agent may create and patch events only about a partition or server of its node, in the
/// namespace the agent publishes them in.
fn refuse_event(
    user: &str,
    op: &str,
    req: &Value,
    agents: &Agents,
    mine: Option<&str>,
    place: &impl Placement,
) -> Option<String> {
    if op != "CREATE" && op != "UPDATE" {
        return Some(format!(
            "{user} is the gpuplane agent: it may not {} an event",
            op.to_ascii_lowercase()
        ));
    }
    let mine = mine?;
    for ev in [&req["object"], &req["oldObject"]] {
        if !ev.is_object() {
            continue;
        }
        let ns = ev["metadata"]["namespace"]
            .as_str()
            .or(req["namespace"].as_str())
            .unwrap_or_default();
        // events.k8s.io/v1 names the subject `regarding`, core/v1 `involvedObject`.
        let subject = if ev["regarding"].is_object() {
            &ev["regarding"]
        } else {
            &ev["involvedObject"]
        };
        let kind = subject["kind"].as_str().unwrap_or_default();
        let name = subject["name"].as_str().unwrap_or_default();
        let group = subject["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split('/')
            .next()
            .unwrap_or_default();
        let ours = group == "gpuplane.dev" && (kind == "GpuPartition" || kind == "InferenceServer");
        if !ours {
            return Some(format!(
                "{user} is the gpuplane agent: its events must be about a GpuPartition or an InferenceServer, not {kind} {name:?}"
            ));
        }
        let want_ns = match kind {
            "GpuPartition" => agents.namespace.as_deref().unwrap_or(ns),
            _ => subject["namespace"].as_str().unwrap_or_default(),
        };
        if ns != want_ns {
            return Some(format!(
                "{user} is the gpuplane agent: an event about {kind} {name} belongs in namespace {want_ns:?}, not {ns:?}"
            ));
        }
        let subject_ns = subject["namespace"].as_str().unwrap_or_default();
        match place.node_of_ref(kind, subject_ns, name) {
            Some(node) if node == mine => {}
            Some(node) => {
                return Some(format!(
                    "{user} acts for node {mine}; {kind} {name} belongs to node {node}"
                ))
            }
            None => {
                return Some(format!(
                    "{user} acts for node {mine}; the webhook cannot place {kind} {name} on a node, so the event is refused"
                ))
            }
        }
    }
    None
}

/// An agent may create and renew only its own node's Lease, labelled with that node, and never
/// delete one.
fn refuse_lease(user: &str, op: &str, req: &Value, mine: Option<&str>) -> Option<String> {
    if op != "CREATE" && op != "UPDATE" {
        return Some(format!(
            "{user} is the gpuplane agent: it may not {} a Lease",
            op.to_ascii_lowercase()
        ));
    }
    let obj = &req["object"];
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let Some(label) = obj["metadata"]["labels"][NODE_LABEL].as_str() else {
        return Some(format!(
            "{user} is the gpuplane agent: its Lease {name} must carry the label {NODE_LABEL}"
        ));
    };
    if name != lease_name(label) {
        return Some(format!(
            "{user} is the gpuplane agent: the Lease of node {label} is {}, not {name}",
            lease_name(label)
        ));
    }
    match mine {
        Some(mine) if mine != label => Some(format!(
            "{user} acts for node {mine}; Lease {name} belongs to node {label}"
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
