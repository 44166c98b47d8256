//! The agent under test: `gpuplane run` as a child process against a [`Cluster`], its log (the
//! `host write:` lines), its `/metrics`, and killing it. Killed on drop; on a test failure its
//! metrics and the tail of its log are printed.

use crate::kpro6::NODE;
use crate::kube::{Cluster, ControlPlane, LEASE_NS};
use crate::net::{free_ports, http_get};
use crate::paths::{gpuplane_bin, path_str};
use crate::wait::wait_for;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Host writes that touch GPUs, containers or mappings (not needed for a server-only change).
pub const GPU_KINDS: [&str; 9] = [
    "stopContainer",
    "loadDriver",
    "setDriverOverride",
    "unbind",
    "probe",
    "returnToHostDriver",
    "setContainerGpus",
    "setPciMapping",
    "startContainer",
];

/// Intervals of an agent, in seconds.
pub struct AgentOpts {
    pub drift_interval: u64,
    pub lease_duration: u64,
}

impl Default for AgentOpts {
    fn default() -> Self {
        AgentOpts {
            drift_interval: 3,
            lease_duration: 6,
        }
    }
}

/// `gpuplane run` as a child process, logging to a file; killed on drop (log printed on failure).
pub struct Agent {
    child: Child,
    pub id: String,
    log: PathBuf,
    port: u16,
    killed: bool,
}

impl Agent {
    /// Starts agent `id` for the cluster's node on its host file (`--sim-speed 20`, the non-admin
    /// kubeconfig) and waits until its `/healthz` and `/readyz` answer 200.
    pub fn start(c: &Cluster, id: &str, o: AgentOpts) -> Agent {
        Agent::start_on(&c.cp, id, NODE, &c.host, o, &[])
    }

    /// [`Agent::start`] with another kubeconfig (e.g. one that reads its token from a file, or
    /// reaches the API server through a relay the test can cut).
    pub fn start_with_kubeconfig(c: &Cluster, id: &str, o: AgentOpts, kubeconfig: &Path) -> Agent {
        Agent::launch(&c.cp, id, NODE, &c.host, o, &[], kubeconfig)
    }

    /// Starts agent `id` for `node` on the host file `host`, with `extra` arguments after the
    /// usual ones (e.g. `--watch-scope cluster`), and waits until it is healthy and ready.
    pub fn start_on(
        cp: &ControlPlane,
        id: &str,
        node: &str,
        host: &Path,
        o: AgentOpts,
        extra: &[&str],
    ) -> Agent {
        Agent::launch(cp, id, node, host, o, extra, &cp.agent_kubeconfig())
    }

    /// [`Agent::start_on`] with another kubeconfig: an agent of `node` with its own credentials
    /// (e.g. its pod's bound ServiceAccount token, which the admission webhook judges by).
    pub fn start_on_with_kubeconfig(
        cp: &ControlPlane,
        id: &str,
        node: &str,
        host: &Path,
        o: AgentOpts,
        kubeconfig: &Path,
    ) -> Agent {
        Agent::launch(cp, id, node, host, o, &[], kubeconfig)
    }

