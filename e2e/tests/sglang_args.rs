//! The SGLang command line the agent renders, checked by SGLang's OWN argument parser and checks.
//!
//! `gpuplane render -f examples/kpro6 --p2p-disabled` prints the launch command of the reference
//! InferenceServer (Qwen3.5-122B-A10B, tp 4, NEXTN). e2e/sglang/check_args.py runs the flags
//! through sglang 0.5.23 the way `python -m sglang.launch_server` does before it spawns anything:
//! `prepare_server_args(argv)` (argparse) -> `ServerArgs.resolve_once()` (every resolution hook)
//! -> `check_server_args()`, on CPU (`--device cpu`), with a tiny local config.json of the same
//! architecture in place of the real model path. No GPU and no weights.
//!
//! Checked here:
//!   1. SGLang accepts the reference command and resolves what the spec says (tp 4, EAGLE -- NEXTN
//!      is SGLang's alias of EAGLE --, steps 3, topk 1, draft tokens 4, parsers, memory fraction,
//!      custom all-reduce off, host, port, served name); the same with tp forced to 1 and with a
//!      Qwen3-MoE config (which needs no CPU shim, see check_args.py) resolves the same.
//!   2. The checker catches problems: draft tokens 8 with topk 1 is silently rewritten to 4 (why
//!      the agent rejects that spec), an unknown flag is an argparse error, `MTP` is an unknown
//!      algorithm.
//!   3. The agent's own validation (`gpuplane plan`, exit 2 = rejected) agrees with SGLang on spec
//!      variants: the agent rejects a variant iff SGLang rejects it or silently changes a value.
//!   4. A few more variants are probed and printed (not asserted): places where the two disagree.
//!
//! Needs the SGLang venv; without it the test fails (on purpose) and says how to make it:
//!   bash e2e/setup/sglang-venv.sh      (as root; ~11 GB, ~3-5 min once, cached afterwards)
//! and the agent binary: cargo build --bin gpuplane (or GPUPLANE_BIN)
//! Run: cargo test -p gpuplane-e2e --test sglang_args -- --nocapture   (~15-25 s)

use gpuplane_e2e::paths::{cache_dir, gpuplane_bin, repo_root};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const SGLANG_VERSION: &str = "0.5.23";
const SETUP: &str = "e2e/setup/sglang-venv.sh";

