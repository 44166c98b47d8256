//! Per-node scoping on a real kube-apiserver: the agent watches only objects labelled
//! `gpuplane.dev/node=<its node>`. Objects of its node without the label, and objects whose
//! label names it but whose node is another, are reported on the object (`NodeLabelMissing`,
//! `NodeLabelMismatch`), never dropped in silence, and nothing is done on the host for them.
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test kube_scope -- --nocapture

use gpuplane_e2e::agent::{Agent, AgentOpts};
use gpuplane_e2e::kpro6::{NODE, SERVER};
use gpuplane_e2e::kube::{cond3, ready_is, Cluster};
use gpuplane_e2e::paths::repo_root;
use gpuplane_e2e::scenario::report_duration;
use gpuplane_e2e::wait::wait_for;
use serde_json::Value as Json;
use std::time::{Duration, Instant};

/// An example manifest with its `gpuplane.dev/node` label taken out.
fn unlabelled(rel: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
    let out: Vec<&str> = text
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("labels:") || t.starts_with("gpuplane.dev/node:"))
        })
        .collect();
    let out = out.join("\n");
    assert!(!out.contains("gpuplane.dev/node"), "{out}");
    out
}

/// Waits until `get()`'s Ready is False with `reason`; returns its message.
fn wait_reason(what: &str, reason: &str, get: impl Fn() -> Json) -> String {
    let o = wait_for(
        &format!("{what} Ready=False {reason}"),
        Duration::from_secs(60),
        || {
            let o = get();
            ready_is(&o, "False", reason).map(|()| o)
        },
    );
    let (_, _, msg) = cond3(&o, "Ready");
    println!("{what} Ready=False {reason}: {msg}");
    msg
}

#[test]
fn unlabelled_and_mislabelled_objects_are_reported_and_nothing_is_done_for_them() {
    let t0 = Instant::now();
    let c = Cluster::start("scope");
    let a = Agent::start(&c, "agent-a", AgentOpts::default());
    let original = c.host_bytes();

    // This node's objects without the label: each says which label to set.
    c.k_stdin(
        &["apply", "-f", "-"],
        &unlabelled("examples/kpro6/partition.yaml"),
    );
    c.k_stdin(
        &["apply", "-f", "-"],
        &unlabelled("examples/kpro6/server.yaml"),
    );
    let msg = wait_reason("partition", "NodeLabelMissing", || c.partition());
    assert!(
        msg.contains("kubectl label --overwrite gpupartition/kpro6 gpuplane.dev/node=kpro6"),
        "{msg}"
    );
    let msg = wait_reason("server", "NodeLabelMissing", || c.server());
    assert!(
        msg.contains("gpuplane.dev/node=kpro6") && msg.contains("inferenceserver/qwen35-122b"),
        "{msg}"
    );
    c.wait_event(
        "NodeLabelMissing",
        "GpuPartition",
        NODE,
        Duration::from_secs(10),
    );
    std::thread::sleep(Duration::from_secs(4)); // more than a drift interval
    assert!(
        c.host_bytes() == original,
        "the host changed for unlabelled objects"
    );
    assert!(a.host_writes().is_empty(), "{:?}", a.host_writes());

    // Labelled, they converge as usual.
    let label = format!("gpuplane.dev/node={NODE}");
    c.k(&["label", "gpupartition", NODE, &label]);
    c.k(&["label", "inferenceserver", SERVER, "-n", "default", &label]);
    c.wait_converged(Duration::from_secs(120));
    assert!(!a.host_writes().is_empty());

    // A partition labelled for this node whose nodeName is another: this agent, the only one
    // that sees it, says so; the node's own partition stays Ready.
    let typo = std::fs::read_to_string(repo_root().join("examples/kpro6/partition.yaml"))
        .unwrap()
        .replace("name: kpro6\n", "name: kpro6-typo\n")
        .replace("nodeName: kpro6", "nodeName: kpro7");
    c.k_stdin(&["apply", "-f", "-"], &typo);
    let msg = wait_reason("mislabelled partition", "NodeLabelMismatch", || {
        c.json(&["get", "gpupartition", "kpro6-typo"])
    });
    assert!(
        msg.contains("gpuplane.dev/node=kpro7") && msg.contains("kpro6-typo"),
        "{msg}"
    );
    c.wait_converged(Duration::from_secs(10));
    report_duration(
        "unlabelled_and_mislabelled_objects_are_reported_and_nothing_is_done_for_them",
        t0,
    );
}
