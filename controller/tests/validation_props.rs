//! One decision before any host write: for any mutation of the reference manifests (hostile
//! strings in every text field, arbitrary numbers, deleted and renamed keys), either the
//! validation that `plan` and `converge` run first refuses it — nothing is observed beyond a
//! read, nothing written — or the converge that follows never fails because of the spec's
//! text: no step fails, no unit is refused by the renderer, no server is refused by SGLang's
//! own argument checks (the simulated server applies them).
//!
//! Cases: `PROPTEST_CASES` (default 500: about 40 s in a debug build on 2 cores; 2000 took 160 s
//! there, most of CI's budget for one property); the long run is
//! `PROPTEST_CASES=20000 cargo test -p gpuplane --release --test validation_props`.

use gpuplane::cli::desired_for_host;
use gpuplane::converge::{converge, Options, Stop, WaitOutcome};
use gpuplane::door::Door;
use gpuplane::host::sim::SimHost;
use gpuplane::manifests::Manifests;
use proptest::prelude::*;
use serde_yaml::Value;

const PARTITION: &str = include_str!("../../examples/kpro6/partition.yaml");
const SERVER: &str = include_str!("../../examples/kpro6/server.yaml");
const HOST: &str = include_str!("../../examples/hosts/kpro6.yaml");

/// Text fields of the server, as paths of keys (numbers index lists).
const SERVER_TEXT: &[&[&str]] = &[
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["spec", "python"],
    &["spec", "model", "path"],
    &["spec", "model", "servedName"],
    &["spec", "toolCallParser"],
    &["spec", "reasoningParser"],
    &["spec", "listen", "host"],
    &["spec", "unit", "name"],
    &["spec", "partitionRef", "slice"],
    &["spec", "speculative", "algorithm"],
    &["spec", "speculative", "draftModelPath"],
    &["spec", "env", "0", "name"],
    &["spec", "env", "1", "value"],
    &["spec", "extraArgs"],
];
/// Number fields of the server.
const SERVER_NUMBERS: &[&[&str]] = &[
    &["spec", "tensorParallelSize"],
    &["spec", "listen", "port"],
    &["spec", "speculative", "numSteps"],
    &["spec", "speculative", "eagleTopk"],
    &["spec", "speculative", "numDraftTokens"],
    &["spec", "startup", "stallAfterSeconds"],
    &["spec", "startup", "deadlineSeconds"],
];
/// Text fields of the partition.
const PARTITION_TEXT: &[&[&str]] = &[
    &["metadata", "name"],
    &["spec", "slices", "0", "name"],
    &["spec", "slices", "1", "consumer", "vm", "pciMapping"],
];

/// Strings a careless or hostile user might write.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ -~]{0,24}",
        "(\\PC|\n|\t|\r|\u{0}|%|\\$|\"|\\\\|;| |--){0,12}",
        prop::sample::select(vec![
            "",
            " ",
            "\n",
            "\u{0}",
            "%n",
            "%%",
            "$HOME",
            "$$",
            "\"",
            "\\",
            ";",
            "a b",
            "--x",
            "-",
            "/abs/path",
            "org/name",
            "0.0.0.0",
            "::1",
            "localhost",
            "qwen3",
            "NEXTN",
            "x.service",
            "../..",
            "/root/ml-env/bin/python3",
        ])
        .prop_map(String::from),
        Just("x".repeat(5000)),
    ]
}

/// One change to a document.
#[derive(Debug, Clone)]
enum Mutation {
    Text(bool, usize, String),
    Number(usize, i64),
    ExtraArgs(Vec<String>),
    Delete(bool, usize),
    Rename(bool, usize, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<bool>(), 0..SERVER_TEXT.len().max(PARTITION_TEXT.len()), hostile())
            .prop_map(|(srv, i, s)| Mutation::Text(srv, i, s)),
        2 => (0..SERVER_NUMBERS.len(), prop_oneof![-3i64..70_000, any::<i64>()])
            .prop_map(|(i, n)| Mutation::Number(i, n)),
        2 => prop::collection::vec(hostile(), 0..4).prop_map(Mutation::ExtraArgs),
        1 => (any::<bool>(), 0..SERVER_TEXT.len()).prop_map(|(srv, i)| Mutation::Delete(srv, i)),
        1 => (any::<bool>(), 0..SERVER_TEXT.len(), "[a-zA-Z]{1,12}")
            .prop_map(|(srv, i, n)| Mutation::Rename(srv, i, n)),
    ]
}

