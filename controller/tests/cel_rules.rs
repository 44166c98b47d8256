//! The CRDs' CEL rules (`crds/src/cel.rs`) against the agent's own validation, on one corpus
//! (`crds/src/cel/cases.yaml`): every case is refused by the rule it names, evaluated here
//! client-side (cel-interpreter), *and* by the Rust validation the webhook, the CLI and the
//! agent share, at the same field in the same words; the reference examples pass every rule.
//! So a rule cannot drift from the Rust check it mirrors without failing here; the same cases
//! go to a real Kubernetes 1.36 API server in `e2e/tests/kube_cel.rs`.
//!
//! cel-interpreter is not the API server's CEL (no cost estimate, few of Kubernetes' extension
//! functions; the rules use none): the e2e lane is what proves the server's verdict.

use cel_interpreter::{Context, Program, Value};
use gpuplane::desired::offline;
use gpuplane_crds::cel::corpus::{base, cases};
use gpuplane_crds::cel::{Rule, RULES};
use gpuplane_crds::{GpuNodePool, GpuPartition, InferenceServer};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The one document of a YAML file, as JSON.
fn example(path: &str) -> Json {
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// JSON as the API server hands it to CEL: integers are `int`, other numbers `double`.
fn cel(v: &Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => n
            .as_i64()
            .map(Value::Int)
            .unwrap_or_else(|| Value::Float(n.as_f64().unwrap())),
        Json::String(s) => Value::String(Arc::new(s.clone())),
        Json::Array(a) => Value::List(Arc::new(a.iter().map(cel).collect())),
        Json::Object(o) => {
            let m: HashMap<String, Value> = o.iter().map(|(k, v)| (k.clone(), cel(v))).collect();
            m.into()
        }
    }
}

/// Every value at a rule's path (`spec.slices[].gpus`) in `obj`, with its path in the object.
fn values_at<'a>(obj: &'a Json, path: &str) -> Vec<(String, &'a Json)> {
    let mut at = vec![(String::new(), obj)];
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (name, items) = seg.strip_suffix("[]").map_or((seg, false), |n| (n, true));
        let mut next = Vec::new();
        for (p, v) in at {
            let Some(child) = v.get(name) else { continue };
            let p = if p.is_empty() {
                name.to_string()
            } else {
                format!("{p}.{name}")
            };
            match (items, child) {
                (true, Json::Array(a)) => {
                    next.extend(a.iter().enumerate().map(|(i, x)| (format!("{p}[{i}]"), x)))
                }
                (true, _) => {}
                (false, c) => next.push((p, c)),
            }
        }
        at = next;
    }
    at
}

fn run(expr: &str, this: &Json, old: Option<&Json>) -> Value {
    let program =
        Program::compile(expr).unwrap_or_else(|e| panic!("CEL does not compile: {expr}: {e}"));
    let mut ctx = Context::default();
    ctx.add_variable_from_value("self", cel(this));
    if let Some(o) = old {
        ctx.add_variable_from_value("oldSelf", cel(o));
    }
    program
        .execute(&ctx)
        .unwrap_or_else(|e| panic!("CEL {expr} on {this}: {e}"))
}

/// The rules of `kind` that `obj` fails (a transition rule only with `old`), each with the
/// message the server prints.
fn failures(kind: &str, obj: &Json, old: Option<&Json>) -> Vec<(&'static Rule, String)> {
    let mut out = Vec::new();
    for r in RULES.iter().filter(|r| r.kind == kind) {
        let transition = r.rule.contains("oldSelf");
        for (p, v) in values_at(obj, r.path) {
            let before = match old {
                Some(o) if transition => values_at(o, r.path)
                    .into_iter()
                    .find(|(q, _)| *q == p)
                    .map(|(_, v)| v),
                _ => None,
            };
            if transition && before.is_none() {
                continue;
            }
            if run(r.rule, v, before) == Value::Bool(true) {
                continue;
            }
            out.push((r, r.message.to_string()));
        }
    }
    out
}

