//! Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` endpoints (hyper, through
//! [`crate::http::server`]), and the liveness listener apart from them ([`serve_health`]).
//!
//! # Liveness apart from `/metrics`
//! The metrics listener is on the pod network: anyone who reaches it can hold connections (at
//! most [`LIMITS`]`.max_per_peer` each). Were liveness probed there, any pod could get the agent
//! restarted. The chart probes liveness and readiness with `gpuplane healthz` (exec probes) on a
//! listener bound to 127.0.0.1 (`--health-addr`, `/healthz` and `/readyz`), which no other pod
//! reaches, so a NetworkPolicy on the metrics port need not admit the kubelet either.
//!
//! `/sd/servers` on the same listener lists the SGLang servers for Prometheus's
//! `http_sd_configs` (the body is computed by `discovery/`, set by each reconcile).
//!
//! Names users build on (dashboards, alerts in the chart):
//! - `gpuplane_resource_condition{kind,namespace,name,type,status,reason}` = 1 for each
//!   condition a resource has now (a changed status or reason replaces the series);
//! - `gpuplane_gpu_owner{node,pci_bus_id,slice,driver}` = 1 per GPU of the partition, with
//!   `pci_bus_id` spelt as DCGM/NVML spell it (`00000000:81:00.0`), so panels join
//!   dcgm-exporter's `DCGM_FI_*{pci_bus_id=...}` series;
//! - `gpuplane_gpu_health{node,pci_bus_id,slice,state}` = 1 per GPU of the partition, `state`
//!   its `status.gpus[].health` (Healthy, Suspect, Unhealthy, Lost), the alerts' input;
//! - `gpuplane_gpu_quarantined{node,pci_bus_id,slice,stage}` = 1 per GPU out of its slice,
//!   `stage` its quarantine's (`Quarantined`, `Reset`, `Escalated`: a person is needed);
//! - `gpuplane_build_info{version}` = 1; `process_*` of the agent process;
//! - reconciles, their latency, errors per reason, host writes, drift corrected, lease held;
//! - `gpuplane_watch_events_total{kind,watch}`: objects the API server sent this agent's
//!   watches (`watch` = `node` for the main watches, `unlabelled` for the stray watches, `pool`
//!   for the `GpuNodePool`s, which wake a member waiting for a slot): with per-node scoping
//!   another node's changes add nothing to it.

use crate::http::server::{accept_loop, reply, serve_connection, Limits, Reply};
use gpuplane_crds::condition::Condition;
use hyper::{Method, Request, StatusCode};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Scrapes served at once (4 from one peer: Prometheus scrapes over one connection, and no
/// other client can take every slot; 16 from one /24 or /64: eight aliases of one network hold
/// half at most), and how long one may take.
pub const LIMITS: Limits = Limits {
    max_connections: 32,
    max_per_peer: 4,
    max_per_prefix: 16,
    reserved: 0,
    header_read: Duration::from_secs(5),
    connection: Duration::from_secs(30),
};

/// Label values of one condition series: kind, namespace, name, type, status, reason.
type ConditionLabels = [String; 6];
/// A resource: kind, namespace, name.
type SeriesKey = (String, String, String);

/// The closed set of `gpuplane_reconcile_errors_total{category}`: what kind of failure, not the
/// condition's reason (those are open-ended and live in `gpuplane_resource_condition`), so the
/// series stay few and an alert can name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCategory {
    /// The Kubernetes API failed a call.
    Api,
    /// Adding or removing a finalizer failed.
    Finalizer,
    /// The host could not be read, or a restore did not finish.
    Host,
    /// A bug of the agent: a panic, a lost task.
    Internal,
    /// A spec failed validation.
    InvalidSpec,
    /// The younger of two claims.
    Conflict,
    /// The planner refused to go on (a blocker: a GPU in use, an IOMMU mismatch, ...).
    Blocked,
    /// A host step failed.
    ApplyFailed,
}

impl ErrorCategory {
    /// Every category, in the order of the enum.
    pub const ALL: [ErrorCategory; 8] = [
        ErrorCategory::Api,
        ErrorCategory::Finalizer,
        ErrorCategory::Host,
        ErrorCategory::Internal,
        ErrorCategory::InvalidSpec,
        ErrorCategory::Conflict,
        ErrorCategory::Blocked,
        ErrorCategory::ApplyFailed,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::Api => "api",
            ErrorCategory::Finalizer => "finalizer",
            ErrorCategory::Host => "host",
            ErrorCategory::Internal => "internal",
            ErrorCategory::InvalidSpec => "invalid_spec",
            ErrorCategory::Conflict => "conflict",
            ErrorCategory::Blocked => "blocked",
            ErrorCategory::ApplyFailed => "apply_failed",
        }
    }
}

