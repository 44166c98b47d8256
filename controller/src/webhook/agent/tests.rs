use super::*;
use serde_json::json;

fn req(op: &str, user: &str, new: Value, old: Value, node: Option<&str>) -> Value {
    let mut r = json!({"operation": op, "userInfo": {"username": user}, "object": new,
                       "oldObject": old, "kind": {"group": "gpuplane.dev", "kind": "GpuPartition"}});
    if let Some(n) = node {
        r["userInfo"]["extra"] = json!({ NODE_EXTRA: [n] });
    }
    r
}

fn partition(node: &str, finalizers: &[&str], policy: &str) -> Value {
    json!({"metadata": {"name": "p", "finalizers": finalizers, "resourceVersion": "7"},
           "spec": {"nodeName": node, "deletionPolicy": policy}})
}

fn lease(name: &str, label: Option<&str>, holder: &str) -> Value {
    let mut l = json!({"metadata": {"name": name, "namespace": "gpuplane-system"},
                       "spec": {"holderIdentity": holder}});
    if let Some(n) = label {
        l["metadata"]["labels"] = json!({ NODE_LABEL: n });
    }
    l
}

fn lease_req(op: &str, new: Value, old: Value) -> Value {
    let mut r = req(op, AGENT, new, old, None);
    r["kind"] = json!({"group": "coordination.k8s.io", "version": "v1", "kind": "Lease"});
    r
}

fn node_of(v: &Value) -> Option<String> {
    v["spec"]["nodeName"].as_str().map(str::to_string)
}

const AGENT: &str = "system:serviceaccount:gpuplane-system:gpuplane";

fn agents(require_node: bool) -> Agents {
    Agents {
        users: vec![AGENT.to_string()],
        require_node,
        namespace: Some("gpuplane-system".into()),
    }
}

fn known(n: &str) -> AgentNode {
    AgentNode::Known(n.to_string())
}

#[test]
fn the_agent_may_change_finalizers_but_not_the_spec() {
    let a = agents(false);
    let un = &AgentNode::Unbound;
    let old = partition("n1", &[], "Retain");
    let fin = partition("n1", &["gpuplane.dev/host-cleanup"], "Retain");
    assert_eq!(
        refuse(
            &req("UPDATE", AGENT, fin, old.clone(), None),
            &a,
            un,
            node_of
        ),
        None
    );
    let spec = partition("n1", &[], "Restore");
    let r = refuse(
        &req("UPDATE", AGENT, spec, old.clone(), None),
        &a,
        un,
        node_of,
    );
    assert!(r.is_some_and(|m| m.contains("only finalizers")));
    let r = refuse(
        &req("CREATE", AGENT, old.clone(), Value::Null, None),
        &a,
        un,
        node_of,
    );
    assert!(r.is_some_and(|m| m.contains("may not create")));
    // Anyone else is not judged here.
    let spec = partition("n1", &[], "Restore");
    assert_eq!(
        refuse(&req("UPDATE", "admin", spec, old, None), &a, un, node_of),
        None
    );
}

#[test]
fn with_its_node_known_only_its_nodes_objects() {
    let a = agents(true);
    let old = partition("n2", &[], "Retain");
    let fin = partition("n2", &["gpuplane.dev/host-cleanup"], "Retain");
    let r = refuse(
        &req("UPDATE", AGENT, fin.clone(), old.clone(), None),
        &a,
        &known("n1"),
        node_of,
    );
    assert!(r.is_some_and(|m| m.contains("belongs to node n2")));
    assert_eq!(
        refuse(
            &req("UPDATE", AGENT, fin.clone(), old.clone(), None),
            &a,
            &known("n2"),
            node_of
        ),
        None
    );
    // A token whose pod cannot be placed is refused, whatever it asks.
    let r = refuse(
        &req("UPDATE", AGENT, fin.clone(), old.clone(), None),
        &a,
        &AgentNode::Unresolved("pod gpuplane-system/x does not exist".into()),
        node_of,
    );
    assert!(r.is_some_and(|m| m.contains("does not exist")));
    // With --require-agent-node, a token bound to nothing is refused; without, it is not.
    let r = refuse(
        &req("UPDATE", AGENT, fin.clone(), old.clone(), None),
        &a,
        &AgentNode::Unbound,
        node_of,
    );
    assert!(r.is_some_and(|m| m.contains("bound to no pod or node")));
    assert_eq!(
        refuse(
            &req("UPDATE", AGENT, fin, old, None),
            &agents(false),
            &AgentNode::Unbound,
            node_of
        ),
        None
    );
}

