use super::*;
use serde_json::json;

fn req(op: &str, user: &str, new: Value, old: Value, node: Option<&str>) -> Value {
    let mut r =
        json!({"operation": op, "userInfo": {"username": user}, "object": new, "oldObject": old});
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
