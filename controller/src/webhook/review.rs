//! One AdmissionReview: the decision, pure given the cluster's other objects.

use super::agent::{AgentNode, Agents, Placement};
use crate::desired::offline;
use crate::manifests::schema;
use gpuplane_crds::{GpuNodePool, GpuPartition, InferenceServer};
use serde_json::{json, Value};

/// The cluster's objects of both kinds, as the API server holds them now.
#[derive(Debug, Default, Clone)]
pub struct Cluster {
    pub partitions: Vec<GpuPartition>,
    pub servers: Vec<InferenceServer>,
    /// Nodes whose agent holds a live Lease; `None` when unknown (no warning is given then).
    pub served_nodes: Option<std::collections::BTreeSet<String>>,
    /// Why the cluster's objects could not be read (no API access, RBAC it lacks): each
    /// object is then checked alone, and a warning says what was not checked and why.
    pub unreadable: Option<String>,
}

/// Answers the AdmissionReview `body`: allowed, or denied with every problem, one per line.
/// `agent_node` is the requesting agent's node as the server resolved it from the token's
/// binding ([`super::agent::binding`]); it matters only when the request is an agent's.
pub fn review(body: &Value, cluster: &Cluster, agents: &Agents, agent_node: &AgentNode) -> Value {
    let req = &body["request"];
    let uid = req["uid"].clone();
    let (allowed, message, warnings) = match super::agent::refuse(req, agents, agent_node, cluster)
    {
        Some(why) => (false, why, vec![]),
        None => decide(req, cluster),
    };
    answer(uid, allowed, message, warnings)
}

/// Answers the AdmissionReview `body` by the agent rules alone (`/validate-agent`, the entry
/// that fails closed): anyone but an agent is allowed at once, an agent as [`super::agent`] says.
pub fn review_agent(
    body: &Value,
    cluster: &Cluster,
    agents: &Agents,
    agent_node: &AgentNode,
) -> Value {
    let req = &body["request"];
    match super::agent::refuse(req, agents, agent_node, cluster) {
        Some(why) => answer(req["uid"].clone(), false, why, vec![]),
        None => answer(req["uid"].clone(), true, String::new(), vec![]),
    }
}