/// The venv's python; fails (not skips) when the venv is missing or incomplete.
fn venv_python() -> PathBuf {
    let venv = cache_dir().join("sglang-venv");
    let python = venv.join("bin/python");
    let stamp = venv.join(format!(".gpuplane-ok-sglang-{SGLANG_VERSION}"));
    assert!(
        python.is_file() && stamp.is_file(),
        "the SGLang {SGLANG_VERSION} venv is missing or incomplete ({} / {}): run `bash {SETUP}` \
         (as root; it installs sglang=={SGLANG_VERSION} into $GPUPLANE_E2E_CACHE/sglang-venv, \
         default /var/cache/gpuplane-e2e/sglang-venv)",
        python.display(),
        stamp.display()
    );
    python
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Sets (Some) or removes (None) the value of `--flag` in a flag list; appends it when absent.
fn set_flag(flags: &[String], name: &str, value: Option<&str>) -> Vec<String> {
    let mut out = flags.to_vec();
    match (out.iter().position(|a| a == name), value) {
        (Some(i), Some(v)) => out[i + 1] = v.to_string(),
        (Some(i), None) => {
            out.drain(i..i + 2);
        }
        (None, Some(v)) => out.extend([name.to_string(), v.to_string()]),
        (None, None) => {}
    }
    out
}

/// `gpuplane render -f DIR --p2p-disabled`: Ok(flags of the only server) or Err(stderr) on exit 2.
fn render(agent: &Path, dir: &Path) -> Result<Vec<String>, String> {
    let out = Command::new(agent)
        .args(["render", "-f"])
        .arg(dir)
        .arg("--p2p-disabled")
        .output()
        .expect("run gpuplane render");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    match out.status.code() {
        Some(0) => {}
        Some(2) => return Err(stderr),
        c => panic!(
            "gpuplane render -f {} exited {c:?}: {stderr}",
            dir.display()
        ),
    }
    let v: Value = serde_json::from_slice(&out.stdout).expect("render prints JSON");
    let servers = v.as_array().expect("render prints a list");
    assert_eq!(servers.len(), 1, "one InferenceServer expected: {v}");
    let argv: Vec<String> = serde_json::from_value(servers[0]["argv"].clone()).unwrap();
    assert!(
        argv.len() > 3 && argv[1] == "-m" && argv[2] == "sglang.launch_server",
        "argv must be [python, -m, sglang.launch_server, flags...]: {argv:?}"
    );
    Ok(argv[3..].to_vec())
}

/// `gpuplane plan -f DIR`: Ok(()) when accepted (exit 0), Err(message) when rejected (exit 2).
/// A plan blocked only by preflight (exit 1, every blocker `PreflightFailed`: the twin's model
/// files do not fit this tp, say) accepted the arguments: that is a verdict on the host's model
/// files, not on the command line this test compares with SGLang's parser.
fn plan(agent: &Path, dir: &Path) -> Result<(), String> {
    let out = Command::new(agent)
        .args(["plan", "-f"])
        .arg(dir)
        .output()
        .expect("run gpuplane plan");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let only_preflight = text
        .lines()
        .filter(|l| l.starts_with("BLOCKED"))
        .all(|l| l.contains("(PreflightFailed)"));
    match out.status.code() {
        Some(0) => Ok(()),
        Some(1) if only_preflight && text.contains("(PreflightFailed)") => Ok(()),
        Some(2) => Err(text
            .lines()
            .filter(|l| l.trim_start().starts_with("- "))
            .map(|l| l.trim().to_string())
            .collect::<Vec<_>>()
            .join(" | ")),
        c => panic!("gpuplane plan -f {} exited {c:?}: {text}", dir.display()),
    }
}

/// Runs e2e/sglang/check_args.py on all cases in one process (importing sglang takes seconds).
fn sglang_check(python: &Path, cases: &[Value]) -> BTreeMap<String, Value> {
    let script = repo_root().join("e2e/sglang/check_args.py");
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e} (run `bash {SETUP}`)", python.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json!({ "cases": cases }).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "check_args.py failed ({}); is the venv complete? re-run `bash {SETUP}`\n{stderr}",
        out.status
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "check_args.py printed no JSON ({e}): {}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    serde_json::from_value(v["results"].clone()).unwrap()
}

/// What SGLang stores for a passed algorithm when it only normalizes it (not a rewrite).
fn canonical_algorithm(a: &str) -> String {
    let a = a.to_ascii_uppercase();
    if a == "NEXTN" {
        "EAGLE".into()
    } else {
        a
    }
}

/// Values SGLang changed, other than the letter case / NEXTN -> EAGLE normalization.
fn rewrites(r: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (k, pair) in r["rewritten"].as_object().cloned().unwrap_or_default() {
        let (passed, resolved) = (&pair[0], &pair[1]);
        if k == "speculative_algorithm"
            && passed.as_str().map(canonical_algorithm).as_deref() == resolved.as_str()
        {
            continue;
        }
        out.push(format!("{k}: {passed} -> {resolved}"));
    }
    out
}

/// SGLang's verdict: Err(error) when it refuses, Ok(rewrites) when it accepts.
fn verdict(r: &Value) -> Result<Vec<String>, String> {
    if r["ok"] == json!(true) {
        Ok(rewrites(r))
    } else {
        Err(format!(
            "{} ({})",
            r["error"].as_str().unwrap_or("?"),
            r["stage"].as_str().unwrap_or("?")
        ))
    }
}

fn show(r: &Value) -> String {
    match verdict(r) {
        Ok(w) if w.is_empty() => "accepts as given".into(),
        Ok(w) => format!("accepts but REWRITES {}", w.join(", ")),
        Err(e) => format!("REJECTS: {e}"),
    }
}

/// One spec variant: the change to server.yaml and the same change to the reference flags.
struct Variant {
    name: &'static str,
    edit: fn(&mut serde_yaml::Value),
    flags: fn(&[String]) -> Vec<String>,
}

