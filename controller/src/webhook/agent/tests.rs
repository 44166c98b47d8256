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

fn node_of(v: &Value) -> Option<String> {
    v["spec"]["nodeName"].as_str().map(str::to_string)
}

const AGENT: &str = "system:serviceaccount:gpuplane-system:gpuplane";

#[test]
fn the_agent_may_change_finalizers_but_not_the_spec() {
    let agents = vec![AGENT.to_string()];
    let old = partition("n1", &[], "Retain");
    let fin = partition("n1", &["gpuplane.dev/host-cleanup"], "Retain");
    assert_eq!(
        refuse(
            &req("UPDATE", AGENT, fin, old.clone(), None),
            &agents,
            node_of
        ),
        None
    );
    let spec = partition("n1", &[], "Restore");
    let r = refuse(
        &req("UPDATE", AGENT, spec, old.clone(), None),
        &agents,
        node_of,
    );
    assert!(r.is_some_and(|m| m.contains("only finalizers")));
    let r = refuse(
        &req("CREATE", AGENT, old.clone(), Value::Null, None),
        &agents,
        node_of,
    );
    assert!(r.is_some_and(|m| m.contains("may not create")));
    // Anyone else is not judged here.
    let spec = partition("n1", &[], "Restore");
    assert_eq!(
        refuse(&req("UPDATE", "admin", spec, old, None), &agents, node_of),
        None
    );
}

#[test]
fn with_a_node_bound_token_only_its_nodes_objects() {
    let agents = vec![AGENT.to_string()];
    let old = partition("n2", &[], "Retain");
    let fin = partition("n2", &["gpuplane.dev/host-cleanup"], "Retain");
    let r = refuse(
        &req("UPDATE", AGENT, fin.clone(), old.clone(), Some("n1")),
        &agents,
        node_of,
    );
    assert!(r.is_some_and(|m| m.contains("belongs to node n2")));
    assert_eq!(
        refuse(
            &req("UPDATE", AGENT, fin, old, Some("n2")),
            &agents,
            node_of
        ),
        None
    );
}