#[test]
fn a_tokens_binding_names_the_node_or_the_pod() {
    let a = agents(true);
    let p = partition("n1", &[], "Retain");
    let r = req("UPDATE", AGENT, p.clone(), p.clone(), Some("n7"));
    assert_eq!(binding(&r, &a), Some(Binding::Node("n7".into())));
    let mut r = req("UPDATE", AGENT, p.clone(), p.clone(), None);
    r["userInfo"]["extra"] = json!({POD_NAME_EXTRA: ["gpuplane-abcde"], POD_UID_EXTRA: ["u-1"]});
    assert_eq!(
        binding(&r, &a),
        Some(Binding::Pod {
            namespace: "gpuplane-system".into(),
            name: "gpuplane-abcde".into(),
            uid: "u-1".into()
        })
    );
    let r = req("UPDATE", AGENT, p.clone(), p.clone(), None);
    assert_eq!(binding(&r, &a), Some(Binding::Unbound));
    // Not an agent: no binding is asked for.
    let r = req("UPDATE", "admin", p.clone(), p, Some("n7"));
    assert_eq!(binding(&r, &a), None);
}

#[test]
fn an_agent_holds_only_its_own_nodes_labelled_lease() {
    let a = agents(true);
    let n1 = known("n1");
    let ok = lease("gpuplane-node-n1", Some("n1"), "pod-a");
    assert_eq!(
        refuse(
            &lease_req("CREATE", ok.clone(), Value::Null),
            &a,
            &n1,
            node_of
        ),
        None
    );
    assert_eq!(
        refuse(
            &lease_req("UPDATE", ok.clone(), ok.clone()),
            &a,
            &n1,
            node_of
        ),
        None
    );
    // Another node's Lease, labelled truthfully.
    let other = lease("gpuplane-node-n2", Some("n2"), "pod-a");
    let r = refuse(
        &lease_req("UPDATE", other.clone(), other.clone()),
        &a,
        &n1,
        node_of,
    );
    assert!(
        r.as_ref().is_some_and(|m| m.contains("belongs to node n2")),
        "{r:?}"
    );
    // Another node's Lease, labelled with ours to slip through.
    let lie = lease("gpuplane-node-n2", Some("n1"), "pod-a");
    let r = refuse(&lease_req("UPDATE", lie, other.clone()), &a, &n1, node_of);
    assert!(
        r.as_ref()
            .is_some_and(|m| m.contains("is gpuplane-node-n1")),
        "{r:?}"
    );
    // The label taken off (the old object still carries it, so the webhook is asked).
    let bare = lease("gpuplane-node-n2", None, "pod-a");
    let r = refuse(&lease_req("UPDATE", bare, other.clone()), &a, &n1, node_of);
    assert!(
        r.as_ref()
            .is_some_and(|m| m.contains("must carry the label")),
        "{r:?}"
    );
    // Never deleted.
    let r = refuse(&lease_req("DELETE", Value::Null, ok), &a, &n1, node_of);
    assert!(
        r.as_ref().is_some_and(|m| m.contains("may not delete")),
        "{r:?}"
    );
    // An admin may do what it likes.
    let mut admin = lease_req("UPDATE", other.clone(), other);
    admin["userInfo"]["username"] = json!("admin");
    assert_eq!(refuse(&admin, &a, &AgentNode::Unbound, node_of), None);
}

