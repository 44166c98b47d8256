//! GitOps health on the real kube-apiserver: the agent drives the examples through the states a
//! GitOps tool sees (stalled on a held GPU, a server starting, converged, a spec not yet
//! observed, being deleted); each live object is read by the kstatus oracle, by Argo CD's
//! `health.lua` under Lua 5.1 and by the Flux example's CEL expressions, and all three must say
//! what the state means.
//!
//! With `GPUPLANE_EXPORT_GITOPS=1` the objects are also written (without `managedFields`) to
//! `examples/gitops/argocd/resource_customizations/gpuplane.dev/<Kind>/testdata/<state>.yaml`:
//! the testdata that `tests/gitops_health.rs` checks without an API server.
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test kube_gitops -- --nocapture

#[path = "support/gitops.rs"]
mod gitops;

use gitops::{argo_dir, flux_expr_for, flux_status, lua_health};
use gpuplane_crds::kstatus::{self, Kstatus};
use gpuplane_e2e::agent::{Agent, AgentOpts};
use gpuplane_e2e::kpro6::NODE;
use gpuplane_e2e::kube::{cond3, ready_for_generation, Cluster};
use gpuplane_e2e::paths::repo_root;
use gpuplane_e2e::prometheus::{promtool_check_metrics, Prometheus};
use gpuplane_e2e::sim_host::edit_host;
use gpuplane_e2e::wait::wait_for;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use std::time::Duration;

