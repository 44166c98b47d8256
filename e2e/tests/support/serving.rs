//! Shared by the serving e2e tests: HTTP to the stand-in, the stand-in SGLang server as a real
//! process, a Prometheus that discovers the servers through the agent.

use gpuplane_e2e::paths::repo_root;
use gpuplane_e2e::prometheus::Prometheus;
use gpuplane_e2e::wait::wait_for;
use serde_json::Value as Json;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How often Prometheus asks the agent for the list.
pub const SD_REFRESH_SECONDS: u64 = 1;

/// One HTTP/1.0 request to `ip:port`: (status, headers, body).
pub fn http(ip: IpAddr, port: u16, method: &str, path: &str, body: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect_timeout(&(ip, port).into(), Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {ip}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_string(), body.to_string())
}

/// The stand-in SGLang server on `ip:port` with metrics spelt `names` (`colon`/`underscore`),
/// killed on drop.
pub struct Standin(Child);

impl Standin {
    pub fn start(ip: IpAddr, port: u16, names: &str, log: &std::path::Path) -> Standin {
        let logf = std::fs::File::create(log).unwrap();
        let child = Command::new("python3")
            .args(["-m", "sglang.launch_server", "--model-path"])
            .arg("/shared/models/Qwen3.5-122B-A10B")
            .args(["--served-model-name", "qwen3.5-122b", "--enable-metrics"])
            .args([
                "--speculative-algorithm",
                "NEXTN",
                "--speculative-num-steps",
                "3",
            ])
            .args([
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "4",
            ])
            .args(["--host", &ip.to_string(), "--port", &port.to_string()])
            .env("PYTHONPATH", repo_root().join("e2e/standin"))
            .env("STANDIN_METRICS_NAMES", names)
            .env("STANDIN_LOAD_SECONDS", "0.2")
            .env("STANDIN_GRAPH_SECONDS", "0.2")
            .env("STANDIN_WARMUP_SECONDS", "0.1")
            .env("STANDIN_P2P_CORRUPT_MARKER", "/nonexistent")
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("python3 for the SGLang stand-in");
        let s = Standin(child);
        wait_for(
            "stand-in healthy",
            Duration::from_secs(60),
            || match TcpStream::connect_timeout(&(ip, port).into(), Duration::from_millis(200)) {
                Ok(_) => match http(ip, port, "GET", "/health", "").0 {
                    200 => Ok(()),
                    c => Err(format!("/health {c}")),
                },
                Err(e) => Err(e.to_string()),
            },
        );
        s
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Prometheus scraping the agent (job `gpuplane-agent`) and the servers of job `sglang` through
/// `http_sd_configs` at the agent's `/sd/servers`, plus `extra` scrape configs (YAML list items),
/// with the chart's serving recording rules.
pub fn prometheus(dir: &std::path::Path, agent_port: u16, extra: &str) -> Prometheus {
    let rules = repo_root().join("charts/gpuplane/files/serving-rules.yaml");
    Prometheus::start_with(
        dir,
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: gpuplane-agent\n    static_configs:\n      - targets: ['127.0.0.1:{agent_port}']\n  - job_name: sglang\n    http_sd_configs:\n      - url: http://127.0.0.1:{agent_port}/sd/servers\n        refresh_interval: {SD_REFRESH_SECONDS}s\n{extra}",
            rules.display()
        ),
    )
}

/// The active targets of `job`.
pub fn targets_of(prom: &Prometheus, job: &str) -> Result<Vec<Json>, String> {
    let v = prom.api("/api/v1/targets?state=active")?;
    Ok(v["data"]["activeTargets"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t["labels"]["job"] == job)
        .collect())
}
