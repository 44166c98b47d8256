//! Smoke test of the real Kubernetes control plane and gpuplane's CRDs on it.
//!
//! Starts etcd + kube-apiserver v1.20.2 (e2e/kube/control-plane.sh) and, with the real kubectl:
//! installs crds/gpuplane.dev_crds.yaml, applies the kpro6 examples, checks printer columns,
//! `kubectl explain`, schema validation of PCI addresses, RBAC denial for the agent user, and that
//! objects survive restarts of kube-apiserver and of etcd.
//!
//! Needs the binaries from e2e/setup/kube-build.sh; fails (does not skip) without them.

use gpuplane_e2e::kube::ControlPlane;
use gpuplane_e2e::manifests::repo_yaml_docs;
use gpuplane_e2e::paths::repo_path;
use std::time::{Duration, Instant};

/// Collapses all whitespace runs to one space (kubectl explain re-wraps descriptions).
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn header_columns(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The server and kubectl are both the v1.20.2 that kube-build.sh built.
fn check_versions(cp: &ControlPlane) {
    // The server and kubectl both are the v1.20.2 we built (ldflags set): no skew warning.
    let version = cp.kubectl(&["version", "-o", "json"]).run();
    assert!(version.success, "kubectl version: {}", version.stderr);
    let v: serde_json::Value = serde_json::from_str(&version.stdout).expect("version json");
    assert_eq!(
        v["clientVersion"]["gitVersion"], "v1.20.2",
        "{}",
        version.stdout
    );
    assert_eq!(
        v["serverVersion"]["gitVersion"], "v1.20.2",
        "{}",
        version.stdout
    );
    assert!(
        !version.stderr.to_lowercase().contains("warning"),
        "kubectl warned: {}",
        version.stderr
    );
}

/// Installs crds/gpuplane.dev_crds.yaml and checks the server took it as it is; returns the CRDs.
fn install_crds(cp: &ControlPlane) -> Vec<serde_yaml::Value> {
    let crds = repo_yaml_docs("crds/gpuplane.dev_crds.yaml");
    let crd_names: Vec<String> = crds
        .iter()
        .map(|d| {
            d["metadata"]["name"]
                .as_str()
                .expect("CRD has metadata.name")
                .to_string()
        })
        .collect();
    let mut sorted = crd_names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "gpunodepools.gpuplane.dev",
            "gpupartitions.gpuplane.dev",
            "inferenceservers.gpuplane.dev"
        ],
        "the CRD file holds exactly gpuplane's three kinds"
    );
    // --validate=false: kubectl 1.20 does not know `x-kubernetes-validations` (CEL, 1.23+) and
    // refuses it client-side; the 1.20 server drops it (the rules run in kube_cel.rs, on 1.36).
    let applied = cp
        .kubectl(&[
            "apply",
            "--validate=false",
            "-f",
            &repo_path("crds/gpuplane.dev_crds.yaml"),
        ])
        .run();
    assert!(
        applied.success,
        "kube-apiserver v1.20.2 rejected crds/gpuplane.dev_crds.yaml:\n{}{}",
        applied.stdout, applied.stderr
    );
    eprintln!("{}", applied.stdout.trim_end());
    let mut wait = vec!["wait", "--for", "condition=established", "--timeout=60s"];
    let crd_refs: Vec<String> = crd_names.iter().map(|n| format!("crd/{n}")).collect();
    wait.extend(crd_refs.iter().map(String::as_str));
    cp.kubectl(&wait).ok();
    // Nothing the server dropped or flagged: NonStructuralSchema etc. would show as conditions.
    for name in &crd_names {
        let json = cp.kubectl(&["get", "crd", name, "-o", "json"]).ok();
        let crd: serde_json::Value = serde_json::from_str(&json).unwrap();
        for c in crd["status"]["conditions"].as_array().unwrap() {
            let ty = c["type"].as_str().unwrap_or("");
            assert!(
                !(ty == "NonStructuralSchema" && c["status"] == "True"),
                "CRD {name} has a non-structural schema: {c}"
            );
        }
    }

    crds
}

