//! Prometheus finds the SGLang servers through the agent (issue 27): a real kube-apiserver, the
//! agent on the simulated reference host, and a real Prometheus (Debian's) whose only way to
//! the servers is `http_sd_configs` pointed at the agent's `/sd/servers`, loading the chart's
//! serving recording rules.
//!
//! The reference server runs in LXC 129 (the simulated host plays its unit); its `/metrics` is
//! served by the SGLang stand-in (`e2e/standin/`) as a real process on this machine's own
//! address, which the test gives container 129 as its static `ip=` (so discovery lists the
//! container's address, as on a real Proxmox host). The test then checks:
//! - `/sd/servers` answers 200, `application/json`, the server with its labels;
//! - Prometheus discovers and scrapes it (`/api/v1/targets`, printed), and every query of the
//!   serving dashboard (`charts/gpuplane/files/serving-dashboard.json`) returns data, once with
//!   the stand-in spelling its metrics `sglang:` and once `sglang_` (a fresh Prometheus each);
//!   the DCGM panels' queries must evaluate, and show data only where dcgm-exporter is scraped
//!   (not here);
//! - the server rolled back (a new spec's unit dies while loading; `rollback: Auto` runs the last
//!   unit that reached Ready: `Degraded` `RolledBack`) leaves Prometheus's targets, and comes
//!   back with a good spec; the server stopped (its InferenceServer deleted: the agent stops and
//!   removes its unit) leaves them too, each within one SD refresh (plus Prometheus's 5 s
//!   batching of discovery updates) of the agent's next reconcile.
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test kube_serving -- --nocapture

#[path = "support/serving.rs"]
mod serving;

use gpuplane_e2e::agent::{Agent, AgentOpts};
use gpuplane_e2e::kpro6::SERVER;
use gpuplane_e2e::kube::{cond3, Cluster};
use gpuplane_e2e::net::{free_ports, own_address};
use gpuplane_e2e::paths::repo_root;
use gpuplane_e2e::prometheus::Prometheus;
use gpuplane_e2e::sim_host::set_container_ip;
use gpuplane_e2e::wait::wait_for;
use serde_json::Value as Json;
use serving::{http, prometheus, targets_of, Standin, SD_REFRESH_SECONDS};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The `sglang` job's active targets.
fn sglang_targets(prom: &Prometheus) -> Result<Vec<Json>, String> {
    targets_of(prom, "sglang")
}