fn spec(doc: &mut serde_yaml::Value) -> &mut serde_yaml::Mapping {
    doc.get_mut("spec").unwrap().as_mapping_mut().unwrap()
}
fn speculative(doc: &mut serde_yaml::Value) -> &mut serde_yaml::Mapping {
    spec(doc)
        .get_mut("speculative")
        .unwrap()
        .as_mapping_mut()
        .unwrap()
}
fn put(m: &mut serde_yaml::Mapping, k: &str, v: serde_yaml::Value) {
    m.insert(k.into(), v);
}

/// The results of check_args.py by case name.
type Results = BTreeMap<String, Value>;

/// The result of case `name`; panics when there is none.
fn result<'a>(results: &'a Results, name: &str) -> &'a Value {
    results
        .get(name)
        .unwrap_or_else(|| panic!("no result for {name}"))
}

/// The agent's verdict (`gpuplane plan`) per variant: Ok, or Err(the reasons it rejects it).
type AgentVerdicts = BTreeMap<&'static str, Result<(), String>>;

/// What the reference spec (server.yaml) says SGLang must resolve; checks the brief's numbers.
fn expected_resolution(server: &serde_yaml::Value) -> Value {
    let sp = &server["spec"];
    let spq = &sp["speculative"];
    let expected = json!({
        "tp_size": sp["tensorParallelSize"].as_u64().unwrap(),
        "speculative_algorithm": canonical_algorithm(spq["algorithm"].as_str().unwrap()),
        "speculative_num_steps": spq["numSteps"].as_u64().unwrap(),
        "speculative_eagle_topk": spq["eagleTopk"].as_u64().unwrap(),
        "speculative_num_draft_tokens": spq["numDraftTokens"].as_u64().unwrap(),
        "mem_fraction_static": sp["memFractionStatic"].as_f64().unwrap(),
        "tool_call_parser": sp["toolCallParser"].as_str().unwrap(),
        "reasoning_parser": sp["reasoningParser"].as_str().unwrap(),
        "disable_custom_all_reduce": true, // --p2p-disabled
        "host": sp["listen"]["host"].as_str().unwrap(),
        "port": sp["listen"]["port"].as_u64().unwrap(),
        "served_model_name": sp["model"]["servedName"].as_str().unwrap(),
    });
    // The brief's numbers, so that a changed example cannot make this test vacuous.
    assert_eq!(expected["tp_size"], json!(4));
    assert_eq!(expected["speculative_algorithm"], json!("EAGLE"));
    assert_eq!(
        (
            &expected["speculative_num_steps"],
            &expected["speculative_eagle_topk"],
            &expected["speculative_num_draft_tokens"]
        ),
        (&json!(3), &json!(1), &json!(4))
    );
    expected
}

/// Spec variants whose verdicts are asserted: the change to server.yaml and to the flags.
fn variants() -> Vec<Variant> {
    vec![
        Variant {
            name: "numDraftTokens 8 with eagleTopk 1",
            edit: |d| put(speculative(d), "numDraftTokens", 8.into()),
            flags: |f| set_flag(f, "--speculative-num-draft-tokens", Some("8")),
        },
        Variant {
            name: "eagleTopk without numSteps",
            edit: |d| {
                speculative(d).remove("numSteps");
            },
            flags: |f| set_flag(f, "--speculative-num-steps", None),
        },
        Variant {
            name: "algorithm eagle3 (lower case)",
            edit: |d| put(speculative(d), "algorithm", "eagle3".into()),
            // The agent upper-cases the algorithm when it renders.
            flags: |f| set_flag(f, "--speculative-algorithm", Some("EAGLE3")),
        },
        Variant {
            name: "reasoningParser qwen3-thinking",
            edit: |d| put(spec(d), "reasoningParser", "qwen3-thinking".into()),
            flags: |f| set_flag(f, "--reasoning-parser", Some("qwen3-thinking")),
        },
        Variant {
            name: "reasoningParser qwen35 (no such parser)",
            edit: |d| put(spec(d), "reasoningParser", "qwen35".into()),
            flags: |f| set_flag(f, "--reasoning-parser", Some("qwen35")),
        },
    ]
}