/// The agent's metrics.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// `process_*` (unprefixed, as every Prometheus client names them).
    process: Registry,
    pub reconciles: IntCounterVec,
    pub reconcile_duration: HistogramVec,
    errors: IntCounterVec,
    pub host_writes: IntCounterVec,
    pub drifts_corrected: IntCounter,
    pub gpus: IntGaugeVec,
    pub gpu_owner: IntGaugeVec,
    pub gpu_health: IntGaugeVec,
    pub gpu_quarantined: IntGaugeVec,
    pub servers_ready: IntGauge,
    pub leader: IntGauge,
    pub conditions: IntGaugeVec,
    pub watch_events: IntCounterVec,
    /// The body of `/sd/servers` (Prometheus HTTP service discovery of the SGLang servers,
    /// `discovery/`): replaced whole by each reconcile, `[]` until the first.
    server_sd: Arc<Mutex<Arc<str>>>,
    /// The bearer token `/sd/servers` requires (`--sd-token-file`); `None`: none.
    sd_token: Arc<Mutex<Option<Arc<str>>>>,
    /// Disruption-slot answers by pool: `granted`, `denied` (a wait), `handed_on` (a slot this
    /// agent gave back and handed to the next member in line in the same write).
    pub pool_slots: IntCounterVec,
    /// Pool status writes that lost a race (409) and were decided again.
    pub pool_write_conflicts: IntCounter,
    /// The members of this agent's pool by state, as this agent last wrote or read the pool.
    pub pool_members: IntGaugeVec,
    /// 1 while this agent's pool is paused, by why: `MemberFailed` (`status.failure`) or
    /// `Paused` (`spec.paused`); 0 otherwise.
    pub pool_paused: IntGaugeVec,
    /// The condition series each resource has now, to remove them when they change.
    shown: Arc<Mutex<BTreeMap<SeriesKey, Vec<ConditionLabels>>>>,
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new_custom(Some("gpuplane".into()), None)?;
        let counter = |n: &str, h: &str, l: &[&str]| IntCounterVec::new(Opts::new(n, h), l);
        let gauge = |n: &str, h: &str, l: &[&str]| IntGaugeVec::new(Opts::new(n, h), l);
        let m = Metrics {
            process: process_registry()?,
            reconciles: counter("reconciles_total", "Reconciles by resource kind", &["kind"])?,
            reconcile_duration: HistogramVec::new(
                HistogramOpts::new("reconcile_duration_seconds", "Time per reconcile")
                    .buckets(vec![0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0]),
                &["kind"],
            )?,
            errors: counter(
                "reconcile_errors_total",
                "Failed or blocked reconciles by category (a closed set; the condition reasons are in gpuplane_resource_condition)",
                &["category"],
            )?,
            host_writes: counter("host_writes_total", "Host writes by step kind", &["kind"])?,
            drifts_corrected: IntCounter::new(
                "drifts_corrected_total",
                "Reconciles that changed a host that had been converged",
            )?,
            gpus: gauge(
                "gpus",
                "GPUs by owning slice and bound driver",
                &["owner", "driver"],
            )?,
            gpu_owner: gauge(
                "gpu_owner",
                "1 per GPU of the partition: its slice and bound driver, by DCGM's pci_bus_id",
                &["node", "pci_bus_id", "slice", "driver"],
            )?,
            gpu_health: gauge(
                "gpu_health",
                "1 per GPU of the partition, labelled with its health (Healthy, Suspect, Unhealthy, Lost: status.gpus[].health), by DCGM's pci_bus_id",
                &["node", "pci_bus_id", "slice", "state"],
            )?,
            gpu_quarantined: gauge(
                "gpu_quarantined",
                "1 per GPU out of its slice for a fault (spec.health), labelled with its quarantine's stage (Quarantined, Reset, Escalated: status.gpus[].quarantine), by DCGM's pci_bus_id",
                &["node", "pci_bus_id", "slice", "stage"],
            )?,
            servers_ready: IntGauge::new("servers_ready", "InferenceServers that are Ready")?,
            leader: IntGauge::new("leader", "1 while this agent holds its node's lease")?,
            conditions: gauge(
                "resource_condition",
                "1 for each status condition a resource has now",
                &["kind", "namespace", "name", "type", "status", "reason"],
            )?,
            watch_events: counter(
                "watch_events_total",
                "Objects received by the agent's watches (added, modified, deleted, listed)",
                &["kind", "watch"],
            )?,
            pool_slots: counter(
                "pool_slot_requests_total",
                "Disruption-slot answers to this agent by pool and answer (granted, denied: a wait; handed_on: a slot given back went to the next member in line)",
                &["pool", "answer"],
            )?,
            pool_write_conflicts: IntCounter::new(
                "pool_write_conflicts_total",
                "Pool status writes that lost a race with another agent's (409) and were decided again",
            )?,
            pool_members: gauge(
                "pool_members",
                "Members of this agent's pool by state (Updated, Waiting, Updating, Degraded, Pending), as last written",
                &["pool", "state"],
            )?,
            pool_paused: gauge(
                "pool_paused",
                "1 while this agent's pool is paused, by reason: MemberFailed (a member failed; a person clears status.failure) or Paused (spec.paused)",
                &["pool", "reason"],
            )?,
            shown: Arc::new(Mutex::new(BTreeMap::new())),
            server_sd: Arc::new(Mutex::new(Arc::from("[]"))),
            sd_token: Arc::new(Mutex::new(None)),
            registry,
        };
        m.register_all()?;
        Ok(m)
    }

    /// Registers every metric, and `build_info` with the agent's version.
    fn register_all(&self) -> Result<(), prometheus::Error> {
        let build = IntGaugeVec::new(
            Opts::new("build_info", "1, labelled with the agent's version"),
            &["version"],
        )?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        let m = self;
        for c in [
            Box::new(m.reconciles.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.reconcile_duration.clone()),
            Box::new(m.errors.clone()),
            Box::new(m.host_writes.clone()),
            Box::new(m.drifts_corrected.clone()),
            Box::new(m.gpus.clone()),
            Box::new(m.gpu_owner.clone()),
            Box::new(m.gpu_health.clone()),
            Box::new(m.gpu_quarantined.clone()),
            Box::new(m.servers_ready.clone()),
            Box::new(m.leader.clone()),
            Box::new(m.conditions.clone()),
            Box::new(m.watch_events.clone()),
            Box::new(m.pool_slots.clone()),
            Box::new(m.pool_write_conflicts.clone()),
            Box::new(m.pool_members.clone()),
            Box::new(m.pool_paused.clone()),
            Box::new(build),
        ] {
            m.registry.register(c)?;
        }
        Ok(())
    }

    /// Shows `conditions` as the conditions of `kind` `namespace`/`name` (namespace "" for a
    /// cluster-scoped resource), replacing the series it had.
    /// Counts one failed or blocked reconcile of `category`.
    pub fn count_error(&self, category: ErrorCategory) {
        self.errors.with_label_values(&[category.as_str()]).inc();
    }

    pub fn set_conditions(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        conditions: &[Condition],
    ) {
        let now: Vec<ConditionLabels> = conditions
            .iter()
            .map(|c| [kind, namespace, name, &c.type_, &c.status, &c.reason].map(str::to_string))
            .collect();
        self.replace_conditions(kind, namespace, name, now);
    }

    /// Removes every condition series of a resource that is gone.
    pub fn forget(&self, kind: &str, namespace: &str, name: &str) {
        self.replace_conditions(kind, namespace, name, vec![]);
    }

    fn replace_conditions(&self, kind: &str, ns: &str, name: &str, now: Vec<ConditionLabels>) {
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        let key = (kind.to_string(), ns.to_string(), name.to_string());
        for old in shown.remove(&key).unwrap_or_default() {
            if !now.contains(&old) {
                let l: Vec<&str> = old.iter().map(String::as_str).collect();
                let _ = self.conditions.remove_label_values(&l);
            }
        }
        for l in &now {
            let l: Vec<&str> = l.iter().map(String::as_str).collect();
            self.conditions.with_label_values(&l).set(1);
        }
        if !now.is_empty() {
            shown.insert(key, now);
        }
    }

    /// Replaces what `/sd/servers` serves: `json`, the whole list the latest reconcile computed
    /// (`discovery::render`, bounded there).
    pub fn set_server_sd(&self, json: String) {
        *self.server_sd.lock().unwrap_or_else(|p| p.into_inner()) = Arc::from(json);
    }

    /// Requires `token` as a bearer token on `/sd/servers` (it lists every tenant's servers).
    pub fn set_sd_token(&self, token: Option<String>) {
        *self.sd_token.lock().unwrap_or_else(|p| p.into_inner()) = token.map(Arc::from);
    }

    /// Whether `header` (the request's `Authorization`) carries the token `/sd/servers`
    /// requires; `true` when none is required. Compared in constant time.
    fn sd_allowed(&self, header: Option<&[u8]>) -> bool {
        let token = self
            .sd_token
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(token) = token else {
            return true;
        };
        let Some(given) = header.and_then(|h| h.strip_prefix(b"Bearer ")) else {
            return false;
        };
        let want = token.as_bytes();
        given.len() == want.len()
            && given
                .iter()
                .zip(want)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// What `/sd/servers` serves now.
    pub fn server_sd(&self) -> Arc<str> {
        self.server_sd
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut families = self.registry.gather();
        families.extend(self.process.gather());
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&families, &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// A registry holding the process collector (Linux; empty elsewhere).
fn process_registry() -> Result<Registry, prometheus::Error> {
    let r = Registry::new();
    #[cfg(target_os = "linux")]
    r.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    Ok(r)
}

/// A PCI address as NVML and DCGM spell it: an 8-digit domain, upper-case hex
/// (`0000:c1:00.0` → `00000000:C1:00.0`).
pub fn dcgm_bus_id(address: &str) -> String {
    let upper = address.to_ascii_uppercase();
    match upper.split_once(':') {
        Some((domain, rest)) if domain.len() <= 8 => format!("{domain:0>8}:{rest}"),
        _ => upper,
    }
}

/// Binds `addr` and serves `/metrics`, `/healthz` (the process answers) and `/readyz` (the API
/// server was reached) until the process ends.
pub async fn serve(addr: String, metrics: Metrics, ready: Arc<AtomicBool>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    tracing::info!("serving /metrics, /healthz, /readyz on {addr}");
    serve_on(listener, metrics, ready).await;
    Ok(())
}

/// [`serve`] on a bound listener.
pub async fn serve_on(listener: tokio::net::TcpListener, metrics: Metrics, ready: Arc<AtomicBool>) {
    accept_loop(listener, LIMITS, vec![], move |tcp, _| {
        let (m, r) = (metrics.clone(), ready.clone());
        serve_connection(tcp, move |req| answer(req, m.clone(), r.clone()), LIMITS)
    })
    .await
}

/// The liveness listener's bounds: only local probes reach it.
const HEALTH_LIMITS: Limits = Limits {
    max_connections: 4,
    max_per_peer: 4,
    max_per_prefix: 4,
    reserved: 0,
    header_read: Duration::from_secs(5),
    connection: Duration::from_secs(10),
};

/// Binds `addr` (127.0.0.1:PORT in the chart) and serves `/healthz` and `/readyz` only, apart
/// from the metrics listener, until the process ends.
pub async fn serve_health(addr: String, ready: Arc<AtomicBool>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    tracing::info!("serving /healthz, /readyz on {addr}");
    serve_health_on(listener, ready).await;
    Ok(())
}

/// [`serve_health`] on a bound listener.
pub async fn serve_health_on(listener: tokio::net::TcpListener, ready: Arc<AtomicBool>) {
    accept_loop(listener, HEALTH_LIMITS, vec![], move |tcp, _| {
        let r = ready.clone();
        serve_connection(tcp, move |req| health(req, r.clone()), HEALTH_LIMITS)
    })
    .await
}

async fn health(
    req: Request<hyper::body::Incoming>,
    ready: Arc<AtomicBool>,
) -> Result<Reply, std::convert::Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n"));
    }
    Ok(probe(req.uri().path(), &ready))
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Prometheus HTTP service discovery of the SGLang servers this agent runs (`discovery/`): a
/// JSON array of `{"targets": ["host:port"], "labels": {...}}`, the whole list every time.
pub const SERVER_SD_PATH: &str = "/sd/servers";

/// `/healthz` (the process answers), `/readyz` (the API server was reached), or 404.
fn probe(path: &str, ready: &AtomicBool) -> Reply {
    match path {
        "/healthz" => reply(StatusCode::OK, TEXT, "ok\n"),
        "/readyz" if ready.load(Ordering::SeqCst) => reply(StatusCode::OK, TEXT, "ok\n"),
        "/readyz" => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            "the API server has not been reached yet\n",
        ),
        _ => reply(StatusCode::NOT_FOUND, TEXT, "not found\n"),
    }
}