/// What the Rust validation says of `obj` (a case's object), as `field: message` lines.
fn rust_problems(obj: &Json) -> Vec<(String, String)> {
    let errors = match obj["kind"].as_str().unwrap() {
        "GpuPartition" => {
            let p: GpuPartition = serde_json::from_value(obj.clone()).unwrap();
            offline::validate(&[p], &[]).0
        }
        "InferenceServer" => {
            let p: GpuPartition = serde_json::from_value(base("partition")).unwrap();
            let s: InferenceServer = serde_json::from_value(obj.clone()).unwrap();
            offline::validate(&[p], &[s]).0
        }
        "GpuNodePool" => {
            let p: GpuNodePool = serde_json::from_value(obj.clone()).unwrap();
            offline::validate_pool(&p)
        }
        k => panic!("unknown kind {k}"),
    };
    errors.into_iter().map(|e| (e.field, e.message)).collect()
}

#[test]
fn every_case_is_refused_by_its_rule_and_by_the_agents_validation_in_the_same_words() {
    let all = cases();
    assert!(all.len() >= 20, "the corpus shrank: {} cases", all.len());
    for c in &all {
        let obj = c.object.clone();
        let kind = obj["kind"].as_str().unwrap().to_string();
        let failed = failures(&kind, &obj, None);
        let mine: Vec<&String> = failed
            .iter()
            .filter(|(r, _)| r.id == c.rule)
            .map(|(_, m)| m)
            .collect();
        assert!(
            !mine.is_empty(),
            "{}: rule {} let it pass (failed: {:?})",
            c.name,
            c.rule,
            failed.iter().map(|(r, _)| r.id).collect::<Vec<_>>()
        );
        assert!(
            mine.iter().any(|m| m.contains(&c.says)),
            "{}: rule {} says {mine:?}, not {:?}",
            c.name,
            c.rule,
            c.says
        );
        let rust = rust_problems(&obj);
        assert!(
            rust.iter()
                .any(|(f, m)| *f == c.field && m.contains(&c.says)),
            "{}: the agent's validation does not say {:?} at {}: {rust:?}",
            c.name,
            c.says,
            c.field
        );
    }
}

#[test]
fn every_rule_has_a_case_and_a_known_kind_and_path() {
    let all = cases();
    for r in RULES {
        assert!(
            all.iter().any(|c| c.rule == r.id) || r.rule.contains("oldSelf"),
            "rule {} has no case in crds/src/cel/cases.yaml",
            r.id
        );
    }
    // Paths that name no field would silently never run: `crds()` panics on them.
    assert_eq!(gpuplane_crds::crds().len(), 3);
}

#[test]
fn the_reference_and_gitops_examples_pass_every_rule() {
    let mut checked = 0;
    for dir in ["examples/kpro6", "examples/kpro6-all-lxc"] {
        for f in ["partition.yaml", "server.yaml"] {
            let obj = example(&format!("{dir}/{f}"));
            let kind = obj["kind"].as_str().unwrap().to_string();
            assert_eq!(failures(&kind, &obj, None).len(), 0, "{dir}/{f}");
            checked += 1;
        }
    }
    assert!(failures("GpuNodePool", &base("pool"), None).is_empty());
    for v in ["25%", "0%", "100%", "0", "3"] {
        let mut p = base("pool");
        p["spec"]["maxUnavailable"] = match v.parse::<i64>() {
            Ok(n) => n.into(),
            Err(_) => v.into(),
        };
        assert!(failures("GpuNodePool", &p, None).is_empty(), "{v}");
    }
    assert_eq!(checked, 4);
}

