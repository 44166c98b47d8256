//! Argo CD's `health.lua` and Flux's `healthCheckExprs` from `examples/gitops/`, run by real
//! interpreters (Lua 5.1, cel-interpreter) on testdata exported from the real-apiserver e2e
//! (`tests/kube_gitops.rs`, `GPUPLANE_EXPORT_GITOPS=1`), in Argo's own layout:
//! `resource_customizations/gpuplane.dev/<Kind>/{health.lua,health_test.yaml,testdata/}`.
//!
//! Like Argo's `TestLuaHealthScript`, every case of `health_test.yaml` must give exactly its
//! status and message. Beyond Argo's harness: Flux's CEL and the kstatus oracle must agree with
//! each other on every testdata object, and with what Argo says.
//!
//!     cargo test -p gpuplane-e2e --test gitops_health -- --nocapture

#[path = "support/gitops.rs"]
mod gitops;

use gitops::{argo_dir, flux_expr_for, flux_status, lua_health, repo};
use gpuplane_crds::kstatus::{self, Kstatus};
use serde_json::Value as Json;

const KINDS: [&str; 3] = ["GpuPartition", "InferenceServer", "GpuNodePool"];

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthTests {
    tests: Vec<HealthTest>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthTest {
    health_status: HealthStatus,
    input_path: String,
}

#[derive(serde::Deserialize)]
struct HealthStatus {
    status: String,
    message: String,
}

fn read_yaml(path: &std::path::Path) -> Json {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What Argo must say for a kstatus verdict.
fn argo_for(k: Kstatus) -> &'static str {
    match k {
        Kstatus::Current => "Healthy",
        Kstatus::Failed => "Degraded",
        Kstatus::InProgress | Kstatus::Terminating => "Progressing",
    }
}

#[test]
fn argo_lua_flux_cel_and_kstatus_agree_on_the_exported_objects() {
    let mut rows = 0;
    println!(
        "{:<16} {:<24} {:<12} {:<26} flux",
        "kind", "testdata", "argo", "kstatus"
    );
    for kind in KINDS {
        let dir = argo_dir(kind);
        let tests: HealthTests = serde_yaml::from_str(
            &std::fs::read_to_string(dir.join("health_test.yaml")).expect("health_test.yaml"),
        )
        .expect("health_test.yaml parses");
        let mut files: Vec<String> = std::fs::read_dir(dir.join("testdata"))
            .expect("testdata")
            .map(|e| format!("testdata/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        files.sort();
        let mut listed: Vec<String> = tests.tests.iter().map(|t| t.input_path.clone()).collect();
        listed.sort();
        assert_eq!(
            files, listed,
            "every testdata file has a case in {kind}/health_test.yaml"
        );
        for t in &tests.tests {
            let obj = read_yaml(&dir.join(&t.input_path));
            assert_eq!(obj["kind"], kind, "{}", t.input_path);
            assert!(
                obj["metadata"]["uid"].is_string(),
                "{}: not from an API server",
                t.input_path
            );
            let (status, message) = lua_health(&dir.join("health.lua"), &obj);
            let k = kstatus::compute(&obj);
            let flux = flux_status(&flux_expr_for(&obj), &obj);
            println!(
                "{kind:<16} {:<24} {status:<12} {:<26} {}",
                t.input_path,
                format!("{}({})", k.status.as_str(), k.reason),
                flux.as_str()
            );
            assert_eq!(
                (status.as_str(), message.as_str()),
                (
                    t.health_status.status.as_str(),
                    t.health_status.message.as_str()
                ),
                "{kind} {}",
                t.input_path
            );
            assert_eq!(
                status,
                argo_for(k.status),
                "Argo against kstatus: {kind} {}",
                t.input_path
            );
            if k.status != Kstatus::Terminating {
                assert_eq!(
                    flux, k.status,
                    "Flux CEL against kstatus: {kind} {}",
                    t.input_path
                );
            }
            rows += 1;
        }
        let states: Vec<&str> = [
            "converged",
            "progressing",
            "stalled",
            "stale-generation",
            "deleting",
        ]
        .into_iter()
        .filter(|s| !files.iter().any(|f| f == &format!("testdata/{s}.yaml")))
        .collect();
        assert!(
            states.is_empty()
                || (kind == "GpuPartition" && states == ["progressing"])
                // A pool carries no finalizer: it is gone the moment it is deleted.
                || (kind == "GpuNodePool" && states == ["deleting"]),
            "{kind}: no testdata for {states:?}"
        );
    }
    println!("{rows} objects");
}

/// An object no agent has written yet: kstatus calls it Current (its documented blind spot);
/// the Argo and Flux checks shipped here wait for the agent instead.
#[test]
fn an_object_without_status_is_progressing_for_argo_and_flux() {
    for (kind, file) in [
        ("GpuPartition", "partition.yaml"),
        ("InferenceServer", "server.yaml"),
    ] {
        let mut obj = read_yaml(&repo().join("examples/kpro6").join(file));
        obj["metadata"]["generation"] = 1.into();
        obj["status"] = serde_json::json!({});
        assert_eq!(kstatus::compute(&obj).status, Kstatus::Current);
        let (status, _) = lua_health(&argo_dir(kind).join("health.lua"), &obj);
        assert_eq!(status, "Progressing", "{kind}");
        assert_eq!(
            flux_status(&flux_expr_for(&obj), &obj),
            Kstatus::InProgress,
            "{kind}"
        );
    }
}

/// The `argocd-cm` snippet carries exactly the scripts that are tested.
#[test]
fn the_argocd_cm_snippet_holds_the_tested_scripts() {
    let cm = read_yaml(&repo().join("examples/gitops/argocd/argocd-cm.yaml"));
    for kind in KINDS {
        let key = format!("resource.customizations.health.gpuplane.dev_{kind}");
        let script = std::fs::read_to_string(argo_dir(kind).join("health.lua")).unwrap();
        assert_eq!(cm["data"][&key].as_str(), Some(script.as_str()), "{key}");
    }
}

/// One health rule for every kind: Argo CD wants a script per kind, and the three are links to
/// one file (`examples/gitops/argocd/health.lua`); a link replaced by a copy that then drifts
/// fails here (the conditions they read are the same kstatus pair on every kind).
#[test]
fn every_kind_has_the_same_health_script() {
    let scripts: Vec<String> = KINDS
        .iter()
        .map(|k| std::fs::read_to_string(argo_dir(k).join("health.lua")).unwrap())
        .collect();
    assert_eq!(scripts.len(), 3);
    for (k, s) in KINDS.iter().zip(&scripts) {
        assert_eq!(
            s, &scripts[0],
            "{k}'s health.lua differs from {}'s",
            KINDS[0]
        );
    }
}

/// Every reason of the closed list that names a standing (`gpuplane_crds::reason`), written as
/// the agent writes it (`Ready`, and the kstatus pair from `Standing::pair`), reads the same in
/// the three readers shipped here: kstatus, Argo CD's `health.lua` and Flux's CEL — on every
/// kind. A reason moved to another standing, or a health script that reads the pair otherwise,
/// fails here.
#[test]
fn every_reason_reads_as_its_standing_in_kstatus_argo_and_flux() {
    use gpuplane_crds::reason::{Reason, Standing};
    let mut checked = 0;
    for r in Reason::ALL.iter().copied() {
        let Some(want) = r.standing().kstatus() else {
            continue;
        };
        let (reconciling, stalled) = r.standing().pair();
        let word = |on: bool| if on { "True" } else { "False" };
        let cond = |t: &str, on: bool| {
            serde_json::json!({"type": t, "status": word(on), "reason": r.as_str(),
                "message": "m", "lastTransitionTime": "2026-12-05T00:00:00Z"})
        };
        let argo = match r.standing() {
            Standing::Working => "Progressing",
            Standing::Stuck => "Degraded",
            _ => "Healthy",
        };
        for kind in KINDS {
            let obj = serde_json::json!({
                "apiVersion": "gpuplane.dev/v1alpha1", "kind": kind,
                "metadata": {"name": "x", "generation": 1},
                "status": {"observedGeneration": 1, "conditions": [
                    cond("Ready", r.standing() == Standing::Done),
                    cond("Reconciling", reconciling),
                    cond("Stalled", stalled),
                ]},
            });
            assert_eq!(kstatus::compute(&obj).status, want, "{kind} {r}");
            let (status, _) = lua_health(&argo_dir(kind).join("health.lua"), &obj);
            assert_eq!(status, argo, "{kind} {r}: health.lua");
            assert_eq!(
                flux_status(&flux_expr_for(&obj), &obj),
                want,
                "{kind} {r}: Flux"
            );
        }
        checked += 1;
    }
    assert!(checked > 40, "only {checked} reasons name a standing");
}