/// Applies the kpro6 examples; printer columns, short names, schema defaults, empty strings.
fn check_examples(cp: &ControlPlane) {
    cp.kubectl(&["apply", "-f", &repo_path("examples/kpro6/partition.yaml")])
        .ok();
    cp.kubectl(&["apply", "-f", &repo_path("examples/kpro6/server.yaml")])
        .ok();

    let partitions = cp.kubectl(&["get", "gpupartitions"]).ok();
    println!("$ kubectl get gpupartitions\n{partitions}");
    assert_eq!(
        header_columns(&partitions),
        ["NAME", "NODE", "SLICES", "READY", "REASON", "AGE"]
    );
    let row: Vec<&str> = partitions
        .lines()
        .nth(1)
        .expect("one GpuPartition row")
        .split_whitespace()
        .collect();
    assert_eq!(&row[..2], ["kpro6", "kpro6"], "{partitions}");

    let servers = cp.kubectl(&["get", "inferenceservers", "-A"]).ok();
    println!("$ kubectl get inferenceservers -A\n{servers}");
    assert_eq!(
        header_columns(&servers),
        [
            "NAMESPACE",
            "NAME",
            "MODEL",
            "TP",
            "ENDPOINT",
            "READY",
            "REASON",
            "AGE"
        ]
    );
    let row: Vec<&str> = servers
        .lines()
        .nth(1)
        .expect("one InferenceServer row")
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..4],
        ["default", "qwen35-122b", "qwen3.5-122b", "4"],
        "{servers}"
    );

    // Short names work too.
    assert!(cp.kubectl(&["get", "gpup"]).ok().contains("kpro6"));
    assert!(cp.kubectl(&["get", "infs"]).ok().contains("qwen35-122b"));

    // Defaults from the schema were applied by the server (structural defaulting).
    let obj: serde_json::Value = serde_json::from_str(
        &cp.kubectl(&["get", "inferenceserver", "qwen35-122b", "-o", "json"])
            .ok(),
    )
    .unwrap();
    assert_eq!(
        obj["spec"]["rollback"], "Never",
        "default not applied: {obj}"
    );
    assert_eq!(
        obj["spec"]["extraArgs"],
        serde_json::json!([]),
        "default not applied: {obj}"
    );

    // Empty strings are strings (guards kube-build.sh's patch of the OpenAPI type validator: built
    // with Go >= 1.19, unpatched 1.20 rejects "" as `must be of type string: "null"`).
    let server_yaml = std::fs::read_to_string(repo_path("examples/kpro6/server.yaml")).unwrap();
    let empty_env = server_yaml
        .replace("name: qwen35-122b", "name: empty-env")
        .replace("value: \"1\"", "value: \"\"");
    assert!(
        empty_env.contains("value: \"\""),
        "examples/kpro6/server.yaml changed; adapt this test"
    );
    cp.kubectl(&["create", "--dry-run=server", "-f", "-"])
        .stdin(&empty_env)
        .ok();
}