/// Sends a few requests, so the latency histograms and counters move between scrapes.
fn traffic(ip: IpAddr, port: u16, n: usize) {
    for _ in 0..n {
        let (code, _, body) = http(ip, port, "POST", "/generate", r#"{"text":"hi"}"#);
        assert_eq!(code, 200, "{body}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Every panel's queries on `prom`: each returns data, except the DCGM ones, which must evaluate
/// (no dcgm-exporter is scraped here). Returns (title, one value) per panel.
fn every_panel_has_data(prom: &Prometheus, spelling: &str) -> Vec<(String, String)> {
    let path = repo_root().join("charts/gpuplane/files/serving-dashboard.json");
    let d: Json = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut shown = vec![];
    for p in d["panels"].as_array().unwrap() {
        let title = p["title"].as_str().unwrap().to_string();
        let mut first = None;
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            if expr.contains("DCGM_FI_") {
                prom.query(expr).unwrap_or_else(|e| panic!("{title}: {e}"));
                first.get_or_insert_with(|| "(no dcgm-exporter scraped here)".to_string());
                continue;
            }
            let rows = wait_for(
                &format!("data for panel {title} ({spelling})"),
                Duration::from_secs(60),
                || prom.query_some(expr),
            );
            let value = rows[0]["value"][1].as_str().unwrap_or("?").to_string();
            let who = rows[0]["metric"]["inference_server"]
                .as_str()
                .or(rows[0]["metric"]["name"].as_str())
                .unwrap_or("");
            first.get_or_insert_with(|| format!("{value} ({who}, {} series)", rows.len()));
        }
        println!("[{spelling}] panel {title:<44} {}", first.clone().unwrap());
        shown.push((title, first.unwrap()));
    }
    shown
}

#[test]
fn prometheus_discovers_scrapes_and_forgets_the_servers_through_the_agent() {
    let c = Cluster::start("serving");
    let ip = own_address();
    let port = free_ports(1)[0];
    // Container 129 gets this machine's address as its static one; its server listens on
    // 0.0.0.0 with metrics on, at a free port.
    set_container_ip(&c.host, &ip);
    let agent = Agent::start_on(
        &c.cp,
        "agent-a",
        gpuplane_e2e::kpro6::NODE,
        &c.host,
        AgentOpts::default(),
        &["--sd-node-address", "127.0.0.1"],
    );
    // The slice's admin lets servers set the simulated host's crash hook (SIM_CRASH_AT), so the
    // test can make a new unit fail and be rolled back.
    let partition = std::fs::read_to_string(repo_root().join("examples/kpro6/partition.yaml"))
        .unwrap()
        .replace(
            "allowedEnv: [CUDA_HOME]",
            "allowedEnv: [CUDA_HOME, SIM_CRASH_AT]",
        );
    assert!(partition.contains("SIM_CRASH_AT"));
    c.k_stdin(&["apply", "-f", "-"], &partition);
    let server = std::fs::read_to_string(repo_root().join("examples/kpro6/server.yaml"))
        .unwrap()
        .replace("port: 30000", &format!("port: {port}"))
        .replace(
            "  enableMetrics: true\n",
            "  enableMetrics: true\n  rollback: Auto\n",
        );
    assert!(server.contains("rollback: Auto"));
    assert!(server.contains("enableMetrics: true"));
    c.k_stdin(&["apply", "-f", "-"], &server);
    c.wait_converged(Duration::from_secs(120));

    // The endpoint itself: Prometheus's HTTP SD contract.
    let (code, head, body) = http(
        "127.0.0.1".parse().unwrap(),
        agent.metrics_port(),
        "GET",
        "/sd/servers",
        "",
    );
    assert_eq!(code, 200, "{head}\n{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    let list: Json = serde_json::from_str(&body).unwrap();
    println!(
        "GET /sd/servers:\n{}",
        serde_json::to_string_pretty(&list).unwrap()
    );
    assert_eq!(list[0]["targets"][0], format!("{ip}:{port}"));
    for (k, v) in [
        ("namespace", "default"),
        ("inference_server", SERVER),
        ("model", "qwen3.5-122b"),
        ("node", "kpro6"),
        ("partition", "kpro6"),
        ("slice", "inference"),
        ("tp", "4"),
    ] {
        assert_eq!(list[0]["labels"][k], v, "label {k}: {body}");
    }

    let mut panels = vec![];
    for spelling in ["colon", "underscore"] {
        let _standin = Standin::start(
            ip,
            port,
            spelling,
            &c.cp.run.join(format!("standin-{spelling}.log")),
        );
        let prom = prometheus(
            &c.cp.run.join(format!("prometheus-{spelling}")),
            agent.metrics_port(),
            "",
        );
        let targets = wait_for(
            "the server discovered and scraped",
            Duration::from_secs(60),
            || {
                let t = sglang_targets(&prom)?;
                match t.first() {
                    Some(x) if x["health"] == "up" => Ok(t),
                    other => Err(format!("{other:?}")),
                }
            },
        );
        println!(
            "[{spelling}] /api/v1/targets (job sglang):\n{}",
            serde_json::to_string_pretty(&Json::Array(
                targets
                    .iter()
                    .map(|t| serde_json::json!({
                        "scrapeUrl": t["scrapeUrl"],
                        "health": t["health"],
                        "labels": t["labels"],
                        "discoveredLabels": t["discoveredLabels"],
                    }))
                    .collect()
            ))
            .unwrap()
        );
        assert_eq!(targets.len(), 1);
        assert_eq!(targets[0]["labels"]["inference_server"], SERVER);
        assert_eq!(
            targets[0]["scrapeUrl"],
            format!("http://{ip}:{port}/metrics")
        );
        // The stand-in spells its metrics as asked: the raw names prove which path was taken.
        let raw = if spelling == "colon" {
            "{__name__=\"sglang:num_requests_total\"}"
        } else {
            "sglang_num_requests_total"
        };
        wait_for(&format!("{raw} scraped"), Duration::from_secs(30), || {
            let r = prom.query(raw)?;
            if r.is_empty() {
                Err("no data".into())
            } else {
                Ok(())
            }
        });
        traffic(ip, port, 8);
        panels = every_panel_has_data(&prom, spelling);
    }

    // Stopped: the server deleted, its unit stopped and removed; the list empties at the
    // agent's next reconcile and Prometheus drops the target within one SD refresh.
    let prom = prometheus(&c.cp.run.join("prometheus-stop"), agent.metrics_port(), "");
    let _standin = Standin::start(ip, port, "colon", &c.cp.run.join("standin-stop.log"));
    wait_for(
        "target up again",
        Duration::from_secs(60),
        || match sglang_targets(&prom)?.len() {
            1 => Ok(()),
            n => Err(format!("{n} targets")),
        },
    );
    // Rolled back: a new spec whose server dies while loading; the last unit that reached Ready
    // runs again (Degraded RolledBack), and the server leaves the list.
    let t0 = Instant::now();
    c.patch_server(
        r#"{"spec":{"env":[{"name":"CUDA_HOME","value":"/usr/local/cuda-13.0"},{"name":"SIM_CRASH_AT","value":"load"}]}}"#,
    );
    wait_for("Degraded RolledBack", Duration::from_secs(120), || {
        let (st, reason, msg) = cond3(&c.server(), "Degraded");
        if st == "True" && reason == "RolledBack" {
            Ok(())
        } else {
            Err(format!("Degraded={st} {reason}: {msg}"))
        }
    });
    wait_for(
        "target gone after the rollback",
        Duration::from_secs(60),
        || match sglang_targets(&prom)?.len() {
            0 => Ok(()),
            n => Err(format!("{n} targets")),
        },
    );
    println!(
        "server rolled back: out of Prometheus's targets {:.1}s after the failing spec was applied",
        t0.elapsed().as_secs_f64()
    );
    // A good spec again: back in the list.
    c.patch_server(r#"{"spec":{"env":[{"name":"CUDA_HOME","value":"/usr/local/cuda-13.0"}]}}"#);
    wait_for(
        "target back after the fix",
        Duration::from_secs(120),
        || match sglang_targets(&prom)?.len() {
            1 => Ok(()),
            n => Err(format!("{n} targets")),
        },
    );

    let t0 = Instant::now();
    c.delete_server();
    wait_for("/sd/servers empty", Duration::from_secs(60), || match http(
        "127.0.0.1".parse().unwrap(),
        agent.metrics_port(),
        "GET",
        "/sd/servers",
        "",
    ) {
        (200, _, b) if b.trim() == "[]" => Ok(()),
        (c, _, b) => Err(format!("{c} {b}")),
    });
    let listed_out = t0.elapsed();
    wait_for(
        "target gone from Prometheus",
        Duration::from_secs(SD_REFRESH_SECONDS + 10),
        || match sglang_targets(&prom)?.len() {
            0 => Ok(()),
            n => Err(format!("{n} targets")),
        },
    );
    println!(
        "server deleted: out of /sd/servers after {:.1}s, out of Prometheus's targets after {:.1}s (SD refresh {SD_REFRESH_SECONDS}s)",
        listed_out.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    println!(
        "{} serving panels, each with data in both spellings",
        panels.len()
    );
}
