//! The Helm chart (`charts/gpuplane`), checked by the real Helm 4 without an API server:
//! `helm lint --strict` passes, `helm template` renders the objects the agent needs, values of a
//! wrong type or unknown values are refused by `values.schema.json`, its CRDs are a copy of
//! `crds/`, and its RBAC rules equal `e2e/kube/agent-rbac.yaml`, the rules the agent runs under
//! in `kube_agent.rs`.
//!
//!     cargo test -p gpuplane-e2e --test chart

use gpuplane_e2e::manifests::yaml_docs;
use gpuplane_e2e::paths::{cache_dir, repo_root};
use serde::Deserialize;
use serde_yaml::Value as Yaml;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Helm binary that `e2e/setup/helm.sh` installs.
fn helm() -> PathBuf {
    let h = cache_dir().join("helm/helm");
    assert!(
        h.exists(),
        "{} is missing: run e2e/setup/helm.sh (./e2e/test-all.sh does)",
        h.display()
    );
    h
}

/// Runs helm with `args`; (success, stdout, stderr).
fn run_helm(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(helm())
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("run helm");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The rules of the object of `kind` in agent-rbac.yaml.
fn rules_of<'a>(docs: &'a [Yaml], kind: &str) -> &'a Yaml {
    &docs
        .iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} in agent-rbac.yaml"))["rules"]
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Plain YAML files: Chart.yaml, values.yaml and the copy of the CRDs.
fn check_plain_files(root: &Path, chart: &Path) {
    let meta: Yaml = serde_yaml::from_str(&read(&chart.join("Chart.yaml"))).expect("Chart.yaml");
    assert_eq!(meta["apiVersion"].as_str(), Some("v2"));
    assert_eq!(meta["name"].as_str(), Some("gpuplane"));
    assert!(meta["version"].as_str().is_some() && meta["appVersion"].as_str().is_some());
    let values: Yaml =
        serde_yaml::from_str(&read(&chart.join("values.yaml"))).expect("values.yaml");
    assert_eq!(
        values["metrics"]["port"].as_u64(),
        Some(9464),
        "metrics port"
    );
    let crd_copy = read(&chart.join("crds/gpuplane.dev_crds.yaml"));
    assert_eq!(
        crd_copy,
        read(&root.join("crds/gpuplane.dev_crds.yaml")),
        "charts/gpuplane/crds/gpuplane.dev_crds.yaml must be a copy of crds/gpuplane.dev_crds.yaml"
    );
    assert_eq!(yaml_docs(&crd_copy).len(), 2);
}

/// `helm lint --strict`, and `helm template` with the default values: the rendered objects by
/// kind (the webhook's keyed `webhook/<Kind>`, by their `-webhook` names).
fn check_templates(_chart: &Path) -> BTreeMap<String, Yaml> {
    let (ok, out, err) = run_helm(&["lint", "--strict", "charts/gpuplane"]);
    assert!(ok, "helm lint --strict: {out}{err}");
    let (ok, out, err) = run_helm(&[
        "template",
        "t",
        "charts/gpuplane",
        "--namespace",
        "gpuplane-system",
    ]);
    assert!(ok, "helm template: {err}");
    let mut rendered: BTreeMap<String, Yaml> = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(&out) {
        let v = Yaml::deserialize(doc).expect("helm template renders YAML");
        if v.is_null() {
            continue;
        }
        let kind = v["kind"]
            .as_str()
            .expect("every object has a kind")
            .to_string();
        let name = v["metadata"]["name"].as_str().unwrap_or_default();
        let prefix = if name.contains("-webhook") {
            "webhook/"
        } else if name.starts_with("monitoring") {
            "monitoring/"
        } else {
            ""
        };
        rendered.insert(format!("{prefix}{kind}"), v);
    }
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "DaemonSet",
        "Service",
        "ConfigMap",
    ] {
        assert!(
            rendered.contains_key(kind),
            "the chart has no {kind} (has {:?})",
            rendered.keys()
        );
    }
    rendered
}

