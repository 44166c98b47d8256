//! Which GPU is which over time (issue 24): the ledger of what the agent last saw of each
//! GPU, matching the GPUs on the bus now to it, and the guard that never lets a change of the
//! host (a renumbering, a replacement, a GPU gone) move a GPU to another owner unasked.
//!
//! - `ledger.rs`: the stored record (`/var/lib/gpuplane/gpus.json`, and in status);
//! - `matching.rs`: same GPU, replaced in place, gone, new; identities remembered;
//! - `guard.rs`: the verdict the planner obeys (frozen slices, the ledger to write).
//!
//! The identity facts themselves are observed by the backends (`host/local/identity.rs`).
//! Pure: no I/O.

pub mod guard;
pub mod ledger;
pub mod matching;

pub use guard::{check, layout_hash, Stall, Terms, Verdict};
pub use ledger::{Ledger, LedgerGpu};

use gpuplane_crds::GpuPartitionSpec;
use sha2::{Digest, Sha256};

/// The hash of what decides GPU owners in a partition: each slice's name, selector, driver and
/// consumer (not its server policy: a tenant rule changed is no acknowledgement of new
/// hardware). 16 hex digits.
pub fn spec_hash(spec: &GpuPartitionSpec) -> String {
    let parts: Vec<serde_json::Value> = spec
        .slices
        .iter()
        .map(|s| serde_json::json!([s.name, s.gpus, s.driver, s.consumer]))
        .collect();
    let text = serde_json::to_string(&parts).unwrap_or_default();
    Sha256::digest(text.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests;