/// `spec.nodeName` cannot change (a transition rule: the server compares with the stored object).
#[test]
fn a_partitions_node_name_is_immutable_but_the_rest_of_its_spec_is_not() {
    let old = base("partition");
    let mut moved = old.clone();
    moved["spec"]["nodeName"] = "kpro7".into();
    let failed = failures("GpuPartition", &moved, Some(&old));
    assert!(
        failed
            .iter()
            .any(|(r, m)| r.id == "partition-node-immutable" && m.starts_with("is immutable: ")),
        "{failed:?}"
    );
    let mut retained = old.clone();
    retained["spec"]["deletionPolicy"] = "Restore".into();
    assert!(failures("GpuPartition", &retained, Some(&old)).is_empty());
    // On create there is no old object: the rule does not run.
    assert!(failures("GpuPartition", &moved, None).is_empty());
}

/// The speculative algorithms the rule lists are SGLang's (`sglang/speculative.rs`).
#[test]
fn the_algorithm_rule_lists_exactly_the_algorithms_the_agent_knows() {
    let r = RULES
        .iter()
        .find(|r| r.id == "speculative-algorithm")
        .unwrap();
    let listed = r
        .rule
        .split("(?i)(")
        .nth(1)
        .and_then(|s| s.split(")$").next())
        .unwrap();
    let mut known: Vec<&str> = gpuplane::sglang::speculative::ALGORITHMS.to_vec();
    let mut in_rule: Vec<&str> = listed.split('|').collect();
    known.sort();
    in_rule.sort();
    assert_eq!(in_rule, known);
    assert!(r
        .message
        .contains(&gpuplane::sglang::speculative::ALGORITHMS.join(", ")));
}

mod support;

/// Whether the documents pass the CRD schema, as `plan -f` reads them (YAML, then the schema
/// of `gpuplane_crds::crds()`: the API server checks the same before any rule counts).
fn schema_accepts(partition: &serde_yaml::Value, server: &serde_yaml::Value) -> bool {
    let text = format!(
        "{}---\n{}",
        serde_yaml::to_string(partition).unwrap(),
        serde_yaml::to_string(server).unwrap()
    );
    gpuplane::manifests::Manifests::default()
        .add_text(&text, "mutated.yaml")
        .is_ok()
}

/// Whether the agent's host-independent validation (the webhook's) refuses the documents.
fn rust_refuses(partition: &serde_yaml::Value, server: &serde_yaml::Value) -> bool {
    let (Ok(p), Ok(s)) = (
        serde_yaml::from_value::<GpuPartition>(partition.clone()),
        serde_yaml::from_value::<InferenceServer>(server.clone()),
    ) else {
        return true;
    };
    !offline::validate(&[p], &[s]).0.is_empty()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(500),
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// The CEL rules never refuse what the agent accepts (a rule stricter than the agent would
    /// make a valid spec unappliable): on every mutation of the reference split that a rule
    /// refuses, the agent's validation refuses it too.
    #[test]
    fn no_rule_refuses_a_mutation_the_agent_accepts(
        muts in proptest::collection::vec(support::mutations::mutation(), 1..4)
    ) {
        let mut partition: serde_yaml::Value = serde_yaml::to_value(base("partition")).unwrap();
        let mut server: serde_yaml::Value = serde_yaml::to_value(base("server")).unwrap();
        for m in &muts {
            support::mutations::apply(m, &mut partition, &mut server);
        }
        // What the schema refuses never reaches a rule that matters: the server refuses it too.
        if !schema_accepts(&partition, &server) {
            return Ok(());
        }
        let mut failed = Vec::new();
        for (kind, doc) in [("GpuPartition", &partition), ("InferenceServer", &server)] {
            let obj = serde_json::to_value(doc).unwrap();
            failed.extend(failures(kind, &obj, None).into_iter().map(|(r, _)| r.id));
        }
        if !failed.is_empty() {
            proptest::prop_assert!(
                rust_refuses(&partition, &server),
                "CEL refused ({failed:?}) what the agent accepts: {muts:?}"
            );
        }
    }
}
