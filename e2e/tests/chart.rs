//! The Helm chart (`charts/gpuplane`), checked without helm and without an API server: its YAML
//! parses (templates after a crude render), it has the objects the agent needs, its CRDs are a
//! copy of `crds/`, and its RBAC rules equal `e2e/kube/agent-rbac.yaml`, the rules the agent runs
//! under in `kube_agent.rs`.
//!
//!     cargo test -p gpuplane-e2e --test chart

use gpuplane_e2e::manifests::yaml_docs;
use gpuplane_e2e::paths::repo_root;
use serde::Deserialize;
use serde_yaml::Value as Yaml;
use std::collections::BTreeMap;
use std::path::Path;

/// A crude stand-in for `helm template`: drops lines that are only template actions and replaces
/// inline actions with `x`. Enough to check that a template is YAML-shaped (not what it renders).
fn crude_render(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("{{")
            && t.ends_with("}}")
            && t.matches("{{").count() == 1
            && !t.contains("}}:")
        {
            continue;
        }
        let mut l = line.to_string();
        while let (Some(a), Some(b)) = (l.find("{{"), l.find("}}")) {
            if b < a {
                break;
            }
            l.replace_range(a..b + 2, "x");
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
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

/// Templates: Go templates, so only YAML-shaped after a crude render; returns them by kind.
fn check_templates(chart: &Path) -> BTreeMap<String, Yaml> {
    let mut rendered: BTreeMap<String, Yaml> = BTreeMap::new();
    for e in std::fs::read_dir(chart.join("templates")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let text = read(&p);
        if !name.ends_with(".yaml") {
            continue;
        }
        if !text.contains("{{") {
            serde_yaml::from_str::<Yaml>(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let r = crude_render(&text);
        // The webhook's objects are one template (its certificate must be generated once for
        // both the Secret and the caBundle); they are keyed `webhook/<Kind>`.
        let prefix = if name.starts_with("webhook") {
            "webhook/"
        } else if name.starts_with("monitoring") {
            "monitoring/"
        } else {
            ""
        };
        for doc in serde_yaml::Deserializer::from_str(&r) {
            let v = Yaml::deserialize(doc)
                .unwrap_or_else(|e| panic!("templates/{name} is not YAML-shaped: {e}\n{r}"));
            if v.is_null() {
                continue;
            }
            let kind = v["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("templates/{name} has a document with no kind"))
                .to_string();
            rendered.insert(format!("{prefix}{kind}"), v);
        }
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

#[test]
fn chart_parses_and_its_rbac_equals_the_tested_rbac() {
    let root = repo_root();
    let chart = root.join("charts/gpuplane");
    check_plain_files(&root, &chart);
    let rendered = check_templates(&chart);
    check_rbac(&root, &rendered);
    check_webhook(&chart, &rendered);
    check_daemonset(&rendered);
}
