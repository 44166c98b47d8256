//! What an SGLang server shows from outside: HTTP readiness, model list, phase, GPU memory.

use super::LocalHost;
use crate::host::model::{HttpState, Location, ServerObservation, Unit, UnitRef};
use crate::systemd::unit;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A minimal HTTP/1.1 GET: returns (status, body). Enough for SGLang's health and info endpoints.
pub fn http_get(
    host: &str,
    port: u16,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| format!("no address for {host}"))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\nAccept: application/json\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("bad HTTP response")?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((
        status,
        if chunked {
            dechunk(raw_body(&buf))
        } else {
            body.to_string()
        },
    ))
}

/// The bytes after the header of a raw answer (empty when there is no header end).
pub(super) fn raw_body(buf: &[u8]) -> &[u8] {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(&[], |i| &buf[i + 4..])
}

/// A chunked body, decoded on bytes: chunk sizes count bytes, so a character may straddle two
/// chunks, and a size line that lies never makes it panic (it ends the body).
pub(super) fn dechunk(body: &[u8]) -> String {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.windows(2).position(|w| w == b"\r\n") {
        let (size, tail) = (&rest[..i], &rest[i + 2..]);
        let n = std::str::from_utf8(size)
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .unwrap_or(0);
        if n == 0 || tail.len() < n {
            break;
        }
        out.extend_from_slice(&tail[..n]);
        rest = &tail[n..];
        while let Some(r) = rest.strip_prefix(b"\r\n") {
            rest = r;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl LocalHost {
    /// Where to reach a server that listens on `listen` at `loc`.
    fn server_address(&self, loc: Location, listen: &str) -> Option<String> {
        match (loc, listen) {
            (Location::Host, "0.0.0.0" | "::") => Some("127.0.0.1".into()),
            (Location::Host, h) => Some(h.to_string()),
            (Location::Container(_), h) if h != "0.0.0.0" && h != "::" && h != "127.0.0.1" => {
                Some(h.to_string())
            }
            (Location::Container(_), _) => {
                let o = self.at(loc, &["hostname", "-I"]).ok()?;
                o.stdout.split_whitespace().next().map(str::to_string)
            }
        }
    }

    /// Observes the server a unit runs, from its unit file, its log and its HTTP endpoints.
    pub(super) fn observe_server(&self, r: &UnitRef, u: &Unit) -> Option<ServerObservation> {
        let parsed = unit::parse(u.file.as_deref()?).ok()?;
        let argv = &parsed.exec_start;
        if !argv.iter().any(|a| a == "sglang.launch_server") {
            return None;
        }
        let mut obs = ServerObservation {
            phase: crate::sglang::log::phase(&u.log_tail),
            ..Default::default()
        };
        obs.gpu_memory_mib = self.gpu_memory(&parsed);
        if !u.is_active() {
            return Some(obs);
        }
        let port: u16 = parsed
            .arg("--port")
            .and_then(|p| p.parse().ok())
            .unwrap_or(30000);
        let host = self.server_address(
            r.location,
            &parsed.arg("--host").unwrap_or_else(|| "127.0.0.1".into()),
        )?;
        let t = Duration::from_secs(3);
        obs.http = match http_get(&host, port, "/health_generate", Duration::from_secs(25)) {
            Err(_) => HttpState::Refused,
            Ok((200, _)) => HttpState::Healthy,
            Ok(_) => HttpState::Starting,
        };
        if obs.http == HttpState::Healthy {
            if let Ok((200, body)) = http_get(&host, port, "/v1/models", t) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) {
                    obs.models = v["data"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|m| m["id"].as_str().map(str::to_string))
                        .collect();
                }
            }
            let info = http_get(&host, port, "/server_info", t)
                .ok()
                .filter(|(c, _)| *c == 200)
                .or_else(|| {
                    http_get(&host, port, "/get_server_info", t)
                        .ok()
                        .filter(|(c, _)| *c == 200)
                });
            if let Some((_, body)) = info {
                if let Ok(serde_json::Value::Object(m)) =
                    serde_json::from_str::<serde_json::Value>(&body)
                {
                    for k in [
                        "tp_size",
                        "speculative_algorithm",
                        "speculative_num_steps",
                        "speculative_eagle_topk",
                        "speculative_num_draft_tokens",
                        "mem_fraction_static",
                    ] {
                        if let Some(v) = m.get(k).filter(|v| !v.is_null()) {
                            obs.server_info.insert(
                                k.into(),
                                v.as_str()
                                    .map(str::to_string)
                                    .unwrap_or_else(|| v.to_string()),
                            );
                        }
                    }
                }
            }
        }
        Some(obs)
    }

    /// GPU memory used per visible GPU (MiB), from nvidia-smi; empty when it is not available.
    fn gpu_memory(&self, parsed: &unit::ParsedUnit) -> Vec<u64> {
        let Ok(o) = self.cmd(&[
            &self.tools.nvidia_smi,
            "--query-gpu=pci.bus_id,memory.used",
            "--format=csv,noheader,nounits",
        ]) else {
            return vec![];
        };
        if !o.ok() {
            return vec![];
        }
        let mut rows: Vec<(String, u64)> = o
            .stdout
            .lines()
            .filter_map(|l| {
                let (bus, mem) = l.split_once(',')?;
                Some((bus.trim().to_ascii_lowercase(), mem.trim().parse().ok()?))
            })
            .collect();
        rows.sort();
        let visible = parsed.env("CUDA_VISIBLE_DEVICES");
        match visible {
            Some(v) => v
                .split(',')
                .filter_map(|i| i.trim().parse::<usize>().ok())
                .filter_map(|i| rows.get(i).map(|r| r.1))
                .collect(),
            None => rows.into_iter().map(|r| r.1).collect(),
        }
    }
}