/// Probed and printed, not asserted: where the agent and SGLang 0.5.23 are known to differ.
fn probes() -> Vec<Variant> {
    vec![
        Variant {
            name: "NGRAM with eagleTopk 1",
            edit: |d| put(speculative(d), "algorithm", "NGRAM".into()),
            flags: |f| set_flag(f, "--speculative-algorithm", Some("NGRAM")),
        },
        Variant {
            name: "numSteps 299, numDraftTokens 300 (Qwen3.5: > mamba_track_interval 256)",
            edit: |d| {
                put(speculative(d), "numSteps", 299.into());
                put(speculative(d), "numDraftTokens", 300.into());
            },
            flags: |f| {
                let f = set_flag(f, "--speculative-num-steps", Some("299"));
                set_flag(&f, "--speculative-num-draft-tokens", Some("300"))
            },
        },
        Variant {
            name: "STANDALONE without draftModelPath",
            edit: |d| put(speculative(d), "algorithm", "STANDALONE".into()),
            flags: |f| set_flag(f, "--speculative-algorithm", Some("STANDALONE")),
        },
        Variant {
            name: "algorithm NONE",
            edit: |d| put(speculative(d), "algorithm", "NONE".into()),
            flags: |f| set_flag(f, "--speculative-algorithm", Some("NONE")),
        },
        Variant {
            name: "memFractionStatic 1.5",
            edit: |d| put(spec(d), "memFractionStatic", 1.5.into()),
            flags: |f| set_flag(f, "--mem-fraction-static", Some("1.5")),
        },
        Variant {
            name: "tensorParallelSize 0",
            edit: |d| put(spec(d), "tensorParallelSize", 0.into()),
            flags: |f| set_flag(f, "--tp-size", Some("0")),
        },
        Variant {
            name: "tensorParallelSize 3 (heads not divisible by 3)",
            edit: |d| put(spec(d), "tensorParallelSize", 3.into()),
            flags: |f| set_flag(f, "--tp-size", Some("3")),
        },
    ]
}

/// The checks of the reference command itself and of commands the checker must catch.
fn base_cases(reference: &[String]) -> Vec<Value> {
    let unknown_flag = [reference.to_vec(), s(&["--speculative-draft-tokens", "4"])].concat();
    vec![
        json!({"name": "reference", "argv": reference}),
        json!({"name": "reference tp 1", "argv": reference, "tp": 1}),
        json!({"name": "reference on Qwen3-MoE", "argv": reference, "model": "qwen3_moe"}),
        json!({"name": "reference without CPU shim", "argv": reference, "cpu_shim": false}),
        json!({"name": "neg: draft tokens 8", "argv": set_flag(reference, "--speculative-num-draft-tokens", Some("8"))}),
        json!({"name": "neg: unknown flag", "argv": unknown_flag}),
        json!({"name": "neg: algorithm MTP", "argv": set_flag(reference, "--speculative-algorithm", Some("MTP"))}),
        json!({"name": "probe: algorithm eagle3 passed in lower case", "argv": set_flag(reference, "--speculative-algorithm", Some("eagle3"))}),
    ]
}