/// `kubectl explain` shows the schema's documentation.
fn check_explain(cp: &ControlPlane, crds: &[serde_yaml::Value]) {
    // The server publishes a new CRD's OpenAPI a moment after it is Established; retry briefly.
    let deadline = Instant::now() + Duration::from_secs(30);
    let explain = loop {
        let out = cp.kubectl(&["explain", "gpupartition.spec.slices"]).run();
        if out.success || Instant::now() > deadline {
            assert!(out.success, "kubectl explain failed: {}", out.stderr);
            break out.stdout;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    println!("$ kubectl explain gpupartition.spec.slices\n{explain}");
    let gp = crds
        .iter()
        .find(|d| d["spec"]["names"]["kind"] == "GpuPartition")
        .unwrap();
    let spec_schema = &gp["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let slices_doc = spec_schema["properties"]["slices"]["description"]
        .as_str()
        .unwrap();
    let item_doc = spec_schema["properties"]["slices"]["items"]["description"]
        .as_str()
        .unwrap();
    let explained = squash(&explain);
    assert!(
        explained.contains(&squash(slices_doc)),
        "explain lacks {slices_doc:?}:\n{explain}"
    );
    assert!(
        explained.contains(&squash(item_doc)),
        "explain lacks {item_doc:?}:\n{explain}"
    );
    for field in ["consumer", "driver", "gpus", "name"] {
        assert!(
            explain.contains(field),
            "explain lacks field {field}:\n{explain}"
        );
    }
}

/// Schema validation: the PCI address pattern.
fn check_pci_address_pattern(cp: &ControlPlane) {
    let partition = |name: &str, address: &str| {
        format!(
            "apiVersion: gpuplane.dev/v1alpha1\nkind: GpuPartition\nmetadata:\n  name: {name}\n\
             spec:\n  nodeName: {name}\n  slices:\n  - name: vm\n    driver: vfio-pci\n    \
             gpus:\n      addresses: [\"{address}\"]\n"
        )
    };
    // A well-formed address passes (so the rejection below is the pattern's doing) ...
    cp.kubectl(&["create", "--dry-run=server", "-f", "-"])
        .stdin(&partition("good", "0000:01:00.0"))
        .ok();
    // ... a short bus number does not.
    let rejected = cp
        .kubectl(&["create", "-f", "-"])
        .stdin(&partition("bad", "0000:1:00.0"))
        .fails();
    println!("$ kubectl create -f - (addresses: [\"0000:1:00.0\"])\n{rejected}");
    assert!(rejected.contains("is invalid"), "{rejected}");
    assert!(rejected.contains("0000:1:00.0"), "{rejected}");
    assert!(
        rejected.contains("addresses") && rejected.contains("should match"),
        "{rejected}"
    );
    assert!(cp
        .kubectl(&["get", "gpupartition", "bad"])
        .fails()
        .contains("NotFound"));
}

/// RBAC: the agent user is authenticated but has no permissions yet.
fn check_agent_user_denied(cp: &ControlPlane) {
    let denied = cp.kubectl_agent(&["get", "gpupartitions"]).fails();
    println!("$ kubectl --kubeconfig agent.kubeconfig get gpupartitions\n{denied}");
    let agent_user = &cp.env["AGENT_USER"];
    assert!(
        denied.contains("(Forbidden)"),
        "expected 403 Forbidden, got: {denied}"
    );
    assert!(
        denied.contains(&format!(
            "User \"{agent_user}\" cannot list resource \"gpupartitions\""
        )),
        "{denied}"
    );
    // Forbidden, not Unauthorized: the token is known (a SelfSubjectAccessReview works).
    let can_i = cp
        .kubectl_agent(&["auth", "can-i", "list", "gpupartitions.gpuplane.dev"])
        .run();
    assert_eq!(
        can_i.stdout.trim(),
        "no",
        "{}{}",
        can_i.stdout,
        can_i.stderr
    );
    assert_eq!(
        cp.kubectl(&["auth", "can-i", "list", "gpupartitions.gpuplane.dev"])
            .ok()
            .trim(),
        "yes"
    );
}

#[test]
fn kube_smoke() {
    let t0 = Instant::now();
    let mut cp = ControlPlane::start("kube-smoke");
    check_versions(&cp);
    let crds = install_crds(&cp);
    check_examples(&cp);
    check_explain(&cp, &crds);
    check_pci_address_pattern(&cp);
    check_agent_user_denied(&cp);

    // --- Restarts keep the data ------------------------------------------------------------------
    cp.control("restart-apiserver");
    assert!(cp.kubectl(&["get", "gpupartitions"]).ok().contains("kpro6"));
    cp.control("restart-all");
    assert!(cp
        .kubectl(&["get", "inferenceservers", "-A"])
        .ok()
        .contains("qwen35-122b"));

    cp.stop();
    eprintln!("[kube_smoke] done in {:.1}s", t0.elapsed().as_secs_f64());
}
