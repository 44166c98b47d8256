//! `gpuplane status --kubeconfig K` against a real kube-apiserver + etcd: after the agent has
//! converged the reference split on the simulated host, the view lists the partition's GPU
//! table from `status.gpus[]` with the consumers from its spec, and both objects' conditions;
//! `-o yaml` is the objects' status.
//!
//! Needs target/debug/gpuplane (`cargo build --bin gpuplane`, or GPUPLANE_BIN) and the binaries
//! of e2e/setup/kube-build.sh; fails (does not skip) without them.

use gpuplane_e2e::agent::{Agent, AgentOpts};
use gpuplane_e2e::kube::Cluster;
use gpuplane_e2e::paths::{gpuplane_bin, repo_root};
use gpuplane_e2e::scenario::start_converged;
use gpuplane_e2e::sim_host::edit_host;
use gpuplane_e2e::wait::wait_for;
use std::time::Duration;

#[test]
fn status_lists_the_clusters_gpus_and_conditions() {
    let (c, _agent) = start_converged("status");
    let status = |args: &[&str]| {
        let o = std::process::Command::new(gpuplane_bin())
            .args(["status", "--kubeconfig"])
            .arg(c.cp.kubeconfig())
            .args(args)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    };
    let out = status(&[]);
    eprintln!("$ gpuplane status --kubeconfig K\n{out}");
    assert!(
        out.starts_with("GpuPartition/kpro6 (node kpro6, layout "),
        "{out}"
    );
    // The reference split's GPU rows, as the standalone agent's status files show them
    // (`controller/tests/status_view.rs` checks the same golden): one table at every door.
    let rows: String = out
        .lines()
        .filter(|l| l.starts_with("0000:"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    let golden = repo_root().join("controller/tests/golden/status/reference-gpus.txt");
    assert_eq!(
        rows,
        std::fs::read_to_string(&golden).unwrap(),
        "{}:\n{out}",
        golden.display()
    );
    for (res, reason) in [
        ("GpuPartition/kpro6", "Converged"),
        ("InferenceServer/default/qwen35-122b", "ServerReady"),
    ] {
        assert!(
            out.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() == 5 && w[..4] == [res, "Ready", "True", reason]
            }),
            "{res} Ready=True {reason}:\n{out}"
        );
    }

    let yaml = status(&["-o", "yaml"]);
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 2, "{yaml}");
    assert_eq!(docs[0]["resource"], "GpuPartition/kpro6");
    assert_eq!(
        docs[0]["gpus"].as_sequence().map(Vec::len),
        Some(8),
        "{yaml}"
    );
    assert_eq!(docs[1]["resource"], "InferenceServer/default/qwen35-122b");
    // The reference container takes its address by DHCP, which the host side cannot see: no
    // endpoint (not `http://0.0.0.0:30000`, which no client can use), and Ready says so.
    assert!(docs[1]["endpoint"].is_null(), "{yaml}");
    assert!(
        yaml.contains("its address is unknown from the host side"),
        "{yaml}"
    );
}

/// Issue 40 at the Kubernetes door: the agent (drift interval an hour) on the converged twin;
/// the host's kernel then logs the NVIDIA driver's Xid 79 for one GPU of the VM slice (the host
/// file edited behind the agent's back). The agent's health watch reconciles the partition at
/// once: the GPU is quarantined (escalated: a reset cannot help a GPU off the bus) and its
/// `GpusHealthy` turns `False` (`GpusQuarantined`, naming the GPU, its slice, the stage and the
/// hash that accepts it); the GPU's row in `status.gpus[]` says `Lost` with the evidence, the
/// repair and the quarantine record — through the real API server, whose structural schema
/// would drop fields the CRD does not declare — and `gpuplane status` shows it. Every other GPU
/// stays `Healthy`, the server keeps serving. Then the way out: the admin annotates the
/// partition `gpuplane.dev/accept-health=<hash>` and the GPU rejoins its slice.
#[test]
fn a_gpu_fault_reaches_the_partitions_status_through_the_api_server() {
    let c = Cluster::start("health");
    let _agent = Agent::start(
        &c,
        "agent-a",
        AgentOpts {
            drift_interval: 3600,
            ..AgentOpts::default()
        },
    );
    c.apply_examples_and_wait();
    let gpus_healthy = |c: &Cluster| {
        let p = c.partition();
        let cond = p["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "GpusHealthy").cloned())
            .unwrap_or_default();
        (p, cond)
    };
    let (_, cond) = gpus_healthy(&c);
    assert_eq!(cond["status"], "True", "{cond}");
    let t = std::time::Instant::now();
    edit_host(&c.host, |v| {
        v["kernelLog"] = serde_yaml::from_str(
            r#"["NVRM: Xid (PCI:0000:e1:00): 79, pid=4242, name=python3, GPU has fallen off the bus."]"#,
        )
        .unwrap();
    });
    let (p, cond) = wait_for("GpusHealthy=False", Duration::from_secs(60), || {
        let (p, cond) = gpus_healthy(&c);
        if cond["reason"] == "GpusQuarantined" {
            Ok((p, cond))
        } else {
            Err(format!("{cond}"))
        }
    });
    eprintln!(
        "the fault reached the API server {:.1} s after the kernel logged it: {}",
        t.elapsed().as_secs_f64(),
        cond["message"]
    );
    assert!(
        cond["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("0000:e1:00.0 (slice confidential-vm) Lost, quarantined since "),
        "{cond}"
    );
    let rows = p["status"]["gpus"].as_array().unwrap();
    let e1 = rows
        .iter()
        .find(|g| g["address"] == "0000:e1:00.0")
        .unwrap();
    assert_eq!(
        (e1["health"].as_str(), e1["repair"].as_str()),
        (Some("Lost"), Some("RebootNode")),
        "{e1}"
    );
    assert!(
        e1["evidence"][0]
            .as_str()
            .unwrap_or("")
            .contains("GPU has fallen off the bus"),
        "{e1}"
    );
    let q = &e1["quarantine"];
    assert_eq!(q["stage"], "Escalated", "{e1}");
    let hash = q["hash"].as_str().unwrap_or_default().to_string();
    assert_eq!(hash.len(), 12, "{e1}");
    let healthy = rows.iter().filter(|g| g["health"] == "Healthy").count();
    assert_eq!(healthy, 7, "the other seven GPUs: {rows:?}");
    assert_eq!(
        c.server()["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
            .unwrap_or_default()["status"],
        "True",
        "the other slice's server keeps serving"
    );
    let o = std::process::Command::new(gpuplane_bin())
        .args(["status", "--kubeconfig"])
        .arg(c.cp.kubeconfig())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("0000:e1:00.0"))
        .unwrap_or_else(|| panic!("{out}"))
        .split_whitespace()
        .collect();
    assert_eq!((row[4], row[5]), ("Lost", "(Escalated)"), "{out}");

    c.k(&[
        "annotate",
        "gpupartition",
        "kpro6",
        &format!("gpuplane.dev/accept-health={hash}"),
    ]);
    let (p, _) = wait_for("GpusHealthy=True", Duration::from_secs(60), || {
        let (p, cond) = gpus_healthy(&c);
        if cond["status"] == "True" {
            Ok((p, cond))
        } else {
            Err(format!("{cond}"))
        }
    });
    let e1 = p["status"]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["address"] == "0000:e1:00.0")
        .cloned()
        .unwrap();
    assert!(e1["quarantine"].is_null(), "{e1}");
    assert!(
        e1["evidence"][0]
            .as_str()
            .unwrap_or("")
            .starts_with(&format!("evidence accepted ({hash})")),
        "{e1}"
    );
}