/// Writes each variant of the example under `tmp`, asks the agent (`gpuplane plan`; when it
/// accepts, `render` must give the edited flags) and adds a case with the variant's flags.
fn agent_verdicts(
    agent: &Path,
    example: &Path,
    server: &serde_yaml::Value,
    reference: &[String],
    all: &[&Variant],
    tmp: &Path,
    cases: &mut Vec<Value>,
) -> AgentVerdicts {
    let mut agent_verdicts = AgentVerdicts::new();
    for (i, v) in all.iter().enumerate() {
        let dir = tmp.join(format!("v{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(example.join("partition.yaml"), dir.join("partition.yaml")).unwrap();
        let mut doc = server.clone();
        (v.edit)(&mut doc);
        std::fs::write(
            dir.join("server.yaml"),
            serde_yaml::to_string(&doc).unwrap(),
        )
        .unwrap();
        let verdict = plan(agent, &dir);
        let flags = (v.flags)(reference);
        if verdict.is_ok() {
            // What SGLang is given must be what the agent would really run.
            let rendered = render(agent, &dir)
                .unwrap_or_else(|e| panic!("{}: plan accepts it but render refuses: {e}", v.name));
            assert_eq!(
                rendered, flags,
                "{}: rendered flags differ from the edit",
                v.name
            );
        }
        agent_verdicts.insert(v.name, verdict);
        cases.push(json!({"name": v.name, "argv": flags}));
    }
    agent_verdicts
}

/// 1. SGLang accepts the reference command and resolves what the spec says.
fn check_reference(results: &Results, expected: &Value) {
    let r = |name: &str| -> &Value { result(results, name) };
    let reference_r = r("reference");
    println!(
        "\nSGLang {SGLANG_VERSION} on the reference command (model {}, shims {}):\n  resolved {}\n  warnings {}",
        reference_r["model"], reference_r["cpu_shims"], reference_r["resolved"], reference_r["warnings"]
    );
    assert_eq!(
        reference_r["ok"],
        json!(true),
        "SGLang refused the rendered reference command: {}",
        reference_r["error"]
    );
    assert_eq!(
        reference_r["resolved"], *expected,
        "SGLang resolved the reference command differently from the spec"
    );
    assert!(
        rewrites(reference_r).is_empty(),
        "SGLang rewrote values of the reference command: {:?}",
        rewrites(reference_r)
    );
    // tp 4 needs no devices in argument resolution (it passed on CPU above); tp 1 and another
    // architecture resolve everything else identically.
    for (name, tp) in [("reference tp 1", 1), ("reference on Qwen3-MoE", 4)] {
        let x = r(name);
        assert_eq!(x["ok"], json!(true), "{name}: {}", x["error"]);
        let mut want = expected.clone();
        want["tp_size"] = json!(tp);
        assert_eq!(x["resolved"], want, "{name} resolved differently");
    }
    // Why check_args.py shims one platform query for Qwen3.5 (a CPU-only failure, see there).
    let noshim = r("reference without CPU shim");
    assert_eq!(noshim["ok"], json!(false));
    assert!(
        noshim["error"]
            .as_str()
            .unwrap_or("")
            .contains("extra_buffer requires platform support for Mamba cache state snapshots"),
        "without the shim Qwen3.5 on CPU was expected to fail on the Mamba extra_buffer platform \
         check, got: {}",
        noshim["error"]
    );
}

/// 2. The checker catches problems.
fn check_negatives(results: &Results) {
    let r = |name: &str| -> &Value { result(results, name) };
    let d8 = r("neg: draft tokens 8");
    println!(
        "\nnegative checks:\n  draft tokens 8 with topk 1: {}",
        show(d8)
    );
    assert_eq!(d8["ok"], json!(true), "{}", d8["error"]);
    assert_eq!(d8["passed"]["speculative_num_draft_tokens"], json!(8));
    assert_eq!(d8["resolved"]["speculative_num_draft_tokens"], json!(4));
    assert!(
        d8["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1")),
        "the rewrite is expected to be logged: {}",
        d8["warnings"]
    );
    let unknown = r("neg: unknown flag");
    println!("  unknown flag: {}", show(unknown));
    assert_eq!(unknown["error_type"], json!("argparse"));
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .contains("unrecognized arguments: --speculative-draft-tokens"),
        "{}",
        unknown["error"]
    );
    let mtp = r("neg: algorithm MTP");
    println!("  --speculative-algorithm MTP: {}", show(mtp));
    assert_eq!(mtp["ok"], json!(false));
    assert!(
        mtp["error"]
            .as_str()
            .unwrap()
            .contains("Unknown speculative algorithm name: MTP"),
        "{}",
        mtp["error"]
    );
    let lower = r("probe: algorithm eagle3 passed in lower case");
    println!(
        "  --speculative-algorithm eagle3 (raw, lower case): {}",
        show(lower)
    );
    assert_eq!(lower["resolved"]["speculative_algorithm"], json!("EAGLE3"));
}

