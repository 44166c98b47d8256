//! The standalone agent (`gpuplane run --manifests DIR`, no Kubernetes) lists the SGLang servers
//! for Prometheus both ways (issue 27): `/sd/servers` on its metrics listener and the file_sd file
//! (`--file-sd`), replaced atomically. A real Prometheus reads both (`http_sd_configs` and
//! `file_sd_configs`); the agent runs on the simulated reference host, the reference server in
//! LXC 129 at this machine's address, its `/metrics` served by the SGLang stand-in (a real
//! process). The server's manifest removed, the agent stops and removes its unit and both lists
//! empty: Prometheus drops the target from both jobs.
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test standalone_serving -- --nocapture

#[path = "support/serving.rs"]
mod serving;

use gpuplane_e2e::net::{free_ports, http_get, own_address};
use gpuplane_e2e::paths::{gpuplane_bin, repo_root};
use gpuplane_e2e::sim_host::set_container_ip;
use gpuplane_e2e::wait::wait_for;
use serde_json::Value as Json;
use serving::{prometheus, targets_of, Standin};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The standalone agent as a child process, killed on drop.
struct Standalone(Child);

impl Drop for Standalone {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_standalone_agent_lists_its_servers_for_http_sd_and_file_sd() {
    // Kept after a failure (the agent's, the stand-in's and Prometheus's logs are there).
    let dir = std::env::temp_dir().join(format!(
        "gpuplane-standalone-serving-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.as_path();
    let ip = own_address();
    let [port, metrics_port]: [u16; 2] = free_ports(2).try_into().unwrap();
    let m = d.join("manifests");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::copy(
        repo_root().join("examples/kpro6/partition.yaml"),
        m.join("partition.yaml"),
    )
    .unwrap();
    let server = std::fs::read_to_string(repo_root().join("examples/kpro6/server.yaml"))
        .unwrap()
        .replace("port: 30000", &format!("port: {port}"));
    std::fs::write(m.join("server.yaml"), server).unwrap();
    let host = d.join("host.yaml");
    std::fs::copy(repo_root().join("examples/hosts/kpro6.yaml"), &host).unwrap();
    set_container_ip(&host, &ip);
    let file_sd = d.join("prometheus/servers.json");
    let log = std::fs::File::create(d.join("agent.log")).unwrap();
    let _agent = Standalone(
        Command::new(gpuplane_bin())
            .args(["run", "--manifests"])
            .arg(&m)
            .arg("--host")
            .arg(format!("sim-rw:{}", host.display()))
            .arg("--status-dir")
            .arg(d.join("status"))
            .arg("--file-sd")
            .arg(&file_sd)
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
            .args([
                "--sim-speed",
                "20",
                "--poll-interval",
                "1",
                "--drift-interval",
                "2",
            ])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("gpuplane run --manifests"),
    );

    // The file: the server at the container's address, with its labels.
    let listed = wait_for(
        "the file_sd file lists the server",
        Duration::from_secs(120),
        || {
            let text = std::fs::read_to_string(&file_sd).map_err(|e| e.to_string())?;
            let v: Json = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
            match v.as_array().map(Vec::len) {
                Some(1) => Ok(v),
                _ => Err(text),
            }
        },
    );
    println!(
        "{}:\n{}",
        file_sd.display(),
        serde_json::to_string_pretty(&listed).unwrap()
    );
    assert_eq!(listed[0]["targets"][0], format!("{ip}:{port}"));
    assert_eq!(listed[0]["labels"]["inference_server"], "qwen35-122b");
    assert_eq!(listed[0]["labels"]["node"], "kpro6");
    // The same list at /sd/servers.
    let (code, body) = http_get(metrics_port, "/sd/servers").unwrap();
    assert_eq!(code, 200);
    assert_eq!(serde_json::from_str::<Json>(&body).unwrap(), listed);

    let _standin = Standin::start(ip, port, "underscore", &d.join("standin.log"));
    let prom = prometheus(
        &d.join("prom"),
        metrics_port,
        &format!(
            "  - job_name: sglang-file\n    file_sd_configs:\n      - files: ['{}']\n        refresh_interval: 1s\n",
            file_sd.display()
        ),
    );
    for job in ["sglang", "sglang-file"] {
        let t = wait_for(&format!("{job} target up"), Duration::from_secs(60), || {
            let t = targets_of(&prom, job)?;
            match t.first() {
                Some(x) if x["health"] == "up" => Ok(t),
                other => Err(format!("{other:?}")),
            }
        });
        println!(
            "job {job}: {} {} {}",
            t[0]["scrapeUrl"], t[0]["health"], t[0]["labels"]
        );
        assert_eq!(t[0]["labels"]["inference_server"], "qwen35-122b");
    }
    wait_for("a serving rule's series", Duration::from_secs(30), || {
        let r = prom.query("gpuplane:sglang_spec_accept_length")?;
        r.first()
            .map(|x| x["value"][1].clone())
            .ok_or_else(|| "no data".to_string())
    });
    // The server's GPUs joined from the standalone agent's gpuplane_gpu_owner (for DCGM).
    let gpus = wait_for("the server's GPUs", Duration::from_secs(30), || {
        let r = prom.query("gpuplane:sglang_server_gpu:info")?;
        if r.len() == 4 {
            Ok(r)
        } else {
            Err(format!("{} GPUs", r.len()))
        }
    });
    let ids: Vec<&str> = gpus
        .iter()
        .filter_map(|g| g["metric"]["pci_bus_id"].as_str())
        .collect();
    println!("the server's GPUs: {ids:?}");

    // The server's manifest removed: both lists empty, Prometheus drops both targets.
    let t0 = Instant::now();
    std::fs::remove_file(m.join("server.yaml")).unwrap();
    wait_for("the file_sd file empty", Duration::from_secs(60), || {
        let text = std::fs::read_to_string(&file_sd).map_err(|e| e.to_string())?;
        if text.trim() == "[]" {
            Ok(())
        } else {
            Err(text)
        }
    });
    for job in ["sglang", "sglang-file"] {
        wait_for(
            &format!("{job} target gone"),
            Duration::from_secs(30),
            || match targets_of(&prom, job)?.len() {
                0 => Ok(()),
                n => Err(format!("{n} targets")),
            },
        );
    }
    println!(
        "server removed: out of both jobs' targets after {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    // Never a half-written file: only the list and no temp file beside it.
    let names: Vec<String> = std::fs::read_dir(file_sd.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["servers.json"]);
    drop(prom);
    let _ = std::fs::remove_dir_all(&dir);
}
