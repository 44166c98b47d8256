//! Prometheus finds the servers of the agent on manifest files, on the real kernel in the qemu
//! GPU host (issue 27): `e2e/vm/scenarios/serving.sh` runs the agent as a systemd unit with the
//! real local backend, the SGLang stand-in as a real unit with `enableMetrics`, and a real
//! Prometheus (this machine's Debian binary, copied into the VM) that reaches the server only
//! through the agent: `http_sd_configs` at `/sd/servers` (job `sglang`) and `file_sd_configs` on
//! the agent's file (job `sglang-file`). Judged: both jobs discover and scrape the server with
//! the agent's labels; every query of the serving dashboard returns data in both spellings of
//! SGLang's metric names (`sglang:` and `sglang_`, a fresh Prometheus each), the DCGM panels
//! joined to the server's own GPUs by `pci_bus_id` — their series come from a stand-in of
//! dcgm-exporter (it needs NVIDIA's DCGM and GPUs) that labels them as dcgm-exporter does; the
//! server's manifest removed, both jobs drop the target.
//!
//!     cargo build --bin gpuplane && cargo test --workspace --test vm_serving -- --nocapture

use gpuplane_e2e::paths::repo_root;
use gpuplane_e2e::vm::{gpuplane_for_vm, preflight, run, standin_tar, tagged as lines};
use serde_json::Value as Json;

#[test]
fn prometheus_finds_the_standalone_agents_servers_on_the_real_host() {
    preflight();
    let prometheus = std::path::PathBuf::from("/usr/bin/prometheus");
    assert!(
        prometheus.is_file(),
        "/usr/bin/prometheus missing: run e2e/setup/observability-tools.sh"
    );
    let (dir, tar) = standin_tar("gpuplane-vm-serving");
    let files = repo_root().join("charts/gpuplane/files");
    let r = run(
        &repo_root().join("e2e/vm/scenarios/serving.sh"),
        &[
            gpuplane_for_vm(),
            tar,
            repo_root().join("e2e/vm/scenario-lib.sh"),
            prometheus,
            files.join("serving-rules.yaml"),
            files.join("serving-dashboard.json"),
        ],
        &[("VM_TIMEOUT", "900")],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let out = r.stdout;
    eprintln!("--- serving.sh: {:.0}s\n{out}\n{}", r.secs, r.stderr);
    assert_eq!(r.code, Some(0), "{out}\n{}", r.stderr);
    assert!(lines(&out, "ERROR").is_empty(), "{out}");

    let dashboard: Json = serde_json::from_str(
        &std::fs::read_to_string(files.join("serving-dashboard.json")).unwrap(),
    )
    .unwrap();
    let titles: Vec<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for spelling in ["colon", "underscore"] {
        // Both jobs found the server through the agent, with its labels.
        let t = lines(&out, "TARGETS")
            .into_iter()
            .find_map(|l| l.strip_prefix(spelling)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no targets for {spelling}: {out}"));
        let t: Vec<Json> = serde_json::from_str(t).unwrap();
        assert_eq!(t.len(), 2, "{t:?}");
        for target in &t {
            let l = &target["labels"];
            assert_eq!(target["health"], "up", "{target}");
            assert_eq!(target["scrapeUrl"], "http://127.0.0.1:30000/metrics");
            assert_eq!(l["inference_server"], "e2e", "{l}");
            assert_eq!(l["namespace"], "default");
            assert_eq!(l["model"], "tiny");
            assert_eq!(l["node"], "vmhost");
            assert_eq!(l["partition"], "vmhost");
            assert_eq!(l["slice"], "host");
            assert_eq!(l["tp"], "2");
        }
        // Every panel answered: data, or (DCGM) evaluated.
        let panels: Vec<&str> = lines(&out, "PANEL")
            .into_iter()
            .filter_map(|l| l.strip_prefix(spelling)?.strip_prefix(' '))
            .collect();
        assert_eq!(panels.len(), titles.len(), "{panels:#?}");
        for (p, title) in panels.iter().zip(&titles) {
            let (rows, t) = p.split_once(' ').unwrap();
            assert_eq!(t, *title);
            let rows: usize = rows.parse().unwrap();
            assert!(rows > 0, "{spelling}: panel {title} had no data");
        }
        // The DCGM panels show the server's own GPUs: its slice's three, no other.
        for v in lines(&out, "VALUE")
            .into_iter()
            .filter(|l| l.starts_with(spelling) && l.contains("(DCGM)"))
        {
            assert!(v.contains("\"inference_server\":\"e2e\""), "{v}");
            assert!(v.contains("\"pci_bus_id\":\"00000000:4"), "{v}");
        }
        let gpu_rows = panels
            .iter()
            .filter(|p| p.ends_with("(DCGM)"))
            .map(|p| p.split_once(' ').unwrap().0)
            .collect::<Vec<_>>();
        assert_eq!(gpu_rows, ["3", "3", "3"], "{panels:#?}");
    }
    // Stopped: both jobs dropped the target.
    for job in ["sglang", "sglang-file"] {
        let gone = lines(&out, "GONE")
            .into_iter()
            .find_map(|l| l.strip_suffix(&format!(" {job}")))
            .unwrap_or_else(|| panic!("{out}"));
        let secs: f64 = gone
            .parse()
            .unwrap_or_else(|_| panic!("{job} kept the stopped server: {out}"));
        assert!(secs < 60.0, "{job}: {secs}s");
    }
    assert!(out.contains("UNIT inactive removed"), "{out}");
}
