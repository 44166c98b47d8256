//! Which GPU is which over time (issue 24). The pieces, by where they live:
//!
//! - the identity facts are observed by the backends (`host/local/identity.rs`, the twin's
//!   description), into `host::model::GpuIdentity`;
//! - the ledger, the stored record of what the agent last saw (`/var/lib/gpuplane/gpus.json`,
//!   and in status), is host state: `host/ledger.rs`;
//! - here: matching the GPUs on the bus to the ledger (`matching.rs`: same GPU, replaced in
//!   place, gone, new; identities remembered), the spec hash and the layout hash, and the terms
//!   a partition sets (`Terms`), and the identity a PCI mapping entry names (`mapping_note.rs`);
//! - the guard that never lets a change of the host (a renumbering, a replacement, a GPU gone)
//!   move a GPU to another owner unasked is the planner's first decision:
//!   `plan/layout_guard.rs`.
//!
//! Pure: no I/O.

pub mod mapping_note;
pub mod matching;

use crate::host::model::PciDevice;

use gpuplane_crds::GpuPartitionSpec;
use sha2::{Digest, Sha256};

/// The annotation that acknowledges a layout: its value is the layout hash.
pub const ACCEPT_ANNOTATION: &str = "gpuplane.dev/accept-layout";
/// The annotation that returns a quarantined GPU to its slice: its value is the quarantine's
/// evidence hash (`status.gpus[].quarantine.hash`).
pub const ACCEPT_HEALTH_ANNOTATION: &str = "gpuplane.dev/accept-health";
/// The annotation that lets a GPU of unknown identity go to a VM.
pub const UNVERIFIED_ANNOTATION: &str = "gpuplane.dev/allow-unverified-gpus";

/// The length of a [`layout_hash`]: 12 lower-case hex digits.
pub const LAYOUT_HASH_LEN: usize = 12;

/// Whether `s` has the form of a [`layout_hash`] (what [`ACCEPT_ANNOTATION`] takes): exactly
/// [`LAYOUT_HASH_LEN`] lower-case hex digits.
pub fn is_layout_hash(s: &str) -> bool {
    s.len() == LAYOUT_HASH_LEN
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the layout guard needs beyond the resolved slices (from the partition object).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Terms {
    /// [`spec_hash`] of the partition.
    pub spec_hash: String,
    /// The vendor whose display devices are the host's GPUs.
    pub gpu_vendor: String,
    /// The `accept-layout` annotation's value.
    pub accept_layout: Option<String>,
    /// `allow-unverified-gpus: "true"`.
    pub allow_unverified: bool,
    /// GPU address → the slices whose selectors all pick it because the host moved it (set by
    /// resolution only under a standing ledger of the same spec, unacknowledged): the guard
    /// stalls every one of them.
    pub contested: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    /// `spec.health`: which sick GPUs leave their slice, and whether the agent resets them
    /// (`health/quarantine.rs`, the guard's sibling: both decide which GPU serves which slice).
    pub health: gpuplane_crds::HealthPolicy,
    /// The `accept-health` annotation's value (a quarantine's evidence hash).
    pub accept_health: Option<String>,
    /// The pass's time (RFC 3339), for the records the planner writes (a quarantine's
    /// `since`); set by the pass (`pass::Pass::stamp`), `None` in a plan made without one.
    pub now: Option<String>,
}

/// The hash a person writes into `accept-layout`: of the GPUs on the bus now (address, model,
/// NUMA node, slot, path and the identities observed), 12 hex digits.
pub fn layout_hash(observed: &[&PciDevice]) -> String {
    let mut h = Sha256::new();
    for d in observed {
        let i = &d.identity;
        let o = |x: &Option<String>| x.clone().unwrap_or_default();
        h.update(format!(
            "{}|{}:{}|{}|{}|{}|{}|{}|{}\n",
            d.address,
            d.vendor,
            d.device,
            d.numa_node,
            o(&i.slot),
            o(&i.path),
            o(&i.dsn),
            o(&i.uuid),
            o(&i.serial)
        ));
    }
    h.finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

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
