//! Mutations of the reference manifests (hostile strings in every text field, arbitrary
//! numbers, deleted and renamed keys): the corpus of the property tests on validation
//! (`validation_props.rs`: nothing later fails because of the text; `cel_rules.rs`: the CRDs'
//! CEL rules refuse nothing the agent's validation accepts).

use proptest::prelude::*;
use serde_yaml::Value;

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
pub fn hostile() -> impl Strategy<Value = String> {
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
pub enum Mutation {
    Text(bool, usize, String),
    Number(usize, i64),
    ExtraArgs(Vec<String>),
    Delete(bool, usize),
    Rename(bool, usize, String),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
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

pub fn apply(m: &Mutation, partition: &mut Value, server: &mut Value) {
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