/// The AdmissionReview answer.
fn answer(uid: Value, allowed: bool, message: String, warnings: Vec<String>) -> Value {
    let mut response = json!({"uid": uid, "allowed": allowed});
    if !allowed {
        // No code or reason: the API server then reports "admission webhook ... denied the
        // request: <message>" (403); with reason Invalid, kubectl 1.20 prints only "The
        // request is invalid" and the message is lost.
        response["status"] = json!({"message": message});
    }
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// (allowed, message, warnings).
fn decide(req: &Value, cluster: &Cluster) -> (bool, String, Vec<String>) {
    let kind = req["kind"]["kind"].as_str().unwrap_or_default();
    let op = req["operation"].as_str().unwrap_or_default();
    if op == "DELETE" || !crate::manifests::KINDS.contains(&kind) {
        return (true, String::new(), vec![]);
    }
    let obj = &req["object"];
    // An update that asks for nothing new (finalizers, status) is not judged again: the agent
    // and people must be able to let go of an object admitted while the webhook was down.
    if op == "UPDATE" && super::agent::only_finalizers_changed(obj, &req["oldObject"]) {
        return (true, String::new(), vec![]);
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("(unnamed)");
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .or(req["namespace"].as_str())
        .unwrap_or("default");
    let resource = match kind {
        "GpuPartition" => crate::resource_key::ResourceKey::partition(name),
        "GpuNodePool" => crate::resource_key::ResourceKey::pool(name),
        _ => crate::resource_key::ResourceKey::server(ns, name),
    };
    if let Some(moved) = node_name_changed(kind, op, req) {
        return (false, denial(&[format!("{resource}: {moved}")]), vec![]);
    }
    let errors = schema::check(kind, obj);
    if !errors.is_empty() {
        let lines: Vec<String> = errors.iter().map(|e| format!("{resource}: {e}")).collect();
        return (false, denial(&lines), vec![]);
    }
    if kind == "GpuNodePool" {
        return decide_pool(obj, &resource);
    }
    let cluster = match with_subject(cluster, kind, obj, ns) {
        Ok(c) => c,
        Err(e) => return (false, denial(&[format!("{resource}: {e}")]), vec![]),
    };
    let (errors, warnings) = offline::validate(&cluster.partitions, &cluster.servers);
    let mine: Vec<String> = errors
        .iter()
        .filter(|e| e.resource == resource)
        .map(|e| e.to_string())
        .collect();
    let warnings = subject_warnings(kind, obj, &cluster, warnings);
    if mine.is_empty() {
        (true, String::new(), warnings)
    } else {
        (false, denial(&mine), warnings)
    }
}

/// The one transition rule: a partition's `spec.nodeName` never changes (its GPUs are one
/// host's, perhaps bound and handed out). The CRD says the same in CEL (`crds/src/cel.rs`,
/// `partition-node-immutable`, same words); the webhook holds it for clusters without CEL.
fn node_name_changed(kind: &str, op: &str, req: &Value) -> Option<String> {
    let (new, old) = (
        &req["object"]["spec"]["nodeName"],
        &req["oldObject"]["spec"]["nodeName"],
    );
    (kind == "GpuPartition" && op == "UPDATE" && old.is_string() && new != old)
        .then(|| format!("spec.nodeName: {}", gpuplane_crds::cel::NODE_NAME_IMMUTABLE))
}

/// A pool's rules are its own: no other object is needed to judge it.
fn decide_pool(
    obj: &Value,
    resource: &crate::resource_key::ResourceKey,
) -> (bool, String, Vec<String>) {
    match serde_json::from_value::<GpuNodePool>(obj.clone()) {
        Ok(p) => {
            let errors: Vec<String> = offline::validate_pool(&p)
                .iter()
                .map(|e| e.to_string())
                .collect();
            if errors.is_empty() {
                (true, String::new(), vec![])
            } else {
                (false, denial(&errors), vec![])
            }
        }
        Err(e) => (false, denial(&[format!("{resource}: {e}")]), vec![]),
    }
}

/// The cluster as it would be with the subject `obj` (a partition or a server in `ns`) admitted.
/// The subject goes last, so a rule that picks the later of two claims picks it.
fn with_subject(
    cluster: &Cluster,
    kind: &str,
    obj: &Value,
    ns: &str,
) -> Result<Cluster, serde_json::Error> {
    let mut cluster = cluster.clone();
    if kind == "GpuPartition" {
        let p = serde_json::from_value::<GpuPartition>(obj.clone())?;
        cluster
            .partitions
            .retain(|o| o.metadata.name != p.metadata.name);
        cluster.partitions.push(p);
        return Ok(cluster);
    }
    let mut s = serde_json::from_value::<InferenceServer>(obj.clone())?;
    s.metadata.namespace = Some(ns.to_string());
    // A claim being made now is the youngest (the API server stamps it on create).
    s.metadata
        .creation_timestamp
        .get_or_insert_with(crate::clock::now);
    cluster.servers.retain(|o| {
        o.metadata.name != s.metadata.name || o.metadata.namespace != s.metadata.namespace
    });
    cluster.servers.push(s);
    Ok(cluster)
}

/// The subject's own warnings: a server's about its partition (missing, or not checked when the
/// cluster could not be read), a partition's node that no agent serves.
fn subject_warnings(
    kind: &str,
    obj: &Value,
    cluster: &Cluster,
    warnings: Vec<String>,
) -> Vec<String> {
    if kind != "InferenceServer" {
        return unserved(obj, cluster).into_iter().collect();
    }
    let pr = &cluster
        .servers
        .last()
        .map(|s| s.spec.partition_ref.name.clone())
        .unwrap_or_default();
    match &cluster.unreadable {
        // "does not exist (yet)" would be a guess: the webhook could not look.
        Some(why) => vec![format!(
            "spec.partitionRef.name: not checked against GpuPartition {pr:?} and the other servers (the webhook could not read the cluster: {why}); checked alone, the agent decides"
        )],
        None => warnings
            .into_iter()
            .filter(|w| w.contains(&format!("{pr:?}")))
            .collect(),
    }
}

/// A warning for a partition whose node no agent serves: it would sit without status, and
/// `kubectl wait` would only time out. Still admitted: GitOps may apply it before the agent runs.
fn unserved(obj: &Value, cluster: &Cluster) -> Option<String> {
    let served = cluster.served_nodes.as_ref()?;
    let node = obj["spec"]["nodeName"].as_str()?;
    (!served.contains(node)).then(|| {
        format!("spec.nodeName: no gpuplane agent holds a Lease for node {node:?}; nothing will act on this partition or report its status until an agent runs there (is the node name right, and the DaemonSet scheduled on it?)")
    })
}

/// Objects are placed from the cluster as the webhook sees it; unreadable, nothing is placed
/// but a partition by its own `nodeName`.
impl Placement for &Cluster {
    /// A partition's `nodeName`, a server's partition's.
    fn node_of(&self, obj: &Value) -> Option<String> {
        if let Some(n) = obj["spec"]["nodeName"].as_str() {
            return Some(n.to_string());
        }
        self.partition_node(obj["spec"]["partitionRef"]["name"].as_str()?)
    }

    fn node_of_ref(&self, kind: &str, namespace: &str, name: &str) -> Option<String> {
        match kind {
            "GpuPartition" => self.partition_node(name),
            "InferenceServer" => {
                let s = self.servers.iter().find(|s| {
                    s.metadata.name.as_deref() == Some(name)
                        && s.metadata.namespace.as_deref() == Some(namespace)
                })?;
                self.partition_node(&s.spec.partition_ref.name)
            }
            _ => None,
        }
    }

    fn pool_members(&self, pool: &str) -> super::agent::pool::Members {
        if self.unreadable.is_some() {
            return None;
        }
        Some(
            self.partitions
                .iter()
                .filter(|p| gpuplane_crds::pool_of(p) == Some(pool))
                .map(|p| {
                    (
                        p.metadata.name.clone().unwrap_or_default(),
                        p.spec.node_name.clone(),
                    )
                })
                .collect(),
        )
    }
}

impl Cluster {
    /// The node of partition `name`, if the cluster could be read and has it.
    fn partition_node(&self, name: &str) -> Option<String> {
        if self.unreadable.is_some() {
            return None;
        }
        self.partitions
            .iter()
            .find(|x| x.metadata.name.as_deref() == Some(name))
            .map(|x| x.spec.node_name.clone())
    }
}

/// The denial text: the CLI's words, one problem per line.
fn denial(lines: &[String]) -> String {
    format!(
        "invalid spec (reason InvalidSpec), nothing was changed:\n{}",
        lines
            .iter()
            .map(|l| format!("  - {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

#[cfg(test)]
mod tests;