/// `gpuplane healthz`: whether `path` (`/healthz`, `/readyz`) of the listener at `addr`
/// (host:port) answers 200.
pub fn probe_health(addr: &str, path: &str) -> Result<(), String> {
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| format!("{addr}: not host:port"))?;
    match crate::http::client::get(host, port, path, Duration::from_secs(3)) {
        Ok((200, _)) => Ok(()),
        Ok((code, body)) => Err(format!("{addr}{path} answered {code}: {}", body.trim())),
        Err(e) => Err(format!("{addr}{path}: {e}")),
    }
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    metrics: Metrics,
    ready: Arc<AtomicBool>,
) -> Result<Reply, std::convert::Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n"));
    }
    Ok(match req.uri().path() {
        "/metrics" => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        SERVER_SD_PATH => {
            let auth = req
                .headers()
                .get(hyper::header::AUTHORIZATION)
                .map(|v| v.as_bytes());
            if metrics.sd_allowed(auth) {
                reply(
                    StatusCode::OK,
                    "application/json",
                    metrics.server_sd().to_string(),
                )
            } else {
                let mut r = reply(
                    StatusCode::UNAUTHORIZED,
                    TEXT,
                    "a bearer token is required (--sd-token-file)\n",
                );
                r.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    hyper::header::HeaderValue::from_static("Bearer"),
                );
                r
            }
        }
        path => probe(path, &ready),
    })
}

#[cfg(test)]
mod tests;
