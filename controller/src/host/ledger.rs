//! The GPU ledger: what the agent last saw of each GPU (its identity, where it sat, which slice
//! owned it), kept in its state directory (`/var/lib/gpuplane/gpus.json`) and in status.
//!
//! Why: a GPU on `vfio-pci` cannot tell NVML its UUID, and an address is not an identity (a
//! firmware update renumbers the buses, a replaced GPU takes its predecessor's address). The
//! ledger is the memory that lets the layout guard (`plan/layout_guard.rs`, with the matching of
//! `layout/matching.rs`) tell "the same GPU at a new address"
//! from "another GPU at the old address", and so never hand a GPU to a new owner silently.
//!
//! Written only through the host door (`Step::WriteLedger`), atomically like every host write.

use crate::host::identity::{describe, GpuIdentity};
use serde::{Deserialize, Serialize};

/// The file under the agent's state directory.
pub const FILE: &str = "gpus.json";

/// The most GPUs a ledger keeps (a host has at most a few dozen; the file is untrusted input).
pub const MAX_GPUS: usize = 256;

/// The ledger as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    /// The partition whose owners these are.
    pub partition: String,
    /// `layout::spec_hash` of the partition's slices the owners were decided under: a spec
    /// change is an acknowledgement.
    pub spec_hash: String,
    /// Every GPU of the host, by address.
    #[serde(default)]
    pub gpus: Vec<LedgerGpu>,
}

/// One GPU as last seen.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerGpu {
    /// Where it was (`0000:41:00.0`).
    pub address: String,
    /// `vendor:device`.
    #[serde(default)]
    pub id: String,
    #[serde(default = "minus_one")]
    pub numa_node: i32,
    /// Its identity: what was observed, and the UUID/serial remembered from when it was on `nvidia`.
    #[serde(default, flatten)]
    pub identity: GpuIdentity,
    /// The slice that owned it; `None`: in no slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Not on the bus when the ledger was written (kept after an acknowledgement, so its slice
    /// is not stalled again for the same loss; a GPU that comes back is matched to it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
    /// Took another GPU's place, or appeared, and has not been seen on `nvidia` since: its own
    /// identity (UUID) is unknown, so it goes to no VM until it has been (or the admin allows it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unverified: bool,
    /// Out of its slice for a fault (`health/quarantine.rs`): kept here because the kernel log
    /// that showed the fault rotates, and a restarted agent must not hand the GPU back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<gpuplane_crds::GpuQuarantine>,
    /// The evidence hash last accepted (a person's `accept-health`, or the proof after a
    /// reset): that evidence quarantines the GPU no more; a new fault changes the hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_health: Option<String>,
    /// Resets the agent made of this GPU since a person last accepted it: a fault that returns
    /// after one escalates instead of being reset again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resets: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn minus_one() -> i32 {
    -1
}

impl LedgerGpu {
    /// How a person tells this GPU: its slot, else its serials, else its address.
    pub fn describe(&self) -> String {
        describe(&self.identity, &self.address)
    }
}

impl Ledger {
    /// Parses the stored file; `None` when it is not a ledger (a person is told by the caller).
    pub fn parse(text: &str) -> Option<Ledger> {
        let mut l: Ledger = serde_json::from_str(text).ok()?;
        l.gpus.truncate(MAX_GPUS);
        Some(l)
    }

    /// The text stored: pretty JSON, one stable order (by address).
    pub fn render(&self) -> String {
        let mut l = self.clone();
        l.gpus.sort_by(stored_cmp);
        serde_json::to_string_pretty(&l).unwrap_or_default() + "\n"
    }

    /// Whether `self` stores as the same text as `other` (`render`), without rendering either
    /// where their GPUs are equal in the stored order (every reconcile asks; a ledger whose
    /// entries differ is rendered and compared as text, so a field the text does not keep
    /// cannot make two equal files look different).
    pub fn same_stored(&self, other: &Ledger) -> bool {
        let equal = self.partition == other.partition
            && self.spec_hash == other.spec_hash
            && stored_order(self) == stored_order(other);
        equal || self.render() == other.render()
    }

    /// This ledger with the quarantine of the GPU at `address` escalated because its reset
    /// failed (`why`: what the kernel said): what a reset step stores instead of the ledger it
    /// carries when the kernel refuses the reset, so the next plan escalates instead of trying
    /// again (both backends; the one piece of a record a backend writes).
    pub fn with_reset_failed(&self, address: &str, why: &str) -> Ledger {
        let mut l = self.clone();
        if let Some(q) = l
            .gpus
            .iter_mut()
            .filter(|g| g.address == address && !g.missing)
            .find_map(|g| g.quarantine.as_mut())
        {
            q.stage = gpuplane_crds::QuarantineStage::Escalated;
            q.evidence.insert(
                0,
                crate::text::sanitize(&format!("its reset failed: {why}"), 240),
            );
            q.evidence.truncate(4);
        }
        l
    }
}

/// The order of the stored file: on the bus first, then by address.
fn stored_cmp(a: &LedgerGpu, b: &LedgerGpu) -> std::cmp::Ordering {
    (a.missing, &a.address).cmp(&(b.missing, &b.address))
}

fn stored_order(l: &Ledger) -> Vec<&LedgerGpu> {
    let mut v: Vec<&LedgerGpu> = l.gpus.iter().collect();
    v.sort_by(|a, b| stored_cmp(a, b));
    v
}