/// The value at `path`, created (as a mapping) where missing; `None` past a list's end.
fn at<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    let mut cur = v;
    for k in path {
        cur = match k.parse::<usize>() {
            Ok(i) => cur.as_sequence_mut()?.get_mut(i)?,
            Err(_) => {
                if !cur.is_mapping() {
                    *cur = Value::Mapping(Default::default());
                }
                let m = cur.as_mapping_mut()?;
                m.entry(Value::String(k.to_string())).or_insert(Value::Null)
            }
        };
    }
    Some(cur)
}

fn apply(m: &Mutation, partition: &mut Value, server: &mut Value) {
    let pick = |srv: bool, i: usize| {
        if srv {
            SERVER_TEXT[i % SERVER_TEXT.len()]
        } else {
            PARTITION_TEXT[i % PARTITION_TEXT.len()]
        }
    };
    match m {
        Mutation::Text(srv, i, s) => {
            let doc = if *srv { &mut *server } else { &mut *partition };
            if let Some(v) = at(doc, pick(*srv, *i)) {
                *v = Value::String(s.clone());
            }
        }
        Mutation::Number(i, n) => {
            if let Some(v) = at(server, SERVER_NUMBERS[*i]) {
                *v = Value::Number((*n).into());
            }
        }
        Mutation::ExtraArgs(a) => {
            if let Some(v) = at(server, &["spec", "extraArgs"]) {
                *v = Value::Sequence(a.iter().cloned().map(Value::String).collect());
            }
        }
        Mutation::Delete(srv, i) | Mutation::Rename(srv, i, _) => {
            let path = pick(*srv, *i);
            let doc = if *srv { &mut *server } else { &mut *partition };
            let (last, parent) = path.split_last().expect("non-empty path");
            let Some(map) = at(doc, parent).and_then(Value::as_mapping_mut) else {
                return;
            };
            if let Some(old) = map.remove(*last) {
                if let Mutation::Rename(_, _, name) = m {
                    map.insert(Value::String(name.clone()), old);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(500),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn validation_fails_or_nothing_later_fails_because_of_the_text(
        muts in prop::collection::vec(mutation(), 1..4)
    ) {
        let mut partition: Value = serde_yaml::from_str(PARTITION).unwrap();
        let mut server: Value = serde_yaml::from_str(SERVER).unwrap();
        for m in &muts {
            apply(m, &mut partition, &mut server);
        }
        let text = format!(
            "{}---\n{}",
            serde_yaml::to_string(&partition).unwrap(),
            serde_yaml::to_string(&server).unwrap()
        );
        let mut manifests = Manifests::default();
        if manifests.add_text(&text, "mutated.yaml").is_err() {
            return Ok(()); // refused while reading: nothing was even observed
        }
        let mut host = SimHost::from_yaml(HOST, "twin").unwrap();
        let Ok(desired) = desired_for_host(&manifests, &mut host, "10de", "nvidia") else {
            return Ok(()); // refused by validation: converge never runs
        };
        let report = {
            let mut door = Door::new(&mut host);
            converge(&desired, &mut door, &Options::default())
        };
        if let Some(Stop::StepFailed { step, error }) = &report.stop {
            prop_assert!(false, "a step failed after validation passed: {step}: {error}\n{text}");
        }
        for b in &report.final_plan.blockers {
            prop_assert!(b.reason != "InvalidSpec", "blocked as InvalidSpec after validation: {}\n{text}", b.message);
        }
        for (unit, w) in &report.waits {
            if let WaitOutcome::Crashed { log_tail, .. } = w {
                prop_assert!(false, "{unit} was refused at start: {log_tail:?}\n{text}");
            }
        }
    }
}
