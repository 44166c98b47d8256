//! The API side of reliability (issue 13, item 5) on a real kube-apiserver + etcd: the agent's
//! connections cut while the API server keeps running (its watches must resume and converge a
//! change made meanwhile), and its token revoked (a clear error, retries without a crash loop,
//! and recovery once a valid token is back in its token file). The agent is the real binary on
//! the simulated reference host, as in `kube_agent.rs`.
//!
//! 409 on status writes cannot happen: the agent writes status by server-side apply with
//! `force` and without a resourceVersion (`reconcile/status.rs`), which the API server never
//! answers with a conflict. The writes that carry a resourceVersion, and so can get 409, are the
//! finalizer patches and the Lease; the finalizer's 409 is tested here against a concurrent
//! writer, the Lease's by `kube_agent.rs`'s two-agent test.
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test kube_faults -- --nocapture

use gpuplane_e2e::agent::{show_writes, Agent, AgentOpts};
use gpuplane_e2e::kpro6::{unit_file, SERVER};
use gpuplane_e2e::kube::{has_finalizer, Cluster};
use gpuplane_e2e::tcp_cut::CutRelay;
use gpuplane_e2e::wait::wait_for;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The agent's kubeconfig rewritten: `server` to `url`, and the inline token replaced by
/// `tokenFile: token_file` when given (the way a ServiceAccount's projected token is read).
fn agent_kubeconfig(c: &Cluster, name: &str, url: &str, token_file: Option<&PathBuf>) -> PathBuf {
    let text = std::fs::read_to_string(c.cp.agent_kubeconfig()).unwrap();
    let mut out = String::new();
    for l in text.lines() {
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        if t.starts_with("server: ") {
            out += &format!("{indent}server: {url}\n");
        } else if let (Some(f), true) = (token_file, t.starts_with("token: ")) {
            out += &format!("{indent}tokenFile: {}\n", f.display());
        } else {
            out += &format!("{l}\n");
        }
    }
    let p = c.cp.run.join(name);
    std::fs::write(&p, out).unwrap();
    p
}

/// Only a `writeUnit` (the server's arguments changed) among `writes`, exactly once.
fn assert_one_unit_write(writes: &[(String, String)], what: &str) {
    show_writes(what, writes);
    let units = writes.iter().filter(|(k, _)| k == "writeUnit").count();
    assert_eq!(units, 1, "{what}: {writes:?}");
    for (k, t) in writes {
        assert!(
            matches!(
                k.as_str(),
                "writeUnit" | "daemonReload" | "startUnit" | "stopUnit" | "restartUnit"
            ),
            "{what}: a GPU or container write: {k} {t}"
        );
    }
}

/// A cluster whose agent `agent-a` reaches the API server through a relay the test can cut
/// ([`CutRelay`]), with the examples applied and converged.
fn relayed(name: &str) -> (Cluster, CutRelay, Agent) {
    let c = Cluster::start(name);
    let relay = CutRelay::start(c.cp.apiserver_port);
    let url = format!("https://127.0.0.1:{}", relay.port);
    let kc = agent_kubeconfig(&c, "relay.kubeconfig", &url, None);
    let a = Agent::start_with_kubeconfig(&c, "agent-a", AgentOpts::default(), &kc);
    c.apply_examples_and_wait();
    (c, relay, a)
}

