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
    assert_eq!(
        yaml_docs(&crd_copy).len(),
        3,
        "GpuPartition, InferenceServer, GpuNodePool"
    );
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

/// The webhook: served over HTTPS by two replicas of its own Deployment with a PDB, registered
/// for the three kinds with the chart's failure policy (spec validation) and, failing closed, for
/// the agent's updates, status writes, Leases and events; allowed to watch (never write) the
/// two kinds.
fn check_webhook(chart: &Path, rendered: &BTreeMap<String, Yaml>) {
    let values: Yaml = serde_yaml::from_str(&read(&chart.join("values.yaml"))).unwrap();
    assert_eq!(values["webhook"]["failurePolicy"].as_str(), Some("Ignore"));
    let hooks = rendered["webhook/ValidatingWebhookConfiguration"]["webhooks"]
        .as_sequence()
        .expect("webhooks");
    let hook = |name: &str| {
        hooks
            .iter()
            .find(|h| h["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no webhook {name}"))
    };
    let cfg = hook("validate.gpuplane.dev");
    assert_eq!(
        cfg["clientConfig"]["service"]["path"].as_str(),
        Some("/validate")
    );
    assert_eq!(cfg["failurePolicy"].as_str(), Some("Ignore"));
    assert_eq!(cfg["sideEffects"].as_str(), Some("None"));
    let rule = &cfg["rules"][0];
    assert_eq!(rule["apiGroups"][0].as_str(), Some("gpuplane.dev"));
    assert_eq!(
        rule["resources"],
        serde_yaml::from_str::<Yaml>("[gpupartitions, inferenceservers, gpunodepools]").unwrap(),
        "spec validation judges the admin's three kinds"
    );
    // The agent rules fail closed, on their own path, status subresources included.
    for name in ["agent.gpuplane.dev", "leases.gpuplane.dev"] {
        let h = hook(name);
        assert_eq!(h["failurePolicy"].as_str(), Some("Fail"), "{name}");
        assert_eq!(
            h["clientConfig"]["service"]["path"].as_str(),
            Some("/validate-agent"),
            "{name}"
        );
    }
    let resources = &hook("agent.gpuplane.dev")["rules"][0]["resources"];
    for r in ["gpupartitions/status", "inferenceservers/status"] {
        assert!(
            resources
                .as_sequence()
                .unwrap()
                .iter()
                .any(|x| x.as_str() == Some(r)),
            "{r}"
        );
    }
    // A pool's status goes through the agent entry too (issue 37).
    let rules = hook("agent.gpuplane.dev")["rules"]
        .as_sequence()
        .unwrap()
        .clone();
    assert!(
        rules.iter().any(|r| r["resources"]
            .as_sequence()
            .is_some_and(|rs| rs.iter().any(|x| x.as_str() == Some("gpunodepools/status")))),
        "gpunodepools/status on agent.gpuplane.dev: {rules:?}"
    );
    let events = hook("events.gpuplane.dev");
    assert_eq!(events["matchPolicy"].as_str(), Some("Exact"));
    // Issue 37: a Lease's creation fails closed, its renewal open.
    let ops = |n: &str| {
        hook(n)["rules"][0]["operations"][0]
            .as_str()
            .map(String::from)
    };
    assert_eq!(ops("leases.gpuplane.dev").as_deref(), Some("CREATE"));
    assert_eq!(
        ops("lease-renewals.gpuplane.dev").as_deref(),
        Some("UPDATE")
    );
    assert_eq!(
        hook("lease-renewals.gpuplane.dev")["failurePolicy"].as_str(),
        Some("Ignore")
    );
    assert_eq!(
        events["rules"][0]["apiGroups"][0].as_str(),
        Some("events.k8s.io")
    );
    let dep = &rendered["webhook/Deployment"]["spec"];
    assert_eq!(dep["replicas"].as_u64(), Some(2));
    let args = &dep["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[0].as_str(), Some("webhook"));
    let pdb = &rendered["webhook/PodDisruptionBudget"]["spec"];
    assert_eq!(pdb["minAvailable"].as_u64(), Some(1));
    assert_eq!(
        pdb["selector"]["matchLabels"],
        dep["selector"]["matchLabels"]
    );
    let verbs = &rendered["webhook/ClusterRole"]["rules"][0]["verbs"];
    assert_eq!(
        verbs,
        &serde_yaml::from_str::<Yaml>("[get, list, watch]").unwrap()
    );
    assert!(rendered.contains_key("webhook/Secret") && rendered.contains_key("webhook/Service"));
    // Off by default: no NetworkPolicy, and no admission policy for a 1.20 API server.
    assert!(!rendered.keys().any(|k| k.ends_with("NetworkPolicy")));
}

/// `helm template` with `args`: the rendered objects.
fn template(args: &[&str]) -> Vec<Yaml> {
    let mut all = vec![
        "template",
        "t",
        "charts/gpuplane",
        "--namespace",
        "gpuplane-system",
    ];
    all.extend_from_slice(args);
    let (ok, out, err) = run_helm(&all);
    assert!(ok, "helm template {args:?}: {err}");
    serde_yaml::Deserializer::from_str(&out)
        .map(|d| Yaml::deserialize(d).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// matchConditions only where the API server has them (1.28); on 1.20 the events entry is
/// Ignore and there is no ValidatingAdmissionPolicy.
fn check_versions() {
    let old = template(&["--kube-version", "1.20.2"]);
    let vwc = old
        .iter()
        .find(|d| d["kind"].as_str() == Some("ValidatingWebhookConfiguration"))
        .unwrap();
    for h in vwc["webhooks"].as_sequence().unwrap() {
        assert!(h["matchConditions"].is_null(), "{h:?}");
        if h["name"].as_str() == Some("events.gpuplane.dev") {
            assert_eq!(h["failurePolicy"].as_str(), Some("Ignore"));
        }
    }
    assert!(!old
        .iter()
        .any(|d| d["kind"].as_str() == Some("ValidatingAdmissionPolicy")));
    let new = template(&["--kube-version", "1.30.0"]);
    let vwc = new
        .iter()
        .find(|d| d["kind"].as_str() == Some("ValidatingWebhookConfiguration"))
        .unwrap();
    for h in vwc["webhooks"].as_sequence().unwrap() {
        let agent_side = h["name"].as_str() != Some("validate.gpuplane.dev");
        assert_eq!(!h["matchConditions"].is_null(), agent_side, "{h:?}");
        // Every agent-side entry fails closed, but a Lease's renewal (issue 37: a starved
        // webhook must not cost the agents their Leases).
        if agent_side {
            let want = if h["name"].as_str() == Some("lease-renewals.gpuplane.dev") {
                "Ignore"
            } else {
                "Fail"
            };
            assert_eq!(h["failurePolicy"].as_str(), Some(want), "{h:?}");
        }
    }
}

/// The NetworkPolicies, when enabled: only the API server's CIDRs to the webhook's port, only
/// the Prometheus selectors to the metrics port; without CIDRs the chart refuses to render.
fn check_network_policies() {
    let (ok, _, err) = run_helm(&[
        "template",
        "t",
        "charts/gpuplane",
        "--set",
        "networkPolicy.enabled=true",
    ]);
    assert!(!ok && err.contains("apiServerCIDRs"), "{err}");
    // auto (the default): a policy where its peers are named; the API server's CIDRs are the
    // webhook's trusted peers too (issue 37).
    let kinds = |docs: &[Yaml]| -> Vec<String> {
        docs.iter()
            .filter(|d| d["kind"].as_str() == Some("NetworkPolicy"))
            .map(|d| {
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(kinds(&template(&[])), Vec::<String>::new());
    let auto = template(&["--set", "networkPolicy.apiServerCIDRs={10.0.0.0/24}"]);
    assert_eq!(kinds(&auto), vec!["t-gpuplane-webhook".to_string()]);
    let args = auto
        .iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .map(|d| {
            serde_json::to_string(&d["spec"]["template"]["spec"]["containers"][0]["args"]).unwrap()
        })
        .unwrap_or_default();
    assert!(args.contains("--trusted-peers=10.0.0.0/24"), "{args}");
    let docs = template(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.apiServerCIDRs={10.0.0.0/24}",
        "--set",
        "networkPolicy.prometheus.podSelector.matchLabels.app=prometheus",
    ]);
    let np = |suffix: &str| {
        docs.iter()
            .find(|d| {
                d["kind"].as_str() == Some("NetworkPolicy")
                    && d["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.ends_with(suffix))
            })
            .unwrap_or_else(|| panic!("no NetworkPolicy *{suffix}"))
    };
    let hook = &np("-webhook")["spec"];
    assert_eq!(
        hook["podSelector"]["matchLabels"]["app.kubernetes.io/component"].as_str(),
        Some("webhook")
    );
    assert_eq!(
        hook["ingress"][0]["from"][0]["ipBlock"]["cidr"].as_str(),
        Some("10.0.0.0/24")
    );
    assert_eq!(
        hook["ingress"][0]["ports"][0]["port"].as_str(),
        Some("https")
    );
    let metrics = &np("-metrics")["spec"];
    assert_eq!(
        metrics["podSelector"]["matchLabels"]["app.kubernetes.io/component"].as_str(),
        Some("agent")
    );
    assert_eq!(
        metrics["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app"].as_str(),
        Some("prometheus")
    );
    assert_eq!(
        metrics["ingress"][0]["ports"][0]["port"].as_str(),
        Some("metrics")
    );
}

/// Evaluates CEL `expr` with `vars` bound; `None` when it does not evaluate to a bool.
fn cel(expr: &str, vars: &[(&str, &serde_json::Value)]) -> Option<bool> {
    let program = cel_interpreter::Program::compile(expr)
        .unwrap_or_else(|e| panic!("CEL does not compile: {expr}: {e}"));
    let mut ctx = cel_interpreter::Context::default();
    for (k, v) in vars {
        ctx.add_variable(*k, (*v).clone()).unwrap();
    }
    match program.execute(&ctx) {
        Ok(cel_interpreter::Value::Bool(b)) => Some(b),
        _ => None,
    }
}

/// What a ValidatingAdmissionPolicy decides for `request`: `None` when its matchConditions do
/// not match, `Some(messages of the failed validations)` otherwise (an expression that does not
/// evaluate counts as failed: the policies are failurePolicy Fail).
fn vap_decide(policy: &Yaml, request: &serde_json::Value) -> Option<Vec<String>> {
    let spec: serde_json::Value = serde_json::to_value(&policy["spec"]).unwrap();
    let (object, old) = (&request["object"], &request["oldObject"]);
    let base = [("request", request), ("object", object), ("oldObject", old)];
    for m in spec["matchConditions"].as_array().unwrap() {
        if cel(m["expression"].as_str().unwrap(), &base) != Some(true) {
            return None;
        }
    }
    let mut variables = serde_json::Map::new();
    for v in spec["variables"].as_array().into_iter().flatten() {
        let e = v["expression"].as_str().unwrap();
        let program = cel_interpreter::Program::compile(e).unwrap();
        let mut ctx = cel_interpreter::Context::default();
        for (k, val) in base {
            ctx.add_variable(k, val.clone()).unwrap();
        }
        let value = match program.execute(&ctx) {
            Ok(cel_interpreter::Value::String(s)) => serde_json::json!(s.as_str()),
            other => panic!("variable {e}: {other:?}"),
        };
        variables.insert(v["name"].as_str().unwrap().to_string(), value);
    }
    let variables = serde_json::Value::Object(variables);
    let mut vars = base.to_vec();
    vars.push(("variables", &variables));
    Some(
        spec["validations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| cel(v["expression"].as_str().unwrap(), &vars) != Some(true))
            .map(|v| v["message"].as_str().unwrap().to_string())
            .collect(),
    )
}

/// The agent rules as ValidatingAdmissionPolicies (rendered where the API serves them): every
/// expression compiles, and on requests like the API server's they refuse what the webhook
/// refuses (another node's partition or its status, a spec change, another node's Lease, an
/// event about a Pod) and admit what the agent does.
fn check_admission_policy() {
    let docs = template(&[
        "--api-versions",
        "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    ]);
    let policy = |suffix: &str| {
        docs.iter()
            .find(|d| {
                d["kind"].as_str() == Some("ValidatingAdmissionPolicy")
                    && d["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.ends_with(suffix))
            })
            .unwrap_or_else(|| panic!("no policy *{suffix}"))
    };
    let bindings: Vec<&Yaml> = docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some("ValidatingAdmissionPolicyBinding"))
        .collect();
    assert_eq!(bindings.len(), 4);
    for b in &bindings {
        assert_eq!(b["spec"]["validationActions"][0].as_str(), Some("Deny"));
    }
    let agent = "system:serviceaccount:gpuplane-system:t-gpuplane";
    let req = |kind: &str,
               op: &str,
               sub: &str,
               node: &str,
               object: serde_json::Value,
               old: serde_json::Value| {
        serde_json::json!({
            "kind": {"kind": kind}, "operation": op, "subResource": sub,
            "userInfo": {"username": agent,
                         "extra": {"authentication.kubernetes.io/node-name": [node]}},
            "object": object, "oldObject": old})
    };
    let part = |node: &str, policy: &str, fin: bool| {
        serde_json::json!({"metadata": {"name": node, "labels": {"gpuplane.dev/node": node},
                                        "finalizers": if fin { vec!["gpuplane.dev/x"] } else { vec![] }},
                           "spec": {"nodeName": node, "deletionPolicy": policy}})
    };
    let objects = policy("-agent-objects");
    let decide = |r: serde_json::Value| vap_decide(objects, &r).expect("matches the agent");
    let fin = req(
        "GpuPartition",
        "UPDATE",
        "",
        "n1",
        part("n1", "Retain", true),
        part("n1", "Retain", false),
    );
    assert_eq!(decide(fin), Vec::<String>::new());
    let spec = req(
        "GpuPartition",
        "UPDATE",
        "",
        "n1",
        part("n1", "Restore", false),
        part("n1", "Retain", false),
    );
    assert!(decide(spec)
        .iter()
        .any(|m| m.contains("only finalizers and status")));
    let status = req(
        "GpuPartition",
        "UPDATE",
        "status",
        "n1",
        part("n2", "Retain", false),
        part("n2", "Retain", false),
    );
    assert!(decide(status)
        .iter()
        .any(|m| m.contains("own node's objects")));
    let own_status = req(
        "GpuPartition",
        "UPDATE",
        "status",
        "n1",
        part("n1", "Retain", false),
        part("n1", "Retain", false),
    );
    assert_eq!(decide(own_status), Vec::<String>::new());
    let create = req(
        "GpuPartition",
        "CREATE",
        "",
        "n1",
        part("n1", "Retain", false),
        serde_json::Value::Null,
    );
    assert!(decide(create).iter().any(|m| m.contains("may not create")));
    let mut admin = req(
        "GpuPartition",
        "UPDATE",
        "",
        "n1",
        part("n1", "Restore", false),
        part("n1", "Retain", false),
    );
    admin["userInfo"]["username"] = serde_json::json!("admin");
    assert_eq!(vap_decide(objects, &admin), None, "an admin is not judged");
    let lease = |name: &str, node: &str| serde_json::json!({"metadata": {"name": name, "labels": {"gpuplane.dev/node": node}}});
    let leases = policy("-agent-leases");
    let own = req(
        "Lease",
        "UPDATE",
        "",
        "n1",
        lease("gpuplane-node-n1", "n1"),
        lease("gpuplane-node-n1", "n1"),
    );
    assert_eq!(vap_decide(leases, &own), Some(vec![]));
    let theirs = req(
        "Lease",
        "UPDATE",
        "",
        "n1",
        lease("gpuplane-node-n2", "n2"),
        lease("gpuplane-node-n2", "n2"),
    );
    assert_eq!(vap_decide(leases, &theirs).map(|m| m.len()), Some(1));
    let event = |ns: &str, kind: &str, api: &str, subject_ns: &str| {
        serde_json::json!({"metadata": {"name": "e", "namespace": ns},
                           "regarding": {"apiVersion": api, "kind": kind, "namespace": subject_ns, "name": "x"}})
    };
    let events = policy("-agent-events");
    let ok = req(
        "Event",
        "CREATE",
        "",
        "n1",
        event("t", "InferenceServer", "gpuplane.dev/v1alpha1", "t"),
        serde_json::Value::Null,
    );
    assert_eq!(vap_decide(events, &ok), Some(vec![]));
    let ok = req(
        "Event",
        "CREATE",
        "",
        "n1",
        event(
            "gpuplane-system",
            "GpuPartition",
            "gpuplane.dev/v1alpha1",
            "gpuplane-system",
        ),
        serde_json::Value::Null,
    );
    assert_eq!(vap_decide(events, &ok), Some(vec![]));
    let pod = req(
        "Event",
        "CREATE",
        "",
        "n1",
        event("t", "Pod", "v1", "t"),
        serde_json::Value::Null,
    );
    assert!(!vap_decide(events, &pod).unwrap().is_empty());
    let tenant = req(
        "Event",
        "CREATE",
        "",
        "n1",
        event("t", "GpuPartition", "gpuplane.dev/v1alpha1", "t"),
        serde_json::Value::Null,
    );
    assert!(!vap_decide(events, &tenant).unwrap().is_empty());
    // A pool's status (issue 37): its own slot and failure pass; another node's slot, a forged
    // failure or a cleared one do not.
    let slot =
        |node: &str| serde_json::json!({"member": node, "node": node, "reason": "r", "since": "t"});
    let failure = |node: &str| serde_json::json!({"member": node, "node": node, "step": "s", "reason": "r", "message": "m", "since": "t"});
    let pool = |slots: Vec<serde_json::Value>, failure: Option<serde_json::Value>| {
        let mut st = serde_json::json!({"slots": slots});
        if let Some(f) = failure {
            st["failure"] = f;
        }
        serde_json::json!({"metadata": {"name": "fleet"}, "spec": {"maxUnavailable": 1}, "status": st})
    };
    let pools = policy("-agent-pools");
    let status = |node: &str, new: serde_json::Value, old: serde_json::Value| {
        vap_decide(
            pools,
            &req("GpuNodePool", "UPDATE", "status", node, new, old),
        )
        .unwrap()
    };
    assert_eq!(
        status("n1", pool(vec![slot("n1")], None), pool(vec![], None)),
        Vec::<String>::new()
    );
    assert_eq!(
        status(
            "n1",
            pool(vec![slot("n1")], Some(failure("n1"))),
            pool(vec![slot("n1")], None)
        ),
        Vec::<String>::new()
    );
    assert!(
        status("n1", pool(vec![slot("n2")], None), pool(vec![], None))
            .iter()
            .any(|m| m.contains("only for its own node"))
    );
    assert!(status(
        "n1",
        pool(vec![slot("n2")], None),
        pool(vec![slot("n2")], Some(failure("n2")))
    )
    .iter()
    .any(|m| m.contains("may not clear")));
    assert!(
        status("n1", pool(vec![], Some(failure("n2"))), pool(vec![], None))
            .iter()
            .any(|m| m.contains("own node's failure"))
    );
    // A hand-on (issue 41): the slot n1 gives back goes to n2, waiting for one, in one write.
    let waiting = |mut p: serde_json::Value, node: &str| {
        p["status"]["members"] =
            serde_json::json!([{"name": node, "node": node, "state": "Waiting"}]);
        p
    };
    assert_eq!(
        status(
            "n1",
            pool(vec![slot("n2")], None),
            waiting(pool(vec![slot("n1")], None), "n2")
        ),
        Vec::<String>::new(),
        "the slot given back, handed to a waiting member"
    );
    assert!(
        status(
            "n1",
            pool(vec![slot("n1"), slot("n2")], None),
            waiting(pool(vec![slot("n1")], None), "n2")
        )
        .iter()
        .any(|m| m.contains("only the slots it gives back")),
        "a slot handed on while n1 keeps its own"
    );
    assert!(
        status(
            "n1",
            pool(vec![slot("n2")], None),
            waiting(pool(vec![slot("n1")], None), "n3")
        )
        .iter()
        .any(|m| m.contains("only for its own node")),
        "a slot handed to a member that does not wait for one"
    );
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
    // The probes run `gpuplane healthz` against the loopback listener, not the metrics port.
    assert!(args.contains(&"--health-addr=127.0.0.1:9465"), "{args:?}");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let cmd: Vec<&str> = ctr[probe]["exec"]["command"]
            .as_sequence()
            .unwrap_or_else(|| panic!("{probe} is not an exec probe"))
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        assert_eq!(
            cmd,
            [
                "gpuplane",
                "healthz",
                "--addr=127.0.0.1:9465",
                &format!("--path={path}")
            ],
            "{probe}"
        );
    }
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
        "/etc/systemd/system",
    ] {
        assert!(
            host_paths.contains(&p),
            "DaemonSet lacks a hostPath volume {p}: {host_paths:?}"
        );
    }
    // Issue 23: a Host unit must be written where the host's systemd reads it (systemctl runs
    // in the host's namespaces), not into the pod's own filesystem.
    let mounts: Vec<&str> = ctr["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    assert!(mounts.contains(&"/etc/systemd/system"), "{mounts:?}");
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
    let docs = template(&[
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
    ]);
    let rules: Vec<&Yaml> = docs
        .iter()
        .filter(|d| d["kind"] == "PrometheusRule")
        .collect();
    assert_eq!(rules.len(), 2, "alerts and the serving rules");
    assert!(
        rules
            .iter()
            .any(|r| r["spec"]["groups"][0]["name"] == "gpuplane-serving"),
        "the serving recording rules are a PrometheusRule"
    );
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && !d["data"]["gpuplane.json"].is_null())
        .unwrap();
    let serving: serde_json::Value =
        serde_json::from_str(cm["data"]["gpuplane-serving.json"].as_str().unwrap()).unwrap();
    assert_eq!(serving["uid"], "gpuplane-serving");
    check_server_discovery();
}

/// Server discovery: off, no ScrapeConfig and no hostPort; on, one http_sd URL per node address
/// at the agents' hostPort; the agent always told its node's address (status.hostIP).
fn check_server_discovery() {
    let kinds = |docs: &[Yaml]| -> Vec<String> {
        docs.iter()
            .filter_map(|d| d["kind"].as_str().map(str::to_string))
            .collect()
    };
    let off = template(&[]);
    assert!(
        !kinds(&off).contains(&"ScrapeConfig".to_string()),
        "off by default"
    );
    let ds = off.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let agent = &ds["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = agent["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(args.contains(&"--sd-node-address=$(HOST_IP)"), "{args:?}");
    let host_ip = agent["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "HOST_IP")
        .expect("HOST_IP env");
    assert_eq!(
        host_ip["valueFrom"]["fieldRef"]["fieldPath"],
        "status.hostIP"
    );
    assert!(
        agent["ports"][0]["hostPort"].is_null(),
        "no hostPort by default"
    );

    let on = template(&[
        "--set",
        "serverDiscovery.hostPort=true",
        "--set",
        "serverDiscovery.scrapeConfig.enabled=true",
        "--set",
        "serverDiscovery.scrapeConfig.nodeAddresses={10.0.0.6,10.0.0.7}",
    ]);
    let sc = on.iter().find(|d| d["kind"] == "ScrapeConfig").unwrap();
    assert_eq!(sc["apiVersion"], "monitoring.coreos.com/v1alpha1");
    let urls: Vec<&str> = sc["spec"]["httpSDConfigs"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|h| h["url"].as_str().unwrap())
        .collect();
    assert_eq!(
        urls,
        [
            "http://10.0.0.6:9464/sd/servers",
            "http://10.0.0.7:9464/sd/servers"
        ]
    );
    let ds = on.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    assert_eq!(
        ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["hostPort"],
        9464
    );
    // Issue 37: with a token Secret the agents require it on /sd/servers and the http_sd URLs
    // carry it.
    let token = template(&[
        "--set",
        "serverDiscovery.tokenSecret=sd-token",
        "--set",
        "serverDiscovery.scrapeConfig.enabled=true",
        "--set",
        "serverDiscovery.scrapeConfig.nodeAddresses={10.0.0.6}",
    ]);
    let sc = token.iter().find(|d| d["kind"] == "ScrapeConfig").unwrap();
    let auth = &sc["spec"]["httpSDConfigs"][0]["authorization"];
    assert_eq!(auth["type"], "Bearer");
    assert_eq!(auth["credentials"]["name"], "sd-token");
    let ds = token.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let pod = &ds["spec"]["template"]["spec"];
    let args = serde_json::to_string(&pod["containers"][0]["args"]).unwrap();
    assert!(
        args.contains("--sd-token-file=/etc/gpuplane/sd-token/token"),
        "{args}"
    );
    let vols = serde_json::to_string(&pod["volumes"]).unwrap();
    assert!(vols.contains("\"secretName\":\"sd-token\""), "{vols}");
    // Enabled without addresses: a message saying what to set, not an empty list.
    let (ok, _, err) = run_helm(&[
        "template",
        "t",
        "charts/gpuplane",
        "--set",
        "serverDiscovery.scrapeConfig.enabled=true",
    ]);
    assert!(
        !ok && err.contains("serverDiscovery.scrapeConfig.nodeAddresses"),
        "{err}"
    );
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
    check_versions();
    check_network_policies();
    check_admission_policy();
    check_values_schema();
    check_monitoring_renders();
    check_daemonset(&rendered);
}
