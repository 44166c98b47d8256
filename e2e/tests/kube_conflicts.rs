//! Conflicts on a real kube-apiserver + etcd (issue 13, item 3): the oldest claim wins
//! (`controller/src/reconcile/conflict.rs`). With the examples converged, a second partition for
//! the same node (so claiming the same GPUs) and a second server on the same slice are created;
//! each loser gets `Ready=False` with reason `Conflict` naming the winner, one event, and then
//! nothing flaps: over 10 drift intervals no object's resourceVersion changes (no status write),
//! no host write happens and the host file stays byte for byte the same. When the winning
//! partition is deleted, the loser takes over. A partition for a node no agent serves keeps no
//! status at all and no agent touches it (what a user sees: an empty READY column).
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test kube_conflicts -- --nocapture

use gpuplane_e2e::kpro6::{NODE, SERVER};
use gpuplane_e2e::kube::{cond3, Cluster};
use gpuplane_e2e::scenario::{report_duration, start_converged};
use gpuplane_e2e::wait::wait_for;
use serde_json::Value as Json;
use std::time::{Duration, Instant};

const LOSER: &str = "kpro6-second";
const LOSER_SERVER: &str = "qwen-second";
/// A partition for a node no agent serves.
const GHOST: &str = "no-agent-node";

/// `examples/kpro6/NAME.yaml` with `from` replaced by `to` (whole lines' words), applied.
fn apply_copy(c: &Cluster, file: &str, edits: &[(&str, &str)]) {
    let mut text = std::fs::read_to_string(
        gpuplane_e2e::paths::repo_root()
            .join("examples/kpro6")
            .join(file),
    )
    .unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{file} has no {from:?}");
        text = text.replacen(from, to, 1);
    }
    c.k_stdin(&["apply", "-f", "-"], &text);
}

/// Waits until `get ARGS` shows Ready=False with reason Conflict; returns the object.
fn wait_conflict(c: &Cluster, what: &str, args: &[&str]) -> Json {
    wait_for(
        &format!("{what} Ready=False Conflict"),
        Duration::from_secs(60),
        || {
            let o = c.json(args);
            let (s, r, m) = cond3(&o, "Ready");
            if s == "False" && r == "Conflict" {
                Ok(o)
            } else {
                Err(format!("Ready {s} {r} {m}"))
            }
        },
    )
}

/// resourceVersion of `get ARGS`.
fn rv(c: &Cluster, args: &[&str]) -> String {
    c.json(args)["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn the_oldest_claim_wins_on_a_real_api_server_without_flapping() {
    let t0 = Instant::now();
    let (c, a) = start_converged("conflicts");
    // Creation timestamps have a resolution of one second: make the second claims younger.
    std::thread::sleep(Duration::from_millis(1100));
    apply_copy(
        &c,
        "partition.yaml",
        &[("  name: kpro6\n", &format!("  name: {LOSER}\n"))],
    );
    apply_copy(
        &c,
        "server.yaml",
        &[
            ("name: qwen35-122b", &format!("name: {LOSER_SERVER}")),
            ("name: sglang-qwen", "name: gpuplane-qwen-second"),
            ("port: 30000", "port: 30001"),
        ],
    );
    // A partition for a node no agent serves.
    apply_copy(
        &c,
        "partition.yaml",
        &[
            ("  name: kpro6\n", &format!("  name: {GHOST}\n")),
            ("nodeName: kpro6", &format!("nodeName: {GHOST}")),
            (
                "gpuplane.dev/node: kpro6",
                &format!("gpuplane.dev/node: {GHOST}"),
            ),
        ],
    );
    let p_args = ["get", "gpupartition", LOSER];
    let s_args = ["get", "inferenceserver", LOSER_SERVER, "-n", "default"];
    let lp = wait_conflict(&c, "the second partition", &p_args);
    let (_, _, msg) = cond3(&lp, "Ready");
    assert!(msg.contains(&format!("GpuPartition {NODE}")), "{msg}");
    let ls = wait_conflict(&c, "the second server", &s_args);
    let (_, _, msg) = cond3(&ls, "Ready");
    assert!(msg.contains(SERVER), "names the older server: {msg}");
    // The winners stay Ready.
    c.wait_converged(Duration::from_secs(30));
    std::thread::sleep(Duration::from_secs(4));

    // 10 drift intervals: nothing changes anywhere.
    let all = [
        ("partition (winner)", vec!["get", "gpupartition", NODE]),
        ("partition (loser)", p_args.to_vec()),
        (
            "server (winner)",
            vec!["get", "inferenceserver", SERVER, "-n", "default"],
        ),
        ("server (loser)", s_args.to_vec()),
        ("partition (no agent)", vec!["get", "gpupartition", GHOST]),
    ];
    let before: Vec<String> = all.iter().map(|(_, g)| rv(&c, g)).collect();
    let writes0 = a.host_writes().len();
    let host0 = c.host_bytes();
    let rec0 = a.metric("gpuplane_reconciles_total");
    std::thread::sleep(Duration::from_secs(30));
    let reconciles = a.metric("gpuplane_reconciles_total") - rec0;
    for ((what, g), rv0) in all.iter().zip(&before) {
        assert_eq!(&rv(&c, g), rv0, "{what} was written during the quiet 30 s");
    }
    assert_eq!(
        a.host_writes().len(),
        writes0,
        "host writes during the quiet 30 s"
    );
    assert!(c.host_bytes() == host0, "the host file changed");
    let events = |kind: &str, name: &str| c.events_about("Conflict", kind, name).len();
    let (pe, se) = (
        events("GpuPartition", LOSER),
        events("InferenceServer", LOSER_SERVER),
    );
    eprintln!(
        "[kube_conflicts] 30 s (10 drift intervals, {reconciles} reconciles): 0 status writes, \
         0 host writes; Conflict events: partition {pe}, server {se}"
    );
    assert_eq!((pe, se), (1, 1), "one Conflict event each");
    // What a user sees of a partition no agent serves: no status at all (kubectl's READY column
    // is empty, kstatus-based health stays InProgress), and no agent touched it.
    let ghost = c.json(&["get", "gpupartition", GHOST]);
    assert!(ghost["status"].is_null(), "{ghost}");
    assert!(ghost["metadata"]["finalizers"].is_null(), "{ghost}");
    let row = c.k(&["get", "gpupartition", GHOST]);
    eprintln!("[kube_conflicts] a partition for a node no agent serves:\n{row}");

    // The winning partition goes (deletionPolicy Retain: the host stays); the loser takes over.
    c.k(&["delete", "inferenceserver", LOSER_SERVER, "-n", "default"]);
    c.k(&["delete", "gpupartition", NODE, "--timeout=60s"]);
    wait_for(
        "the second partition takes over",
        Duration::from_secs(60),
        || {
            let o = c.json(&p_args);
            match cond3(&o, "Ready") {
                (s, _, _) if s == "True" => Ok(()),
                r => Err(format!("{r:?}")),
            }
        },
    );
    report_duration(
        "the_oldest_claim_wins_on_a_real_api_server_without_flapping",
        t0,
    );
}
