//! The CEL lane: gpuplane's CRDs on Kubernetes' own CRD server at the newest version Debian
//! sid ships (1.36 when written; `e2e/setup/kube-cel-build.sh`), with **no webhook**: what the
//! cluster itself refuses, in which words, and server-side apply as Argo CD and Flux use it.
//!
//! - The chart's CRDs are accepted: every CEL rule compiles and stays within the server's cost
//!   budget (checked at CRD creation).
//! - Every case of the corpus (`crds/src/cel/cases.yaml`, the one the Rust validation is held to
//!   in `controller/tests/cel_rules.rs`) is refused by the server alone with its rule's message
//!   at the field; a partition's `nodeName` cannot change.
//! - Every file of `examples/invalid` is sent too: those CEL can judge are refused (the list is
//!   asserted, so a rule lost or added shows), the rest are admitted and left to the webhook and
//!   the agent (another object, the host, annotations, SGLang's flag grammar).
//! - The reference examples and the GitOps testdata objects apply with `kubectl apply
//!   --server-side`; applied again nothing changes; a second manager's change of a field the first
//!   owns is a conflict, as SSA reports it.
//! - The agent's status writes (kube-rs, typed, its server-side apply of `status` as field
//!   manager `gpuplane-agent`) are accepted for all three kinds: the statuses the real agent
//!   wrote on the 1.20 server (the GitOps testdata).
//!
//! Stand-in: none. The CRD server is the code that serves CRDs inside every kube-apiserver; it
//! has no /api discovery of its own (a whole server's aggregator serves that), so a small front
//! (`e2e/kube/discovery-front`) serves /api and /apis for kubectl and passes everything else on.
//! It publishes no OpenAPI for CRDs either: kubectl runs with `--validate=false` here (the
//! server's CEL and schema still judge every object; unknown fields are the 1.20 lane's).

use gpuplane_crds::cel::corpus::{base, cases};
use gpuplane_crds::cel::RULES;
use gpuplane_crds::{GpuNodePool, GpuPartition, InferenceServer};
use gpuplane_e2e::kube::control_plane::ControlPlane;
use gpuplane_e2e::manifests::invalid_examples;
use gpuplane_e2e::paths::repo_root;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value as Json;
use std::time::{Duration, Instant};

/// The examples of `examples/invalid` the CRD server refuses on its own: by a CEL rule, or by
/// the schema (patterns, ranges, enums, required fields). The rest need another object, the
/// host, an annotation or label, or SGLang's flag grammar: the webhook's and the agent's.
const REFUSED_BY_THE_SERVER: &[&str] = &[
    "draft-tokens-not-steps-plus-one",
    "driver-typo",
    "empty-address-list",
    "env-set-twice",
    "listen-host-with-port",
    "lxc-consumer-on-vfio",
    "maintenance-window-not-hhmm",
    "missing-model-path",
    "misspelt-field",
    "name-not-dns",
    "pool-max-unavailable-over-100",
    "port-out-of-range",
    "relative-model-path",
    "topk-without-steps",
    "two-selectors",
    "unknown-speculative-algorithm",
];

fn kubectl(cp: &ControlPlane, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let k = cp.kubectl(args);
    let k = match stdin {
        Some(s) => k.stdin(s),
        None => k,
    };
    let o = k.run();
    (o.success, format!("{}{}", o.stdout, o.stderr))
}

/// `kubectl apply --server-side` of `text` as field manager `manager`.
fn apply(cp: &ControlPlane, manager: &str, text: &str) -> (bool, String) {
    kubectl(
        cp,
        &[
            "apply",
            "--server-side",
            "--validate=false",
            "--field-manager",
            manager,
            "-f",
            "-",
        ],
        Some(text),
    )
}

