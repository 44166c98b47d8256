//! What an SGLang server shows from outside: HTTP readiness, model list, phase, GPU memory.

use super::LocalHost;
use crate::host::model::{HttpState, Location, ServerObservation, Unit, UnitRef};
use crate::systemd::unit;
use std::collections::BTreeMap;
use std::time::Duration;

/// The most one smoke request may take, whatever `timeoutSeconds` says (the CRD's maximum too).
const SMOKE_REQUEST_MAX: u64 = 120;

/// How long a probe's 200 stands for the next observation's `/health_generate`.
const PROBE_FRESH: Duration = Duration::from_secs(2);

/// GET from a server through the bounded client (deadline for the whole request, 1 MiB body).
fn http_get(
    host: &str,
    port: u16,
    path: &str,
    deadline: Duration,
) -> Result<(u16, String), String> {
    crate::http::client::get(host, port, path, deadline).map_err(|e| e.to_string())
}

/// Whether `ip` is an address of this machine: binding a socket to it succeeds only then.
fn assigned_here(ip: std::net::IpAddr) -> bool {
    !ip.is_unspecified() && std::net::UdpSocket::bind((ip, 0)).is_ok()
}

impl LocalHost {
    /// Where to reach a server that listens on `listen` at `loc`; `None` when the agent must not
    /// go there.
    ///
    /// # Guarantees
    /// `listen.host` is the tenant's text, so it never aims the agent's GETs (and the answers
    /// copied into status) at another machine: on the host only a loopback address or one
    /// assigned to the host itself; in a container only one of the container's own routable
    /// addresses as the host knows them (`container_net.rs`: never loopback or link-local, never
    /// what the container says). A name is never resolved, except `localhost`.
    fn server_address(&self, loc: Location, listen: &str) -> Option<String> {
        let wildcard = matches!(listen, "0.0.0.0" | "::" | "127.0.0.1" | "::1" | "localhost");
        match loc {
            Location::Host if wildcard => Some("127.0.0.1".into()),
            Location::Host => {
                let ip: std::net::IpAddr = listen.parse().ok()?;
                assigned_here(ip).then(|| ip.to_string())
            }
            Location::Container(vmid) => {
                super::container_net::pick(listen, &self.container_addresses(vmid))
            }
        }
    }

    /// The container's addresses from the host side: its config's static ones, else those of
    /// its network namespace (`/proc/<init pid>/net/fib_trie`, the PID from `lxc-info`).
    fn container_addresses(&self, vmid: u32) -> Vec<std::net::IpAddr> {
        use super::container_net::{config_addresses, fib_trie_local};
        let conf = self
            .root
            .read(&format!("/etc/pve/lxc/{vmid}.conf"))
            .unwrap_or_default();
        let fixed = config_addresses(&conf);
        if !fixed.is_empty() {
            return fixed;
        }
        let id = vmid.to_string();
        let pid = self
            .cmd(&[&self.tools.lxc_info, "-n", &id, "-p", "-H"])
            .ok()
            .filter(|o| o.ok())
            .and_then(|o| o.stdout.trim().parse::<u32>().ok());
        pid.and_then(|p| self.root.read(&format!("/proc/{p}/net/fib_trie")))
            .map(|t| fib_trie_local(&t))
            .unwrap_or_default()
    }