/// The webhook: served over HTTPS by its own Deployment, registered for both kinds on create and
/// update with the chart's failure policy, and allowed to read (never write) the two kinds.
fn check_webhook(chart: &Path, rendered: &BTreeMap<String, Yaml>) {
    let values: Yaml = serde_yaml::from_str(&read(&chart.join("values.yaml"))).unwrap();
    assert_eq!(values["webhook"]["failurePolicy"].as_str(), Some("Ignore"));
    let cfg = &rendered["webhook/ValidatingWebhookConfiguration"]["webhooks"][0];
    assert_eq!(
        cfg["clientConfig"]["service"]["path"].as_str(),
        Some("/validate")
    );
    assert_eq!(cfg["sideEffects"].as_str(), Some("None"));
    let rule = &cfg["rules"][0];
    assert_eq!(rule["apiGroups"][0].as_str(), Some("gpuplane.dev"));
    assert_eq!(rule["resources"].as_sequence().map(Vec::len), Some(2));
    let args = &rendered["webhook/Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[0].as_str(), Some("webhook"));
    let verbs = &rendered["webhook/ClusterRole"]["rules"][0]["verbs"];
    assert_eq!(verbs, &serde_yaml::from_str::<Yaml>("[get, list]").unwrap());
    assert!(rendered.contains_key("webhook/Secret") && rendered.contains_key("webhook/Service"));
}

/// RBAC: the chart's rules are exactly the ones the e2e tests run the agent under.
fn check_rbac(root: &Path, rendered: &BTreeMap<String, Yaml>) {
    let rbac = yaml_docs(&read(&root.join("e2e/kube/agent-rbac.yaml")));
    assert_eq!(
        rendered["ClusterRole"]["rules"],
        *rules_of(&rbac, "ClusterRole"),
        "ClusterRole rules of charts/gpuplane/templates/clusterrole.yaml differ from e2e/kube/agent-rbac.yaml"
    );
    assert_eq!(
        rendered["Role"]["rules"],
        *rules_of(&rbac, "Role"),
        "lease Role rules of the chart differ from e2e/kube/agent-rbac.yaml"
    );
    assert_eq!(
        rendered["ClusterRoleBinding"]["roleRef"]["kind"].as_str(),
        Some("ClusterRole")
    );
    assert_eq!(
        rendered["ClusterRoleBinding"]["subjects"][0]["kind"].as_str(),
        Some("ServiceAccount")
    );
    assert_eq!(
        rendered["RoleBinding"]["roleRef"]["kind"].as_str(),
        Some("Role")
    );
    let binding = rbac
        .iter()
        .find(|d| d["kind"].as_str() == Some("ClusterRoleBinding"))
        .unwrap();
    assert_eq!(binding["subjects"][0]["kind"].as_str(), Some("User"));
    assert_eq!(
        binding["subjects"][0]["name"].as_str(),
        Some("gpuplane-agent")
    );
}

/// The DaemonSet's shape, and its Service.
fn check_daemonset(rendered: &BTreeMap<String, Yaml>) {
    let ds = &rendered["DaemonSet"]["spec"]["template"]["spec"];
    assert_eq!(ds["hostPID"].as_bool(), Some(true), "hostPID");
    let ctr = &ds["containers"][0];
    assert_eq!(
        ctr["securityContext"]["privileged"].as_bool(),
        Some(true),
        "privileged"
    );
    let args: Vec<&str> = ctr["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(args[0], "run");
    assert!(args.contains(&"--node-name=$(NODE_NAME)"), "{args:?}");
    assert!(args.contains(&"--host=local"), "{args:?}");
    assert!(
        args.contains(&"--lease-namespace=$(POD_NAMESPACE)"),
        "{args:?}"
    );
    let env_field = |name: &str| -> Option<String> {
        ctr["env"]
            .as_sequence()?
            .iter()
            .find(|e| e["name"].as_str() == Some(name))?["valueFrom"]["fieldRef"]["fieldPath"]
            .as_str()
            .map(str::to_string)
    };
    assert_eq!(env_field("NODE_NAME").as_deref(), Some("spec.nodeName"));
    assert_eq!(
        env_field("POD_NAMESPACE").as_deref(),
        Some("metadata.namespace")
    );
    assert_eq!(
        ctr["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        ctr["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    assert_eq!(ctr["ports"][0]["name"].as_str(), Some("metrics"));
    let host_paths: Vec<&str> = ds["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str())
        .collect();
    for p in [
        "/sys",
        "/proc",
        "/etc/pve",
        "/run/lock",
        "/var/lib/gpuplane",
        "/dev",
    ] {
        assert!(
            host_paths.contains(&p),
            "DaemonSet lacks a hostPath volume {p}: {host_paths:?}"
        );
    }
    assert_eq!(
        rendered["Service"]["spec"]["ports"][0]["targetPort"].as_str(),
        Some("metrics")
    );
}

/// The optional monitoring objects render (the API server would take them as YAML objects).
fn check_monitoring_renders() {
    let (ok, out, err) = run_helm(&[
        "template",
        "t",
        "charts/gpuplane",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
    ]);
    assert!(ok, "helm template with monitoring: {err}");
    let kinds: Vec<String> = serde_yaml::Deserializer::from_str(&out)
        .filter_map(|d| Yaml::deserialize(d).ok())
        .filter_map(|v| v["kind"].as_str().map(str::to_string))
        .collect();
    for k in ["PrometheusRule", "ServiceMonitor", "ConfigMap"] {
        assert!(kinds.iter().any(|x| x == k), "{k} not rendered: {kinds:?}");
    }
}

/// Wrong values fail on the chart's schema, with the value's path.
fn check_values_schema() {
    for (set, want) in [
        ("agent.driftInterval=abc", "/agent/driftInterval"),
        ("agent.driftIntervl=3", "driftIntervl"),
        ("webhook.failurePolicy=Sometimes", "/webhook/failurePolicy"),
    ] {
        let (ok, _, err) = run_helm(&["template", "t", "charts/gpuplane", "--set", set]);
        assert!(!ok && err.contains(want), "--set {set}: {err}");
    }
}

#[test]
fn chart_parses_and_its_rbac_equals_the_tested_rbac() {
    let root = repo_root();
    let chart = root.join("charts/gpuplane");
    check_plain_files(&root, &chart);
    let rendered = check_templates(&chart);
    check_rbac(&root, &rendered);
    check_webhook(&chart, &rendered);
    check_values_schema();
    check_monitoring_renders();
    check_daemonset(&rendered);
}
