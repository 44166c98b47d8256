use super::*;
use crate::host::model::Location;
use crate::host::sim::{SimFiles, SimModel};
use std::cell::Cell;

fn files() -> SimFiles {
    let mut f = SimFiles::default();
    f.models.insert(
        "/models/m".into(),
        SimModel {
            config: serde_json::json!({"num_attention_heads": 8}),
            shards: 2,
            shard_bytes: 100,
            ..SimModel::default()
        },
    );
    f.paths.insert("/usr/local/cuda".into());
    f
}

fn req(dir: &str, roots: &[&str]) -> PreflightRequest {
    PreflightRequest {
        server: "default/s".into(),
        location: Location::Host,
        python: "/venv/bin/python3".into(),
        user: None,
        model_dir: Some(dir.into()),
        draft_dir: None,
        env_paths: vec![
            ("CUDA_HOME".into(), "/usr/local/cuda".into()),
            ("LD_LIBRARY_PATH".into(), "/nope/lib64".into()),
        ],
        gpus: vec!["0000:01:00.0".into()],
        roots: roots.iter().map(|r| r.to_string()).collect(),
        unit: crate::host::model::UnitRef {
            location: Location::Host,
            name: "s.service".into(),
        },
        served_name: "s".into(),
        smoke: None,
    }
}

fn ok_interp() -> InterpreterFacts {
    InterpreterFacts {
        sglang: Some("0.5.23".into()),
        ..Default::default()
    }
}

#[test]
fn facts_name_missing_env_paths_and_count_weights() {
    let f = Cache::default().facts(
        &files(),
        &req("/models/m", &["/models"]),
        &ok_interp,
        &BTreeMap::new,
    );
    assert_eq!(
        f.missing_paths,
        vec!["LD_LIBRARY_PATH=/nope/lib64".to_string()]
    );
    let m = f.model.unwrap();
    assert_eq!((m.problems.len(), m.weight_bytes, m.shards), (0, 200, 2));
}

#[test]
fn a_model_outside_the_roots_is_not_read() {
    let f = Cache::default().facts(
        &files(),
        &req("/models/m", &["/srv/models"]),
        &ok_interp,
        &BTreeMap::new,
    );
    let m = f.model.unwrap();
    assert_eq!(m.shards, 0);
    assert!(
        m.problems[0].contains("not under the slice's modelRoots"),
        "{:?}",
        m.problems
    );
    // `/models/mine` is not under `/models/m`.
    assert!(!under("/models/mine", "/models/m") && under("/models/m/x", "/models/m/"));
}

#[test]
fn the_cache_holds_until_a_file_changes_and_never_keeps_a_failing_interpreter() {
    let calls = Cell::new(0);
    let interp = || {
        calls.set(calls.get() + 1);
        ok_interp()
    };
    let mut fs = files();
    let mut c = Cache::default();
    let r = req("/models/m", &[]);
    c.facts(&fs, &r, &interp, &BTreeMap::new);
    c.facts(&fs, &r, &interp, &BTreeMap::new);
    assert_eq!(calls.get(), 1, "unchanged: read once");
    fs.models
        .get_mut("/models/m")
        .unwrap()
        .truncated
        .insert("model-00001-of-00002.safetensors".into(), 5);
    let f = c.facts(&fs, &r, &interp, &BTreeMap::new);
    assert_eq!(calls.get(), 2, "a changed size reads again");
    assert!(f.model.unwrap().problems[0].contains("truncated"));
    let failing = || {
        calls.set(calls.get() + 1);
        InterpreterFacts {
            error: Some("no sglang".into()),
            ..Default::default()
        }
    };
    let mut c = Cache::default();
    c.facts(&fs, &r, &failing, &BTreeMap::new);
    c.facts(&fs, &r, &failing, &BTreeMap::new);
    assert_eq!(calls.get(), 4, "a failing interpreter is asked every time");
}

#[test]
fn import_check_output_becomes_versions_or_the_error() {
    let f = interpreter_facts(
        "/p",
        true,
        "noise\n{\"sglang\": \"0.5.23\", \"torch\": \"2.9.1\", \"cuda\": \"13.0\"}\n",
        "",
    );
    assert_eq!(
        (f.sglang.as_deref(), f.cuda.as_deref(), f.error),
        (Some("0.5.23"), Some("13.0"), None)
    );
    let f = interpreter_facts("/p", true, "{\"error\": \"import sglang failed: ModuleNotFoundError\", \"torch\": \"2.9.1\", \"cuda\": \"None\"}", "");
    assert_eq!(
        f.error.as_deref(),
        Some("/p: import sglang failed: ModuleNotFoundError")
    );
    assert_eq!(f.cuda, None);
    let f = interpreter_facts("/p", false, "", "sh: /p: not found\n");
    assert_eq!(f.error.as_deref(), Some("/p cannot run: sh: /p: not found"));
}

#[test]
fn nvidia_smi_memory_is_matched_by_full_address() {
    let out = "00000000:01:00.0, 97887\n00000000:11:00.0, 97887\nbad line\n";
    let m = parse_gpu_memory(out, &["0000:01:00.0".into(), "0000:61:00.0".into()]);
    assert_eq!(
        m.into_iter().collect::<Vec<_>>(),
        vec![("0000:01:00.0".to_string(), 97887)]
    );
}
