//! Prometheus service discovery of the SGLang servers the agent runs.
//!
//! SGLang serves `/metrics` on its API port with `--enable-metrics`, but it runs as a systemd
//! unit on a host or in an LXC container, not in a pod: no ServiceMonitor or pod annotation
//! finds it. The agent knows each one, so it lists them in the two formats Prometheus reads:
//! - `GET /sd/servers` on the metrics listener, for `http_sd_configs` (`metrics.rs`): status
//!   200, `Content-Type: application/json`, a JSON array of
//!   `{"targets": ["host:port"], "labels": {...}}`, `[]` when there is none, the whole list
//!   every time (Prometheus's HTTP SD contract);
//! - a `file_sd` file written by the standalone agent (`--file-sd`, same JSON), replaced
//!   atomically.
//!
//! Which servers, and where ([`select`]): those `Ready` in the latest reconcile whose running
//! unit has `--enable-metrics`, not rolled back, at the address the host side names. The list
//! is replaced as a whole after every reconcile, so a server that stops, fails or is rolled
//! back leaves it at the agent's next reconcile (a change of the objects or the host's units
//! starts one; otherwise the drift interval, 30 s by default, under Prometheus's default SD
//! refresh of 60 s).
//!
//! # Guarantees
//! At most [`MAX_TARGETS`] entries; every label value is one line of at most
//! [`MAX_LABEL_BYTES`] bytes with no control character ([`crate::text::sanitize`]); label
//! names are fixed here, never taken from a spec. The JSON is made by `serde_json`, so no
//! value can break out of its string.

pub mod select;

use std::collections::BTreeMap;

/// Most entries listed (a node runs a handful of servers; more is a bug or an attack).
pub const MAX_TARGETS: usize = 256;

/// Longest label value, in bytes (Kubernetes names are at most 253; served names are bounded
/// by validation, but a unit file the agent adopted is not).
pub const MAX_LABEL_BYTES: usize = 256;

/// One scrape target: `address:port` and its labels.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Target {
    pub targets: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

impl Target {
    /// A target at `address` (`10.0.0.5:30000`, `[fd00::5]:30000`) with `labels`, each value
    /// sanitized and bounded.
    pub fn new(address: String, labels: &[(&str, &str)]) -> Target {
        Target {
            targets: vec![crate::text::sanitize(&address, MAX_LABEL_BYTES)],
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), crate::text::sanitize(v, MAX_LABEL_BYTES)))
                .collect(),
        }
    }
}

/// The JSON both formats share: an array, `[]` when empty, at most [`MAX_TARGETS`] entries.
pub fn render(targets: &[Target]) -> String {
    let kept = &targets[..targets.len().min(MAX_TARGETS)];
    serde_json::to_string_pretty(kept).unwrap_or_else(|_| "[]".into())
}

#[cfg(test)]
mod tests;
