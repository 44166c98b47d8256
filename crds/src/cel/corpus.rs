//! The corpus of wrong specs the CEL rules are proven on (`cases.yaml`), read into whole
//! objects: the Rust-side test (`controller/tests/cel_rules.rs`) and the API-server lane
//! (`e2e/tests/kube_cel.rs`) read the same cases from here, so they cannot test different things.

use serde_json::Value as Json;

/// The reference split's partition and server (`examples/kpro6/`), the bases of the cases.
const PARTITION: &str = include_str!("../../../examples/kpro6/partition.yaml");
const SERVER: &str = include_str!("../../../examples/kpro6/server.yaml");

/// One wrong spec: the rule that refuses it, and where and in which words the agent's own
/// validation does.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub rule: String,
    pub field: String,
    pub says: String,
    /// The whole object (a base with the case's merge patch applied).
    pub object: Json,
}

#[derive(serde::Deserialize)]
struct Entry {
    case: String,
    base: String,
    rule: String,
    field: String,
    says: String,
    patch: Json,
}

/// The base objects by name: `partition`, `server` (the reference split) and `pool`.
pub fn base(name: &str) -> Json {
    match name {
        "partition" => serde_yaml::from_str(PARTITION).expect("examples/kpro6/partition.yaml"),
        "server" => serde_yaml::from_str(SERVER).expect("examples/kpro6/server.yaml"),
        "pool" => serde_json::json!({"apiVersion": "gpuplane.dev/v1alpha1", "kind": "GpuNodePool",
            "metadata": {"name": "inference-fleet"}, "spec": {"maxUnavailable": 1}}),
        b => panic!("cel/cases.yaml: unknown base {b}"),
    }
}

/// Every case of `cases.yaml`, in its order.
pub fn cases() -> Vec<Case> {
    let entries: Vec<Entry> = serde_yaml::from_str(super::CASES).expect("cel/cases.yaml");
    entries
        .into_iter()
        .map(|e| {
            let mut object = base(&e.base);
            merge_patch(&mut object, &e.patch);
            Case {
                name: e.case,
                rule: e.rule,
                field: e.field,
                says: e.says,
                object,
            }
        })
        .collect()
}

/// RFC 7386: objects merge key by key, `null` removes, anything else replaces.
pub fn merge_patch(target: &mut Json, patch: &Json) {
    let Json::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Json::Object(Default::default());
    }
    let t = target.as_object_mut().expect("an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Json::Null), v);
        }
    }
}