    /// Observes the server a unit runs, from its unit file, its log and its HTTP endpoints.
    pub(super) fn observe_server(&self, r: &UnitRef, u: &Unit) -> Option<ServerObservation> {
        let parsed = unit::parse(u.file.as_deref()?).ok()?;
        let argv = &parsed.exec_start;
        if !argv.iter().any(|a| a == "sglang.launch_server") {
            return None;
        }
        let (phase, phase_since) =
            crate::sglang::log::phase_since(&u.log_tail, &u.log_times, u.started_at);
        let mut obs = ServerObservation {
            phase,
            phase_since,
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
        self.endpoints
            .borrow_mut()
            .insert(r.key(), (host.clone(), port));
        obs.reached_at = Some(host.clone());
        let t = Duration::from_secs(3);
        // A probe that got 200 moments ago from this same address is this observation's
        // answer: asking again would cost the server another generation (about a second on a
        // real one) before Ready.
        let probed = self
            .probed_healthy
            .borrow_mut()
            .remove(&r.key())
            .is_some_and(|(t, at)| t.elapsed() < PROBE_FRESH && at == (host.clone(), port));
        obs.http = if probed {
            HttpState::Healthy
        } else {
            match http_get(&host, port, "/health_generate", Duration::from_secs(25)) {
                Err(_) => HttpState::Refused,
                Ok((200, _)) => HttpState::Healthy,
                Ok(_) => HttpState::Starting,
            }
        };
        if obs.http == HttpState::Healthy {
            obs.models = served_models(&host, port, t);
            obs.server_info = server_info(&host, port, t);
            obs.smoke = self.smoke_test(r, u, &host, port, &obs.models);
        }
        Some(obs)
    }

    /// Whether the server of `r` answers `/health_generate` 200 now, at the address and port
    /// the last full observation found for it (one GET with `deadline`, no command run, so a
    /// container's server costs no `pct exec`). `None` when no observation reached it yet.
    pub(super) fn probe_health(&self, r: &UnitRef, deadline: Duration) -> Option<bool> {
        let (host, port) = self.endpoints.borrow().get(&r.key()).cloned()?;
        let ok = matches!(
            http_get(&host, port, "/health_generate", deadline),
            Ok((200, _))
        );
        if ok {
            self.probed_healthy
                .borrow_mut()
                .insert(r.key(), (std::time::Instant::now(), (host, port)));
        }
        Some(ok)
    }

    /// The smoke test of the server a Ready unit runs: its result once done for this unit, else
    /// `None` after starting it beside the observation (`smoke.rs`: no lock held, one budget).
    fn smoke_test(
        &self,
        r: &UnitRef,
        u: &Unit,
        host: &str,
        port: u16,
        models: &[String],
    ) -> Option<crate::host::model::SmokeResult> {
        let req = self.preflight.iter().find(|p| p.unit == *r)?;
        let spec = req.smoke.as_ref()?;
        if !models.contains(&req.served_name) {
            return None;
        }
        let unit_hash = crate::digest::sha256(u.file.as_deref().unwrap_or(""));
        let key = format!(
            "{}|{}",
            r.key(),
            serde_json::to_string(spec).unwrap_or_default()
        );
        let per_request = Duration::from_secs(spec.timeout_seconds.clamp(1, SMOKE_REQUEST_MAX));
        let (host, served) = (host.to_string(), req.served_name.clone());
        let requests = || {
            spec.requests
                .iter()
                .map(|q| {
                    let (q, host, served) = (q.clone(), host.clone(), served.clone());
                    super::smoke::Request {
                        name: q.name.clone(),
                        send: Box::new(move |deadline| {
                            let body = crate::sglang::smoke::request_body(&served, &q);
                            let answer = crate::http::client::post_json(
                                &host,
                                port,
                                "/v1/chat/completions",
                                &body,
                                deadline,
                            );
                            match answer {
                                Ok((status, text)) => {
                                    crate::sglang::smoke::judge(&q, status, &text)
                                }
                                Err(e) => Err(format!(
                                    "{}: {}",
                                    q.name,
                                    crate::text::sanitize(&e.to_string(), 200)
                                )),
                            }
                        }),
                    }
                })
                .collect()
        };
        self.smoke
            .result_or_start(&key, &unit_hash, per_request, requests)
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

/// The model ids the server lists at `/v1/models` (none when it does not answer 200 JSON).
fn served_models(host: &str, port: u16, t: Duration) -> Vec<String> {
    let Ok((200, body)) = http_get(host, port, "/v1/models", t) else {
        return vec![];
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) else {
        return vec![];
    };
    v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str().map(str::to_string))
        .collect()
}

/// The settings the running server reports (`/server_info`, or `/get_server_info` of older
/// SGLang) that the agent compares with the spec.
fn server_info(host: &str, port: u16, t: Duration) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let ok = |path: &str| {
        http_get(host, port, path, t)
            .ok()
            .filter(|(c, _)| *c == 200)
    };
    let Some((_, body)) = ok("/server_info").or_else(|| ok("/get_server_info")) else {
        return out;
    };
    let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(&body) else {
        return out;
    };
    for k in [
        "tp_size",
        "speculative_algorithm",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
        "mem_fraction_static",
    ] {
        if let Some(v) = m.get(k).filter(|v| !v.is_null()) {
            let text = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            out.insert(k.into(), text);
        }
    }
    out
}

#[cfg(test)]
mod tests;
