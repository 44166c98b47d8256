//! A real Prometheus (Debian's `prometheus`, e2e/setup/observability-tools.sh) scraping the agent
//! every second, for the dashboard's queries; killed on drop. Also `promtool check metrics`.

use crate::net::{free_ports, http_get};
use crate::wait::wait_for;
use serde_json::Value as Json;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A Prometheus server on loopback.
pub struct Prometheus {
    child: Child,
    pub port: u16,
}

impl Prometheus {
    /// Starts Prometheus in `dir` scraping `127.0.0.1:target_port` as job `gpuplane-agent`, and
    /// waits until it serves its API.
    pub fn start(dir: &Path, target_port: u16) -> Prometheus {
        Prometheus::start_with(
            dir,
            &format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: gpuplane-agent\n    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
            ),
        )
    }

    /// Starts Prometheus in `dir` with `config` (prometheus.yml's text; relative paths in it are
    /// relative to `dir`), and waits until it serves its API.
    pub fn start_with(dir: &Path, config_text: &str) -> Prometheus {
        let port = free_ports(1)[0];
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, config_text).unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("prometheus (install it with e2e/setup/observability-tools.sh)");
        let p = Prometheus { child, port };
        wait_for(
            "Prometheus ready",
            Duration::from_secs(30),
            || match http_get(port, "/-/ready") {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            },
        );
        p
    }

    /// `GET path` of its HTTP API, parsed.
    pub fn api(&self, path: &str) -> Result<Json, String> {
        let (code, body) = http_get(self.port, path)?;
        let v: Json = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if code != 200 {
            return Err(format!("{path}: HTTP {code}: {body}"));
        }
        Ok(v)
    }

    /// The result vector of an instant query (empty when the query returns no data).
    pub fn query(&self, expr: &str) -> Result<Vec<Json>, String> {
        let (code, body) = http_get(self.port, &format!("/api/v1/query?query={}", encode(expr)))?;
        let v: Json = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if code != 200 || v["status"] != "success" {
            return Err(format!("query {expr}: HTTP {code}: {body}"));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// [`Prometheus::query`], an empty result being an error ("no data"): for `wait_for`.
    pub fn query_some(&self, expr: &str) -> Result<Vec<Json>, String> {
        let r = self.query(expr)?;
        if r.is_empty() {
            Err(format!("{expr}: no data"))
        } else {
            Ok(r)
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encoding of a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `promtool check metrics` on a scrape: Ok(its output) when it finds nothing, else Err.
pub fn promtool_check_metrics(scrape: &str) -> Result<String, String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (install it with e2e/setup/observability-tools.sh)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && text.trim().is_empty() {
        Ok(text)
    } else {
        Err(text)
    }
}