/// Reads `obj` with the three readers, checks them against `want` (kstatus) and `argo`, and
/// exports it as testdata `state` when asked.
fn check(state: &str, obj: &Json, want: Kstatus, argo: &str) {
    let kind = obj["kind"].as_str().unwrap().to_string();
    let k = kstatus::compute(obj);
    let script = argo_dir(&kind).join("health.lua");
    let (hs, msg) = lua_health(&script, obj);
    let flux = flux_status(&flux_expr_for(obj), obj);
    println!(
        "{kind:<16} {state:<18} kstatus {:<26} argo {hs:<12} flux {:<11} {msg}",
        format!("{}({})", k.status.as_str(), k.reason),
        flux.as_str()
    );
    assert_eq!(k.status, want, "{kind} {state} kstatus: {}", obj["status"]);
    assert_eq!(hs, argo, "{kind} {state} Argo: {msg}");
    if want != Kstatus::Terminating {
        assert_eq!(flux, want, "{kind} {state} Flux CEL: {}", obj["status"]);
    }
    if std::env::var_os("GPUPLANE_EXPORT_GITOPS").is_some() {
        let mut o = obj.clone();
        if let Some(m) = o["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
        let path = argo_dir(&kind)
            .join("testdata")
            .join(format!("{state}.yaml"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_yaml::to_string(&o).unwrap()).unwrap();
        eprintln!("[kube_gitops] exported {}", path.display());
    }
}

/// Waits until `get()` has condition `ty` with `status` (and the last state names it).
fn wait_condition(what: &str, get: impl Fn() -> Json, ty: &str, status: &str) -> Json {
    wait_for(what, Duration::from_secs(60), || {
        let o = get();
        let (s, r, m) = cond3(&o, ty);
        if s == status {
            Ok(o)
        } else {
            Err(format!("{ty}={s} {r}: {m}"))
        }
    })
}

/// A live scrape: `promtool check metrics` finds nothing, and the series users build on are there.
fn check_metrics(a: &Agent) {
    let scrape = a.metrics();
    if let Err(e) = promtool_check_metrics(&scrape) {
        panic!("promtool check metrics on a live scrape:\n{e}");
    }
    for series in [
        r#"gpuplane_resource_condition{kind="GpuPartition",name="kpro6",namespace="",reason="Converged",status="True",type="Ready"} 1"#,
        r#"gpuplane_resource_condition{kind="InferenceServer",name="qwen35-122b",namespace="default",reason="ServerReady",status="True",type="Ready"} 1"#,
        r#"gpuplane_gpu_owner{driver="vfio-pci",node="kpro6",pci_bus_id="00000000:81:00.0",slice="confidential-vm"} 1"#,
        "gpuplane_build_info{",
        "process_resident_memory_bytes ",
    ] {
        assert!(
            scrape.contains(series),
            "no {series} in the scrape:\n{scrape}"
        );
    }
    println!(
        "promtool check metrics: clean on a live scrape ({} lines)",
        scrape.lines().count()
    );
}

/// Every panel of the chart's dashboard, queried on the real Prometheus, returns data.
fn dashboard_queries_return_data(prom: &Prometheus) {
    let path = repo_root().join("charts/gpuplane/files/dashboard.json");
    let d: Json = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let panels = d["panels"].as_array().unwrap();
    // Rates and increases need two samples of every series in their window.
    std::thread::sleep(Duration::from_secs(3));
    for p in panels {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            let rows = wait_for(
                &format!("data for panel {}", p["title"]),
                Duration::from_secs(30),
                || prom.query_some(expr),
            );
            println!(
                "panel {:<48} {} series",
                p["title"].as_str().unwrap(),
                rows.len()
            );
        }
    }
    println!("{} panels, every query returned data", panels.len());
}

#[test]
fn gitops_tools_read_the_agents_status_as_it_means() {
    let c = Cluster::start("gitops");
    // A process holds a GPU that must move, and SGLang's CUDA graph capture is very slow.
    edit_host(&c.host, |h| {
        h["holders"] = serde_yaml::from_str(
            "- address: '0000:91:00.0'\n  pid: 777\n  command: nvidia-persistenced\n",
        )
        .unwrap();
        h["behaviour"]["graphSeconds"] = Yaml::from(1_000_000u64);
    });
    let mut a = Agent::start(&c, "agent-a", AgentOpts::default());
    // A real Prometheus scrapes the agent through every state below.
    let prom = Prometheus::start(&c.cp.run.join("prometheus"), a.metrics_port());
    c.apply("examples/kpro6/partition.yaml");
    // The server must not stall while graphs are captured for a long time.
    let server = std::fs::read_to_string(repo_root().join("examples/kpro6/server.yaml"))
        .unwrap()
        .replace("stallAfterSeconds: 120", "stallAfterSeconds: 100000000")
        .replace("deadlineSeconds: 1800", "deadlineSeconds: 100000000");
    c.k_stdin(&["apply", "-f", "-"], &server);

    println!("kind             state              kstatus                    argo         flux        message");
    let p = wait_condition("partition Stalled", || c.partition(), "Stalled", "True");
    check("stalled", &p, Kstatus::Failed, "Degraded");
    let s = wait_condition("server Stalled", || c.server(), "Stalled", "True");
    check("stalled", &s, Kstatus::Failed, "Degraded");

    edit_host(&c.host, |h| h["holders"] = Yaml::Sequence(vec![]));
    let s = wait_condition("server Reconciling", || c.server(), "Reconciling", "True");
    check("progressing", &s, Kstatus::InProgress, "Progressing");

    edit_host(&c.host, |h| {
        h["behaviour"]["graphSeconds"] = Yaml::from(45u64)
    });
    c.wait_converged(Duration::from_secs(60));
    check("converged", &c.partition(), Kstatus::Current, "Healthy");
    check("converged", &c.server(), Kstatus::Current, "Healthy");
    check_metrics(&a);
    dashboard_queries_return_data(&prom);

    // Without an agent, spec edits stay unobserved and deletions wait on the finalizers.
    a.kill();
    c.patch_server(r#"{"spec":{"memFractionStatic":0.8}}"#);
    c.k(&[
        "patch",
        "gpupartition",
        NODE,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"deletionPolicy":"Restore"}}"#,
    ]);
    let p = c.partition();
    ready_for_generation(&p).unwrap_err();
    check("stale-generation", &p, Kstatus::InProgress, "Progressing");
    check(
        "stale-generation",
        &c.server(),
        Kstatus::InProgress,
        "Progressing",
    );
    c.delete_server();
    c.k(&["delete", "gpupartition", NODE, "--wait=false"]);
    check(
        "deleting",
        &c.partition(),
        Kstatus::Terminating,
        "Progressing",
    );
    check("deleting", &c.server(), Kstatus::Terminating, "Progressing");
}
