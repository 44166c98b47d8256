//! `gpuplane status --kubeconfig K` against a real kube-apiserver + etcd: after the agent has
//! converged the reference split on the simulated host, the view lists the partition's GPU
//! table from `status.gpus[]` with the consumers from its spec, and both objects' conditions;
//! `-o yaml` is the objects' status.
//!
//! Needs target/debug/gpuplane (`cargo build --bin gpuplane`, or GPUPLANE_BIN) and the binaries
//! of e2e/setup/kube-build.sh; fails (does not skip) without them.

use gpuplane_e2e::paths::{gpuplane_bin, repo_root};
use gpuplane_e2e::scenario::start_converged;

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