#[test]
fn a_cut_connection_resumes_and_a_change_made_meanwhile_converges() {
    let t0 = Instant::now();
    let (c, relay, mut a) = relayed("faults-cut");
    std::thread::sleep(Duration::from_secs(4)); // one quiet drift check
    let w0 = a.host_writes().len();

    // Cut every connection of the agent; the API server keeps running. While cut, the server's
    // spec changes (memFractionStatic 0.85 -> 0.75; a smaller tp
    // would not fit the model, which preflight refuses) through the API server directly.
    relay.cut();
    std::thread::sleep(Duration::from_secs(2));
    c.patch_server(r#"{"spec":{"memFractionStatic":0.75}}"#);
    std::thread::sleep(Duration::from_secs(10)); // three drift intervals, cut off
    assert!(a.alive(), "the agent exited while cut off");
    assert!(
        unit_file(&c.host()).contains("--mem-fraction-static 0.85"),
        "the agent saw the change while cut off: the cut did not cut"
    );
    assert!(relay.refused() > 0, "the agent did not try to reconnect");
    assert_eq!(
        a.metric("gpuplane_leader"),
        0.0,
        "still leader while cut off"
    );
    eprintln!(
        "[kube_faults] cut 12 s: {} connection attempts refused",
        relay.refused()
    );

    // Connections come back: the watches resume and the change converges, once.
    let t = Instant::now();
    relay.resume();
    c.wait_converged(Duration::from_secs(120));
    eprintln!(
        "[kube_faults] change made while cut off converged {:.1}s after the relay resumed",
        t.elapsed().as_secs_f64()
    );
    assert!(unit_file(&c.host()).contains("--mem-fraction-static 0.75"));
    std::thread::sleep(Duration::from_secs(4));
    assert_one_unit_write(&a.host_writes_since(w0), "after the cut");
    assert!(a.alive());
    eprintln!(
        "[kube_faults] a_cut_connection_resumes...: {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}

/// The agent's line of the control plane's `tokens.csv` without its token (`user,uid,"groups"`).
fn agent_identity(c: &Cluster) -> String {
    let user = c.cp.env["AGENT_USER"].as_str();
    std::fs::read_to_string(c.cp.run.join("tokens.csv"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.split_once(',')
                .filter(|(_, rest)| rest.split(',').next() == Some(user))
        })
        .map(|(_, rest)| rest.to_string())
        .expect("the agent's line in tokens.csv")
}

/// Rewrites `tokens.csv` with the agent's `identity` under `token` (none: revoked) and restarts
/// kube-apiserver, which reads that file only at start.
fn set_agent_token(c: &Cluster, identity: &str, token: Option<&str>) {
    let path = c.cp.run.join("tokens.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.ends_with(identity))
        .map(String::from)
        .collect();
    if let Some(t) = token {
        lines.push(format!("{t},{identity}"));
    }
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    c.cp.control("restart-apiserver");
}

#[test]
fn a_revoked_token_is_reported_retried_and_recovered_from_the_token_file() {
    let t0 = Instant::now();
    let c = Cluster::start("faults-token");
    let token_file = c.cp.run.join("agent.token");
    std::fs::write(&token_file, &c.cp.env["AGENT_TOKEN"]).unwrap();
    let kc = agent_kubeconfig(&c, "tokenfile.kubeconfig", &c.cp.url(), Some(&token_file));
    let mut a = Agent::start_with_kubeconfig(&c, "agent-a", AgentOpts::default(), &kc);
    c.apply_examples_and_wait();
    std::thread::sleep(Duration::from_secs(4));
    let w0 = a.host_writes().len();
    let log0 = a.log_text().lines().count();
    let identity = agent_identity(&c);

    // Revoke the agent's token (removed from the API server's token file, which is re-read on
    // restart), then watch the agent for 30 s.
    set_agent_token(&c, &identity, None);
    let r0 = a.metric("gpuplane_reconciles_total");
    std::thread::sleep(Duration::from_secs(30));
    assert!(a.alive(), "the agent exited with a revoked token");
    let log = a.log_text();
    let new: Vec<&str> = log.lines().skip(log0).collect();
    let unauthorized: Vec<&&str> = new
        .iter()
        .filter(|l| l.contains("Unauthorized") || l.contains("401"))
        .collect();
    eprintln!(
        "[kube_faults] 30 s with a revoked token: {} log lines, {} say Unauthorized; reconciles {}",
        new.len(),
        unauthorized.len(),
        a.metric("gpuplane_reconciles_total") - r0
    );
    for l in unauthorized.iter().take(5) {
        eprintln!("    {l}");
    }
    assert!(
        !unauthorized.is_empty(),
        "no clear error in the log:\n{}",
        new.join("\n")
    );
    assert!(
        unauthorized.len() <= 60,
        "a retry storm: {} Unauthorized lines in 30 s",
        unauthorized.len()
    );
    assert_eq!(a.host_writes().len(), w0, "host writes without the API");
    // The metric behind the chart's GpuplaneNoLeaseHeld alert says it too.
    assert_eq!(
        a.metric("gpuplane_leader"),
        0.0,
        "still leader without a token"
    );

    // A new valid token: the API server knows it, and the agent's token file holds it (as the
    // kubelet rotates a projected ServiceAccount token). The agent re-reads the file and recovers
    // without a restart; a change made now converges.
    let fresh = format!("{:x}{:x}", t0.elapsed().as_nanos(), std::process::id());
    set_agent_token(&c, &identity, Some(&fresh));
    std::fs::write(&token_file, &fresh).unwrap();
    c.patch_server_converged(
        "[kube_faults] a change with the new token",
        r#"{"spec":{"memFractionStatic":0.75}}"#,
        Duration::from_secs(180),
    );
    assert!(unit_file(&c.host()).contains("--mem-fraction-static 0.75"));
    a.wait_metric(
        "the agent holds its Lease again",
        "gpuplane_leader",
        Duration::from_secs(30),
        |v| v == 1.0,
    );
    assert!(a.alive());
    std::thread::sleep(Duration::from_secs(4));
    assert_one_unit_write(&a.host_writes_since(w0), "after the new token");
    eprintln!(
        "[kube_faults] a_revoked_token...: {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}

/// A writer that merge-patches an annotation of the reference server as fast as the API server
/// takes it (one keep-alive HTTPS connection, python3's standard library), each patch a new
/// resourceVersion, until `stop` appears; prints how many patches it made.
const FAST_WRITER: &str = r#"
import http.client, json, os, ssl, sys
url, token, ca, path, stop = sys.argv[1:6]
host, port = url.split("//")[1].split(":")
ctx = ssl.create_default_context(cafile=ca)
c = http.client.HTTPSConnection(host, int(port), context=ctx)
n = 0
while not os.path.exists(stop):
    n += 1
    body = json.dumps({"metadata": {"annotations": {"e2e/touched": str(n)}}})
    c.request("PATCH", path, body, {"Authorization": "Bearer " + token,
                                   "Content-Type": "application/merge-patch+json"})
    c.getresponse().read()
print(n)
"#;

/// The server created and deleted `cycles` times while [`FAST_WRITER`] keeps changing it: each
/// time the agent adds its finalizer, converges, and on deletion stops the unit and takes its
/// finalizer off, with patches that carry the resourceVersion it saw (409 when the writer was
/// faster). Every cycle must end converged, and no 409 may count as a reconcile failure (it is a
/// race lost: looked at again at once, without backoff); the 409s met are counted from the log.
#[test]
fn finalizer_patches_survive_a_concurrent_writer() {
    let t0 = Instant::now();
    let c = Cluster::start("faults-409");
    let a = Agent::start(&c, "agent-a", AgentOpts::default());
    c.apply_examples_and_wait();
    let cycles = 5;
    let mut patches = 0u64;
    let errors0 = a.metric("gpuplane_reconcile_errors_total");
    for cycle in 1..=cycles {
        let stop = c.cp.run.join(format!("stop-writer-{cycle}"));
        let writer = std::process::Command::new("python3")
            .args(["-c", FAST_WRITER, &c.cp.url(), &c.cp.env["ADMIN_TOKEN"]])
            .arg(c.cp.run.join("ca.crt"))
            .arg(format!(
                "/apis/gpuplane.dev/v1alpha1/namespaces/default/inferenceservers/{SERVER}"
            ))
            .arg(&stop)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        std::thread::sleep(Duration::from_secs(1));
        c.delete_server();
        c.wait_gone(
            "the server",
            &["get", "inferenceserver", SERVER, "-n", "default"],
            Duration::from_secs(120),
        );
        assert!(
            unit_file(&c.host()).is_empty(),
            "cycle {cycle}: the server's unit is still on the host"
        );
        std::fs::write(&stop, "").unwrap();
        let out = writer.wait_with_output().unwrap();
        patches += String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .unwrap_or(0);
        c.apply("examples/kpro6/server.yaml");
        c.wait_converged(Duration::from_secs(120));
        let s = c.server();
        assert!(has_finalizer(&s, "gpuplane.dev/unit-cleanup"), "{s}");
        assert!(unit_file(&c.host()).contains("--tp-size 4"));
    }
    let log = a.log_text();
    let conflicts = log
        .lines()
        .filter(|l| l.contains("code: 409") || l.contains("the object has been modified"))
        .count();
    eprintln!(
        "[kube_faults] {cycles} delete/create cycles under {patches} concurrent patches: \
         {conflicts} 409 lines in the agent's log, every cycle converged"
    );
    for l in log.lines().filter(|l| l.contains("code: 409")).take(3) {
        eprintln!("    {}", &l[..l.len().min(300)]);
    }
    // A 409 is a race lost, looked at again at once: not a failure, no backoff.
    assert_eq!(
        a.metric("gpuplane_reconcile_errors_total"),
        errors0,
        "409s counted as reconcile failures"
    );
    wait_for("the partition Ready", Duration::from_secs(60), || {
        gpuplane_e2e::kube::ready_for_generation(&c.partition())
    });
    eprintln!(
        "[kube_faults] finalizer_patches...: {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}

/// The leader's connections become a black hole (nothing goes through, nothing is closed, as when
/// the network drops packets without a reset): it must stop acting for the node before its Lease
/// can expire on the API server, so that the standby that then takes the Lease is never a second
/// leader. Both agents' `gpuplane_leader` are sampled every 250 ms; no sample may show two.
/// Then the connections are reset and come back: the old leader stays a standby and the new one
/// converges a change.
#[test]
fn a_black_holed_leader_lets_go_before_the_standby_takes_over() {
    let t0 = Instant::now();
    let (c, relay, mut a) = relayed("faults-hole");
    a.wait_metric(
        "agent-a leads",
        "gpuplane_leader",
        Duration::from_secs(30),
        |v| v == 1.0,
    );
    let mut b = Agent::start(&c, "agent-b", AgentOpts::default());
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(b.metric("gpuplane_leader"), 0.0, "agent-b is a standby");
    let wa = a.host_writes().len();

    relay.black_hole();
    let hole = Instant::now();
    let (mut both, mut a_off, mut b_on) = (0, None, None);
    while hole.elapsed() < Duration::from_secs(30) {
        let (la, lb) = (a.metric("gpuplane_leader"), b.metric("gpuplane_leader"));
        if la == 1.0 && lb == 1.0 {
            both += 1;
        }
        if la == 0.0 && a_off.is_none() {
            a_off = Some(hole.elapsed().as_secs_f64());
        }
        if lb == 1.0 && b_on.is_none() {
            b_on = Some(hole.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "[kube_faults] black hole: agent-a let go after {a_off:?} s, agent-b took over after \
         {b_on:?} s (lease 6 s); samples with two leaders: {both}"
    );
    assert!(
        a_off.is_some(),
        "agent-a still leads from behind a black hole"
    );
    assert!(b_on.is_some(), "agent-b never took over");
    assert_eq!(both, 0, "two leaders at once");
    assert!(a.alive() && b.alive());

    // The connections are reset and come back.
    relay.cut();
    std::thread::sleep(Duration::from_secs(1));
    relay.resume();
    c.patch_server(r#"{"spec":{"memFractionStatic":0.75}}"#);
    c.wait_converged(Duration::from_secs(120));
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        a.metric("gpuplane_leader"),
        0.0,
        "agent-a took the lease back"
    );
    assert_eq!(b.metric("gpuplane_leader"), 1.0);
    assert_eq!(
        a.host_writes().len(),
        wa,
        "agent-a wrote to the host after letting go"
    );
    assert!(unit_file(&c.host()).contains("--mem-fraction-static 0.75"));
    assert!(a.alive() && b.alive());
    eprintln!(
        "[kube_faults] a_black_holed_leader...: {:.1}s",
        t0.elapsed().as_secs_f64()
    );
}
