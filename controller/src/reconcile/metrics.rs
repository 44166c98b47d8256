//! Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` endpoints.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The agent's metrics.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    pub reconciles: IntCounterVec,
    pub reconcile_duration: HistogramVec,
    pub errors: IntCounterVec,
    pub host_writes: IntCounterVec,
    pub drifts_corrected: IntCounter,
    pub gpus: IntGaugeVec,
    pub servers_ready: IntGauge,
    pub leader: IntGauge,
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new_custom(Some("gpuplane".into()), None)?;
        let reconciles = IntCounterVec::new(
            Opts::new("reconciles_total", "Reconciles by resource kind"),
            &["kind"],
        )?;
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new("reconcile_duration_seconds", "Time per reconcile")
                .buckets(vec![0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0]),
            &["kind"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                "reconcile_errors_total",
                "Failed or blocked reconciles by reason",
            ),
            &["reason"],
        )?;
        let host_writes = IntCounterVec::new(
            Opts::new("host_writes_total", "Host writes by step kind"),
            &["kind"],
        )?;
        let drifts_corrected = IntCounter::new(
            "drifts_corrected_total",
            "Reconciles that changed a host that had been converged",
        )?;
        let gpus = IntGaugeVec::new(
            Opts::new("gpus", "GPUs by owning slice and bound driver"),
            &["owner", "driver"],
        )?;
        let servers_ready = IntGauge::new("servers_ready", "InferenceServers that are Ready")?;
        let leader = IntGauge::new("leader", "1 while this agent holds its node's lease")?;
        for c in [
            Box::new(reconciles.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(reconcile_duration.clone()),
            Box::new(errors.clone()),
            Box::new(host_writes.clone()),
            Box::new(drifts_corrected.clone()),
            Box::new(gpus.clone()),
            Box::new(servers_ready.clone()),
            Box::new(leader.clone()),
        ] {
            registry.register(c)?;
        }
        Ok(Metrics {
            registry,
            reconciles,
            reconcile_duration,
            errors,
            host_writes,
            drifts_corrected,
            gpus,
            servers_ready,
            leader,
        })
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// Serves `/metrics`, `/healthz` (the process answers) and `/readyz` (the API server was reached
/// recently) on `addr`. A deliberately small HTTP/1.0-style server: one request per connection.
pub async fn serve(addr: String, metrics: Metrics, ready: Arc<AtomicBool>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    tracing::info!("serving /metrics, /healthz, /readyz on {addr}");
    loop {
        let (mut sock, _) = listener.accept().await?;
        let metrics = metrics.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            // Read until the end of the request head (it may come in pieces), at most 16 KiB.
            let mut buf = Vec::new();
            let mut chunk = [0u8; 2048];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
                match tokio::time::timeout(std::time::Duration::from_secs(5), sock.read(&mut chunk))
                    .await
                {
                    Ok(Ok(0)) => break,
                    Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
                    _ => return,
                }
            }
            let req = String::from_utf8_lossy(&buf);
            let path = req.split_whitespace().nth(1).unwrap_or("/");
            let (code, body) = match path {
                "/metrics" => ("200 OK", metrics.render()),
                "/healthz" => ("200 OK", "ok\n".to_string()),
                "/readyz" if ready.load(Ordering::SeqCst) => ("200 OK", "ok\n".to_string()),
                "/readyz" => (
                    "503 Service Unavailable",
                    "the API server has not been reached yet\n".to_string(),
                ),
                _ => ("404 Not Found", "not found\n".to_string()),
            };
            let resp = format!(
                "HTTP/1.1 {code}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
        });
    }
}