/// 3. The agent's validation against SGLang's; returns the disagreements.
fn compare_with_agent(
    results: &Results,
    variants: &[Variant],
    agent_verdicts: &AgentVerdicts,
) -> Vec<String> {
    let r = |name: &str| -> &Value { result(results, name) };
    // Expected verdicts (agent rejects, SGLang refuses-or-rewrites), so a broken side cannot make
    // the comparison pass by both being wrong the same way.
    let expect: BTreeMap<&str, (bool, bool)> = [
        ("numDraftTokens 8 with eagleTopk 1", (true, true)),
        ("eagleTopk without numSteps", (true, true)),
        ("algorithm eagle3 (lower case)", (false, false)),
        ("reasoningParser qwen3-thinking", (false, false)),
        ("reasoningParser qwen35 (no such parser)", (true, true)),
    ]
    .into_iter()
    .collect();
    println!("\nagent (gpuplane plan) vs SGLang {SGLANG_VERSION}:");
    let mut failures = Vec::new();
    for v in variants {
        let agent_rejects = agent_verdicts[v.name].is_err();
        let x = r(v.name);
        let sglang_objects = match verdict(x) {
            Ok(w) => !w.is_empty(),
            Err(_) => true,
        };
        println!(
            "  {:<42} agent {:<8} SGLang {}",
            v.name,
            if agent_rejects { "REJECTS" } else { "accepts" },
            show(x)
        );
        if let Err(m) = &agent_verdicts[v.name] {
            println!("  {:<42}   agent: {m}", "");
        }
        if agent_rejects != sglang_objects {
            failures.push(format!(
                "{}: agent {}, SGLang {}",
                v.name,
                if agent_rejects { "rejects" } else { "accepts" },
                show(x)
            ));
        }
        if expect[v.name] != (agent_rejects, sglang_objects) {
            failures.push(format!(
                "{}: expected (agent rejects, SGLang objects) = {:?}, got {:?}",
                v.name,
                expect[v.name],
                (agent_rejects, sglang_objects)
            ));
        }
    }
    failures
}

/// 4. Probes: printed, not asserted.
fn print_probes(results: &Results, probes: &[Variant], agent_verdicts: &AgentVerdicts) {
    let r = |name: &str| -> &Value { result(results, name) };
    println!("\nprobes (not asserted; a mismatch is a known difference between the agent and SGLang's argument checks):");
    for v in probes {
        let agent_rejects = agent_verdicts[v.name].is_err();
        let x = r(v.name);
        let sglang_objects = verdict(x).map(|w| !w.is_empty()).unwrap_or(true);
        println!(
            "  {} {:<70} agent {:<8} SGLang {}",
            if agent_rejects == sglang_objects {
                "  same"
            } else {
                "DIFFER"
            },
            v.name,
            if agent_rejects { "REJECTS" } else { "accepts" },
            show(x)
        );
    }
}

#[test]
fn sglang_accepts_the_rendered_command_and_agrees_with_the_agent() {
    let t0 = Instant::now();
    let agent = gpuplane_bin();
    let python = venv_python();
    let example = repo_root().join("examples/kpro6");

    // --- The reference command, and what its spec says SGLang must resolve ----------------------
    let reference = render(&agent, &example).expect("the reference example must render");
    println!("rendered flags: {}", reference.join(" "));
    let server: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(example.join("server.yaml")).expect("read server.yaml"),
    )
    .unwrap();
    let expected = expected_resolution(&server);

    // --- Spec variants: the agent's verdict, and the flags SGLang gets -----------------------------
    let (variants, probes) = (variants(), probes());
    let tmp = std::env::temp_dir().join(format!("gpuplane-sglang-args-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let mut cases = base_cases(&reference);
    let all: Vec<&Variant> = variants.iter().chain(probes.iter()).collect();
    let agent_verdicts = agent_verdicts(
        &agent, &example, &server, &reference, &all, &tmp, &mut cases,
    );
    let t_sglang = Instant::now();
    let results = sglang_check(&python, &cases);
    let sglang_s = t_sglang.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&tmp);

    check_reference(&results, &expected);
    check_negatives(&results);
    let failures = compare_with_agent(&results, &variants, &agent_verdicts);
    print_probes(&results, &probes, &agent_verdicts);

    println!(
        "\ntimings: SGLang checks of {} commands {sglang_s:.1}s, whole test {:.1}s",
        cases.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "the agent's validation and SGLang's disagree:\n  {}",
        failures.join("\n  ")
    );
}