/// A status update through the `status` subresource: `status` of `p` changed.
fn status_req(p: &Value) -> Value {
    let mut new = p.clone();
    new["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    let mut r = req("UPDATE", AGENT, new, p.clone(), None);
    r["subResource"] = json!("status");
    r
}

/// Issue 23: the status subresource was not checked, so a stolen agent token could mark every
/// node's objects Ready=True. Now an agent writes status only for its own node's objects.
#[test]
fn an_agent_writes_status_only_for_its_own_nodes_objects() {
    let a = agents(true);
    let p = partition("n2", &["gpuplane.dev/host-cleanup"], "Retain");
    let r = refuse(&status_req(&p), &a, &known("n1"), node_of);
    assert!(
        r.as_ref()
            .is_some_and(|m| m.contains("status of this object belongs to node n2")),
        "{r:?}"
    );
    assert_eq!(refuse(&status_req(&p), &a, &known("n2"), node_of), None);
    // The status subresource with a spec change in the request: the API server keeps the spec,
    // and the rule judges the node of the stored object.
    let mut moved = status_req(&p);
    moved["object"]["spec"]["nodeName"] = json!("n1");
    let r = refuse(&moved, &a, &known("n1"), node_of);
    assert!(r.is_some_and(|m| m.contains("belongs to node n2")));
}

/// Issue 23: an agent request on an object whose node the webhook could not place was allowed.
#[test]
fn an_agent_request_on_an_object_of_no_known_node_is_refused() {
    let a = agents(true);
    let server = json!({"metadata": {"name": "s", "namespace": "t", "finalizers": []},
                        "spec": {"partitionRef": {"name": "gone"}}});
    let mut fin = server.clone();
    fin["metadata"]["finalizers"] = json!(["gpuplane.dev/server-cleanup"]);
    let mut r = req("UPDATE", AGENT, fin, server.clone(), None);
    r["kind"]["kind"] = json!("InferenceServer");
    let why = refuse(&r, &a, &known("n1"), node_of);
    assert!(
        why.as_ref()
            .is_some_and(|m| m.contains("cannot place this object on a node")),
        "{why:?}"
    );
    let mut st = status_req(&server);
    st["kind"]["kind"] = json!("InferenceServer");
    assert!(refuse(&st, &a, &known("n1"), node_of).is_some());
    // Kinds the agent never writes are refused to it outright.
    let mut cm = req("UPDATE", AGENT, json!({}), json!({}), None);
    cm["kind"] = json!({"group": "", "kind": "ConfigMap"});
    let why = refuse(&cm, &a, &known("n1"), node_of);
    assert!(why.is_some_and(|m| m.contains("may not update a ConfigMap")));
}

/// Places partitions p1 (n1), p2 (n2) and server t/s1 on p1, by reference too.
struct Fleet;
impl Placement for Fleet {
    fn node_of(&self, obj: &Value) -> Option<String> {
        node_of(obj)
    }
    fn node_of_ref(&self, kind: &str, ns: &str, name: &str) -> Option<String> {
        match (kind, ns, name) {
            ("GpuPartition", _, "p1") | ("InferenceServer", "t", "s1") => Some("n1".into()),
            ("GpuPartition", _, "p2") => Some("n2".into()),
            _ => None,
        }
    }
}

fn event(ns: &str, kind: &str, subject_ns: &str, name: &str) -> Value {
    let mut r = req(
        "CREATE",
        AGENT,
        json!({"metadata": {"name": "e", "namespace": ns}, "reason": "Converged",
               "regarding": {"apiVersion": "gpuplane.dev/v1alpha1", "kind": kind,
                             "namespace": subject_ns, "name": name}}),
        Value::Null,
        None,
    );
    r["kind"] = json!({"group": "events.k8s.io", "version": "v1", "kind": "Event"});
    r["namespace"] = json!(ns);
    r
}

/// Issue 23: events were not checked. An agent's events are about its node's partitions (in its
/// own namespace) and servers (in theirs), nothing else.
#[test]
fn an_agent_publishes_events_only_about_its_nodes_objects_where_they_belong() {
    let a = agents(true);
    let n1 = known("n1");
    let ok = |r: Value| refuse(&r, &a, &n1, Fleet);
    assert_eq!(
        ok(event(
            "gpuplane-system",
            "GpuPartition",
            "gpuplane-system",
            "p1"
        )),
        None
    );
    assert_eq!(ok(event("t", "InferenceServer", "t", "s1")), None);
    // Patching its event (a series) is an UPDATE: allowed too.
    let mut patch = event("t", "InferenceServer", "t", "s1");
    patch["operation"] = json!("UPDATE");
    patch["oldObject"] = patch["object"].clone();
    assert_eq!(ok(patch.clone()), None);
    for (r, want) in [
        (
            event("gpuplane-system", "GpuPartition", "gpuplane-system", "p2"),
            "belongs to node n2",
        ),
        // A partition's event in a tenant's namespace, where the tenant reads it.
        (
            event("t", "GpuPartition", "t", "p1"),
            "belongs in namespace \"gpuplane-system\"",
        ),
        (
            event("t", "InferenceServer", "t", "unknown"),
            "cannot place",
        ),
        (
            event("kube-system", "Pod", "kube-system", "x"),
            "must be about",
        ),
    ] {
        let why = ok(r);
        assert!(
            why.as_ref().is_some_and(|m| m.contains(want)),
            "{want}: {why:?}"
        );
    }
    // Rewriting another node's event into one of its own: the old object is judged too.
    let mut theft = patch;
    theft["oldObject"]["regarding"]["name"] = json!("p2");
    theft["oldObject"]["regarding"]["kind"] = json!("GpuPartition");
    theft["oldObject"]["regarding"]["namespace"] = json!("t");
    assert!(ok(theft).is_some());
    let mut del = event("t", "InferenceServer", "t", "s1");
    del["operation"] = json!("DELETE");
    assert!(ok(del).is_some_and(|m| m.contains("may not delete an event")));
}