/// The chart's CRDs, applied and established (retried while the server sets them up).
fn install_crds(cp: &ControlPlane) {
    let crds = repo_root().join("charts/gpuplane/crds/gpuplane.dev_crds.yaml");
    let (ok, said) = kubectl(
        cp,
        &["apply", "--server-side", "-f", crds.to_str().unwrap()],
        None,
    );
    assert!(ok, "the 1.36 server refused the chart's CRDs: {said}");
    assert!(!said.contains("Warning"), "CRD warnings: {said}");
    let t = Instant::now();
    loop {
        let (ok, said) = kubectl(
            cp,
            &["get", "gpupartitions,inferenceservers,gpunodepools"],
            None,
        );
        if ok {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "CRDs not served: {said}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn yaml(v: &Json) -> String {
    serde_yaml::to_string(v).unwrap()
}

/// The object as a user would write it: the spec and the identifying metadata only.
fn as_written(obj: &Json) -> Json {
    let m = &obj["metadata"];
    let mut meta = serde_json::json!({"name": m["name"]});
    for k in ["namespace", "labels"] {
        if !m[k].is_null() {
            meta[k] = m[k].clone();
        }
    }
    serde_json::json!({"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta,
        "spec": obj["spec"]})
}

fn reference_split() -> Vec<Json> {
    vec![base("partition"), base("server")]
}

#[test]
fn the_crd_server_alone_refuses_what_cel_can_judge_and_applies_the_rest_server_side() {
    let t0 = Instant::now();
    let cp = ControlPlane::start_crd_server("cel");
    let version = kubectl(&cp, &["version"], None).1;
    eprintln!("[kube_cel] {}", version.lines().last().unwrap_or_default());
    // A server that runs CEL rules and transition rules by default (1.25+; GA 1.29).
    let minor: u32 = version
        .split("Server Version: v1.")
        .nth(1)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no server version in {version}"));
    assert!(minor >= 29, "the CEL lane's server is 1.{minor}");
    install_crds(&cp);
    eprintln!(
        "[kube_cel] CRDs with {} CEL rules accepted (within the cost budget) at {:.1}s",
        RULES.len(),
        t0.elapsed().as_secs_f64()
    );

    // The reference split applies, and applied again changes nothing.
    for obj in reference_split() {
        let (ok, said) = apply(&cp, "kubectl", &yaml(&obj));
        assert!(ok, "the reference example was refused: {said}");
    }
    let rv = |cp: &ControlPlane| {
        kubectl(
            cp,
            &[
                "get",
                "gpupartition",
                "kpro6",
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ],
            None,
        )
        .1
    };
    let before = rv(&cp);
    for obj in reference_split() {
        let (ok, said) = apply(&cp, "kubectl", &yaml(&obj));
        assert!(ok, "{said}");
    }
    assert_eq!(
        rv(&cp),
        before,
        "a second apply of the same spec changed the object"
    );

    // A second manager (Flux, say) changing a field kubectl's apply owns: a conflict, named.
    let mut theirs = reference_split().remove(0);
    theirs["spec"]["deletionPolicy"] = "Restore".into();
    let (ok, said) = apply(&cp, "kustomize-controller", &yaml(&theirs));
    assert!(!ok, "a conflicting manager's apply passed: {said}");
    assert!(
        said.contains("Apply failed with")
            && said.contains("with \"kubectl\"")
            && said.contains(".spec.deletionPolicy"),
        "not SSA's conflict report: {said}"
    );

    // The corpus: each case refused by its rule's message, at its field, by the server alone.
    let mut refused = 0;
    for c in cases() {
        let rule = RULES.iter().find(|r| r.id == c.rule).unwrap();
        let (ok, said) = apply(&cp, "kubectl", &yaml(&c.object));
        assert!(!ok, "{}: the server admitted it: {said}", c.name);
        assert!(
            said.contains(rule.message),
            "{}: the server did not say {:?}: {said}",
            c.name,
            rule.message
        );
        // The server names the rule's field (a list rule names the list: CEL cannot name an
        // index), which is the agent's field or a parent of it.
        let field = rule.path.split("[]").next().unwrap();
        assert!(
            said.contains(field),
            "{}: {said} does not name {field}",
            c.name
        );
        assert!(
            c.field.starts_with(field),
            "{}: the agent names {}",
            c.name,
            c.field
        );
        if let Some(narrower) = rule.field_path {
            assert!(
                said.contains(narrower.trim_start_matches('.')),
                "{}: {said}",
                c.name
            );
        }
        refused += 1;
        // Put the reference split back for the next case.
        for obj in reference_split() {
            assert!(apply(&cp, "kubectl", &yaml(&obj)).0);
        }
    }

    // A partition belongs to its host: nodeName cannot change (a transition rule).
    let mut moved = reference_split().remove(0);
    moved["spec"]["nodeName"] = "kpro7".into();
    let (ok, said) = apply(&cp, "kubectl", &yaml(&moved));
    assert!(
        !ok && said.contains("spec.nodeName") && said.contains("is immutable: a partition"),
        "{said}"
    );

    // examples/invalid: what the server refuses alone, and what it leaves to the webhook.
    let files = invalid_examples();
    let mut by_server = Vec::new();
    for name in &files {
        let text =
            std::fs::read_to_string(repo_root().join(format!("examples/invalid/{name}.yaml")))
                .unwrap();
        let (ok, said) = apply(&cp, "kubectl", &text);
        if !ok {
            // A rule or the schema ("is invalid"), or server-side apply's own schema check of
            // an unknown field (strict even with kubectl's --validate=false).
            assert!(
                said.contains("is invalid") || said.contains("field not declared in schema"),
                "{name}: refused, but not by validation: {said}"
            );
            by_server.push(name.clone());
        }
        let _ = kubectl(&cp, &["delete", "gpunodepools", "--all"], None);
        for obj in reference_split() {
            assert!(apply(&cp, "kubectl", &yaml(&obj)).0);
        }
    }
    eprintln!(
        "[kube_cel] refused by the 1.36 server alone: {} corpus cases, {} of {} examples/invalid ({}); done in {:.1}s",
        refused,
        by_server.len(),
        files.len(),
        by_server.join(", "),
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(
        by_server, REFUSED_BY_THE_SERVER,
        "the examples the server refuses alone changed"
    );
}

/// The GitOps testdata: objects and statuses the real agent wrote on the 1.20 server.
fn gitops_testdata() -> Vec<Json> {
    let dir = repo_root().join("examples/gitops/argocd/resource_customizations/gpuplane.dev");
    let mut out = Vec::new();
    for kind in ["GpuPartition", "InferenceServer", "GpuNodePool"] {
        let mut files: Vec<_> = std::fs::read_dir(dir.join(kind).join("testdata"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files {
            out.push(serde_yaml::from_str(&std::fs::read_to_string(f).unwrap()).unwrap());
        }
    }
    out
}

#[test]
fn the_agents_typed_status_writes_and_the_gitops_objects_are_accepted() {
    let cp = ControlPlane::start_crd_server("cel-status");
    install_crds(&cp);
    let objects = gitops_testdata();
    for obj in &objects {
        let (ok, said) = apply(&cp, "argocd-controller", &yaml(&as_written(obj)));
        assert!(ok, "{} {}: {said}", obj["kind"], obj["metadata"]["name"]);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let written = rt.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(cp.kubeconfig()).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let mut n = 0;
        for obj in &objects {
            let c = client.clone();
            match obj["kind"].as_str().unwrap() {
                "GpuPartition" => status(Api::<GpuPartition>::all(c), obj).await,
                "InferenceServer" => {
                    let ns = obj["metadata"]["namespace"].as_str().unwrap();
                    status(Api::<InferenceServer>::namespaced(c, ns), obj).await
                }
                _ => status(Api::<GpuNodePool>::all(c), obj).await,
            }
            n += 1;
        }
        n
    });
    eprintln!("[kube_cel] {} GitOps objects applied server-side and {written} statuses written by kube-rs, typed", objects.len());
    assert_eq!(written, objects.len());
}

/// Writes `obj`'s status as the agent does (`reconcile/write_status.rs`: a server-side apply of
/// apiVersion, kind and status, manager `gpuplane-agent`, forced) from its typed form, and reads
/// it back equal.
async fn status<K>(api: Api<K>, obj: &Json)
where
    K: kube::Resource<DynamicType = ()>
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Clone
        + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(obj.clone()).expect("the testdata is a typed object");
    let typed_status = serde_json::to_value(&typed).unwrap()["status"].clone();
    assert!(
        !typed_status.is_null(),
        "{}: no status",
        obj["metadata"]["name"]
    );
    let name = obj["metadata"]["name"].as_str().unwrap();
    let patch = serde_json::json!({"apiVersion": obj["apiVersion"], "kind": obj["kind"], "status": typed_status});
    let back = api
        .patch_status(
            name,
            &PatchParams::apply("gpuplane-agent").force(),
            &Patch::Apply(&patch),
        )
        .await
        .unwrap_or_else(|e| panic!("{} {name}: status refused: {e}", obj["kind"]));
    let back = serde_json::to_value(&back).unwrap()["status"].clone();
    assert_eq!(
        back, typed_status,
        "{} {name}: the status read back differs",
        obj["kind"]
    );
}