    fn launch(
        cp: &ControlPlane,
        id: &str,
        node: &str,
        host: &Path,
        o: AgentOpts,
        extra: &[&str],
        kubeconfig: &Path,
    ) -> Agent {
        let port = free_ports(1)[0];
        let log = cp.run.join(format!("agent-{id}.log"));
        let logf = std::fs::File::create(&log).unwrap();
        let mut args: Vec<String> = vec![
            "run".into(),
            "--node-name".into(),
            node.into(),
            "--host".into(),
            format!("sim-rw:{}", host.display()),
            "--kubeconfig".into(),
            path_str(kubeconfig),
            "--metrics-addr".into(),
            format!("127.0.0.1:{port}"),
            "--drift-interval".into(),
            o.drift_interval.to_string(),
            "--poll-interval".into(),
            "1".into(),
            "--lease-namespace".into(),
            LEASE_NS.into(),
            "--lease-duration".into(),
            o.lease_duration.to_string(),
            "--identity".into(),
            id.into(),
            "--sim-speed".into(),
            "20".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let child = Command::new(gpuplane_bin())
            .args(&args)
            // GPUPLANE_E2E_AGENT_LOG overrides the filter (e.g. info,gpuplane=debug,kube_runtime=debug).
            .env(
                "GPUPLANE_LOG",
                std::env::var("GPUPLANE_E2E_AGENT_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .expect("spawn gpuplane run");
        eprintln!(
            "[kube_agent] agent {id} (pid {}): gpuplane {}",
            child.id(),
            args.join(" ")
        );
        let a = Agent {
            child,
            id: id.into(),
            log,
            port,
            killed: false,
        };
        a.wait_healthy();
        a
    }

    /// /healthz answers as soon as the process serves; /readyz once the API server answered.
    fn wait_healthy(&self) {
        let port = self.port;
        wait_for(
            &format!("agent {} /healthz and /readyz", self.id),
            Duration::from_secs(30),
            || {
                let h = http_get(port, "/healthz")?;
                let r = http_get(port, "/readyz")?;
                if h.0 == 200 && r.0 == 200 {
                    Ok(())
                } else {
                    Err(format!("/healthz {} /readyz {} {}", h.0, r.0, r.1.trim()))
                }
            },
        );
    }

    /// The agent's log so far, without colour sequences.
    pub fn log_text(&self) -> String {
        strip_ansi(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// The `host write: ...` lines of the log, each as (kind, text).
    pub fn host_writes(&self) -> Vec<(String, String)> {
        self.log_text()
            .lines()
            .filter_map(host_write)
            .map(|(kind, text)| (kind.to_string(), text.to_string()))
            .collect()
    }

    /// The host writes after the first `n` (see [`Agent::host_writes`]).
    pub fn host_writes_since(&self, n: usize) -> Vec<(String, String)> {
        self.host_writes()[n..].to_vec()
    }

    /// `GET /metrics`; panics unless it answers 200.
    pub fn metrics(&self) -> String {
        let (code, body) = http_get(self.port, "/metrics").expect("GET /metrics");
        assert_eq!(code, 200, "/metrics of agent {}: {body}", self.id);
        body
    }

    /// The value of one series of `/metrics` (see [`metric_value`]).
    pub fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics(), series)
    }

    /// Waits until `ok(value of series)`; `what` names the wait in the timeout message.
    pub fn wait_metric(
        &self,
        what: &str,
        series: &str,
        timeout: Duration,
        ok: impl Fn(f64) -> bool,
    ) {
        wait_for(what, timeout, || {
            let v = self.metric(series);
            if ok(v) {
                Ok(())
            } else {
                Err(format!("{series} {v}"))
            }
        });
    }

    /// How many reconciles the agent makes in `window` (`gpuplane_reconciles_total` before and
    /// after), and the total after.
    pub fn reconciles_in(&self, window: Duration) -> (f64, f64) {
        let r0 = self.metric("gpuplane_reconciles_total");
        std::thread::sleep(window);
        let r1 = self.metric("gpuplane_reconciles_total");
        (r1 - r0, r1)
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The port of its `/metrics`.
    pub fn metrics_port(&self) -> u16 {
        self.port
    }

    /// SIGKILL (no chance to release the lease), once.
    pub fn kill(&mut self) {
        if !self.killed {
            self.killed = true;
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// The samples of `/metrics` without comments and histogram buckets, if it answers.
    fn metrics_summary(&self) -> Option<String> {
        let (_, m) = http_get(self.port, "/metrics").ok()?;
        let m: Vec<&str> = m
            .lines()
            .filter(|l| !l.starts_with('#') && !l.contains("_bucket"))
            .collect();
        Some(m.join("\n"))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.killed {
            if let Some(m) = self.metrics_summary() {
                eprintln!(
                    "[kube_agent] metrics of agent {} at the failure:\n{m}",
                    self.id
                );
            }
        }
        self.kill();
        if std::thread::panicking() {
            let text = self.log_text();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "[kube_agent] test failed; log of agent {} (last {} of {} lines):\n{}",
                self.id,
                lines.len().min(300),
                lines.len(),
                lines[lines.len().saturating_sub(300)..].join("\n")
            );
        }
    }
}

/// Sum of the samples of `series` in Prometheus text: `name` matches every label set of that
/// name, `name{a="b",...}` only that exact label set.
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(k, _)| {
            if series.contains('{') {
                *k == series
            } else {
                *k == series || k.starts_with(&format!("{series}{{"))
            }
        })
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum()
}

/// Removes ANSI colour sequences (the agent's tracing output may be coloured).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// How many host writes of each kind.
pub fn kinds(writes: &[(String, String)]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for (k, _) in writes {
        *m.entry(k.clone()).or_insert(0) += 1;
    }
    m
}

/// Prints host writes under a title.
pub fn show_writes(title: &str, writes: &[(String, String)]) {
    eprintln!("[kube_agent] {title}: {} host writes", writes.len());
    for (k, t) in writes {
        eprintln!("    {k:<18} {t}");
    }
}

/// Seconds since the epoch, now (to compare with [`log_time`]).
pub fn epoch_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Seconds since the epoch of a log line's leading timestamp, as tracing writes it in UTC
/// (`2026-12-06T00:30:01.123456Z ...`).
pub fn log_time(line: &str) -> Option<f64> {
    let t: jiff::Timestamp = line.split_whitespace().next()?.parse().ok()?;
    Some(t.as_nanosecond() as f64 / 1e9)
}

/// Whether a host write (its `kind` and text in the agent's `host write:` line) disrupts the
/// host's users, as `plan/disruption.rs` counts them.
pub fn disruptive(kind: &str, text: &str) -> bool {
    matches!(
        kind,
        "stopUnit" | "stopContainer" | "unbind" | "returnToHostDriver" | "reboot" | "removeUnit"
    ) || (kind == "startUnit" && text.starts_with("restart"))
}

/// A `host write: TEXT kind="KIND"` log line as (kind, text); `None` for any other line.
pub fn host_write(line: &str) -> Option<(&str, &str)> {
    let rest = line.split_once("host write: ")?.1;
    let (text, kind) = match rest.rsplit_once(" kind=") {
        Some((t, k)) => (t, k.trim_matches('"')),
        None => (rest, ""),
    };
    Some((kind, text.trim()))
}

/// The time of each disruptive host write ([`disruptive`]) among an agent's log `lines`.
pub fn disruptive_writes<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<f64> {
    lines
        .into_iter()
        .filter_map(|l| {
            let (kind, text) = host_write(l)?;
            disruptive(kind, text).then(|| log_time(l))?
        })
        .collect()
}
