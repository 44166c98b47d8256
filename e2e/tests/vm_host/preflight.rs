//! Preflight and the smoke test on the real target: `gpuplane` inside the qemu VM reads a small
//! model directory written there (two safetensors shards, one cut short), and runs the smoke test
//! against the SGLang stand-in as a real systemd unit. One boot for every case
//! (e2e/vm/scenarios/preflight.sh). Needs the VM set-up and `cargo build --bin gpuplane`.
//! Run: cargo test -p gpuplane-e2e --test vm_host preflight -- --nocapture

use gpuplane_e2e::vm::{ready, step_kinds, Report};
use serde_json::Value;

const S: &str = "InferenceServer/default/pf";

/// The `t` condition of the server in a converge's JSON: (status, reason, message).
fn condition(j: &Value, t: &str) -> (String, String, String) {
    let c = j["status"][S]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        .cloned()
        .unwrap_or_default();
    let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
    (s("status"), s("reason"), s("message"))
}

#[test]
fn vm_preflight_catches_a_truncated_shard_and_the_smoke_test_checks_tool_calls() {
    let m = Report::parse(crate::scenario("preflight"));

    // The cut shard: `gpuplane preflight` names it, converge is blocked and writes nothing.
    let pf = m.json("pf-truncated");
    assert_eq!(m.rc("pf-truncated"), 1, "{pf}");
    let problems = pf["default/pf"]["problems"].to_string();
    assert!(
        problems.contains("/srv/models/small/model-00002-of-00002.safetensors: ")
            && problems.contains("truncated"),
        "{problems}"
    );
    let tr = m.json("truncated");
    assert_eq!(m.rc("truncated"), 1, "{tr}");
    assert_eq!(tr["writes"], 0, "{tr}");
    let (st, reason, msg) = ready(&tr, S);
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "PreflightFailed"),
        "{msg}"
    );
    assert!(msg.contains("model-00002-of-00002.safetensors"), "{msg}");
    assert_eq!(m.get("UNITFILE", "truncated")[0], "absent");

    // Complete again: preflight passes in the real target, the server starts, the smoke test passes.
    let pf = m.json("pf-complete");
    assert_eq!(m.rc("pf-complete"), 0, "{pf}");
    assert_eq!(pf["default/pf"]["facts"]["interpreter"]["sglang"], "0.5.23");
    assert_eq!(pf["default/pf"]["facts"]["model"]["weightBytes"], 8000);
    let ok = m.json("complete");
    assert_eq!(m.rc("complete"), 0, "{ok}");
    assert_eq!(m.get("ACTIVE", "complete")[0], "active");
    let (st, reason, msg) = condition(&ok, "PreflightPassed");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("True", "PreflightPassed"),
        "{msg}"
    );
    assert!(msg.contains("sglang 0.5.23"), "{msg}");
    let (st, _, msg) = condition(&ok, "SmokeTested");
    assert_eq!(st, "True", "{msg}");
    assert_eq!(msg, "3 chat requests answered as expected");

    // No tool call: the new unit's smoke test fails and says which request and why.
    let nt = m.json("notool");
    assert!(step_kinds(&nt).contains(&"writeUnit".to_string()), "{nt}");
    // A failed smoke test is a failed converge (issue 22).
    assert_eq!(m.rc("notool"), 1, "{nt}");
    let (st, reason, msg) = condition(&nt, "SmokeTested");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "SmokeTestFailed"),
        "{msg}"
    );
    assert!(
        msg.contains("tools: no tool call, expected get_weather"),
        "{msg}"
    );
    assert!(
        !msg.contains("math:") && !msg.contains("thinking:"),
        "only tools failed: {msg}"
    );
}
