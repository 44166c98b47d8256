//! Running the P2P correctness probe and caching its result.
//!
//! The probe (`controller/src/p2p/probe.py`, shipped inside the binary) copies random data
//! between every GPU pair and compares it; it runs with the server's own interpreter (one the
//! slice's admin allowed) where the server runs (the host, or the container through
//! `pct exec`), read from stdin. The result is
//! cached in `<state_dir>/p2p-cache.json`, keyed by the GPUs' bindings and the IOMMU state, so a
//! change to either invalidates it.

use super::error::LocalError;
use super::LocalHost;
use crate::host::model::{Location, P2pProbe};
use std::path::Path;

/// The probe script.
pub const PROBE_PY: &str = include_str!("../../p2p/probe.py");

const CACHE: &str = "p2p-cache.json";

/// Cached probe results.
pub fn load_cache(state_dir: &Path) -> Vec<P2pProbe> {
    std::fs::read_to_string(state_dir.join(CACHE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn store(state_dir: &Path, probe: P2pProbe) -> Result<(), LocalError> {
    let mut all = load_cache(state_dir);
    all.retain(|p| !p.is_for(&probe.gpus, probe.location));
    all.push(probe);
    std::fs::create_dir_all(state_dir)
        .map_err(|e| LocalError::io("cannot create", state_dir, e))?;
    let text = serde_json::to_string_pretty(&all).map_err(|e| LocalError::Probe(e.to_string()))?;
    super::files::write_atomic(&state_dir.join(CACHE), &text).map(|_| ())
}

/// Interprets the probe's JSON: the failing pairs as `a<->b` of PCI addresses (or an error).
pub fn failing_pairs(json: &str, gpus: &[String]) -> Result<Vec<String>, String> {
    let v: serde_json::Value =
        serde_json::from_str(json.trim()).map_err(|e| format!("probe output is not JSON: {e}"))?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        return Err(format!("probe failed: {e}"));
    }
    let name = |idx: &serde_json::Value, pci: &serde_json::Value| -> String {
        pci.as_str()
            .map(str::to_string)
            .or_else(|| idx.as_u64().and_then(|i| gpus.get(i as usize).cloned()))
            .unwrap_or_else(|| "?".into())
    };
    let mut out = Vec::new();
    for p in v["pairs"].as_array().ok_or("probe output has no pairs")? {
        if p["ok"] != serde_json::Value::Bool(true) {
            let mut ends = [
                name(&p["src"], &p["src_pci"]),
                name(&p["dst"], &p["dst_pci"]),
            ];
            ends.sort();
            let pair = format!("{}<->{}", ends[0], ends[1]);
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
    }
    Ok(out)
}

impl LocalHost {
    pub(super) fn run_probe(
        &mut self,
        loc: Location,
        python: &str,
        user: Option<&str>,
        gpus: &[String],
        indices: &[u32],
    ) -> Result<String, LocalError> {
        self.interpreter_is_trusted(loc, python, user)
            .map_err(LocalError::Probe)?;
        let visible = indices
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        // The script goes in through stdin (`python -`): no file in a shared or world-writable
        // place that another user of the host or the container could replace before it runs.
        // It runs as the unit's user, isolated (`run_as.rs`).
        let env_visible = format!("CUDA_VISIBLE_DEVICES={visible}");
        let mut argv: Vec<String> = ["env", "CUDA_DEVICE_ORDER=PCI_BUS_ID", &env_visible, python]
            .iter()
            .map(|s| s.to_string())
            .collect();
        argv.extend(super::run_as::ISOLATED.map(String::from));
        argv.push("-".into());
        let argv = super::run_as::argv(user, &self.tools.runuser, argv);
        let argv = match loc {
            Location::Host => argv,
            Location::Container(v) => {
                let mut a = vec![
                    self.tools.pct.clone(),
                    "exec".into(),
                    v.to_string(),
                    "--".into(),
                ];
                a.extend(argv);
                a
            }
        };
        let out =
            super::exec::run_with_input(&argv, Some(PROBE_PY.as_bytes()), self.command_timeout);
        let out = out?;
        let failing = failing_pairs(&out.stdout, gpus)
            .map_err(|e| LocalError::Probe(format!("{e}; stderr: {}", out.stderr.trim())))?;
        let st = self.observe_state()?;
        let n = gpus.len() * gpus.len().saturating_sub(1) / 2;
        let detail = if failing.is_empty() {
            format!("all {n} pairs copied correctly")
        } else {
            format!(
                "{} of {n} pairs returned corrupted data: {}",
                failing.len(),
                failing.join(", ")
            )
        };
        store(
            &self.state_dir,
            P2pProbe {
                gpus: gpus.to_vec(),
                key: st.p2p_key(gpus),
                failing_pairs: failing,
                location: Some(loc),
            },
        )?;
        Ok(detail)
    }
}
