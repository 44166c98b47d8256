//! Which GPU on the bus now is which GPU of the ledger.
//!
//! Two GPUs are the same when an identity both sides know agrees (PCIe Device Serial Number,
//! NVML UUID, board serial) and none disagrees. A ledger GPU that no identity finds is looked
//! for where it sat: the same physical slot, else (no slots on either side) the same topology
//! path, else (neither) the same address. Found there with an identity that disagrees, it was
//! replaced in place; found there with nothing to compare, it is taken to be the same GPU (the
//! best anyone can tell: emulated devices and hosts without slots know no more). Pure.

use crate::host::ledger::Ledger;
use crate::host::model::{GpuIdentity, PciDevice};
use std::collections::{BTreeMap, BTreeSet};

/// The ledger's GPUs against the GPUs on the bus.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matching {
    /// (ledger index, address now): the same physical GPU.
    pub same: Vec<(usize, String)>,
    /// (ledger index, address now): another GPU where this one sat (same slot, or path, or
    /// address, and an identity that disagrees).
    pub replaced: Vec<(usize, String)>,
    /// Ledger indices of GPUs not on the bus now.
    pub missing: Vec<usize>,
    /// Addresses of GPUs the ledger does not know.
    pub added: Vec<String>,
}

impl Matching {
    /// The ledger index of the GPU now at `addr`, if it is the same GPU.
    pub fn was(&self, addr: &str) -> Option<usize> {
        self.same.iter().find(|(_, a)| a == addr).map(|(i, _)| *i)
    }
}

/// The identities both sides could know, by kind.
fn strong(id: &GpuIdentity) -> [Option<&str>; 3] {
    [id.dsn.as_deref(), id.uuid.as_deref(), id.serial.as_deref()]
}

/// `Some(true)`: an identity both know agrees and none disagrees; `Some(false)`: one
/// disagrees; `None`: nothing to compare.
pub fn agree(a: &GpuIdentity, b: &GpuIdentity) -> Option<bool> {
    let mut seen = None;
    for (x, y) in strong(a).into_iter().zip(strong(b)) {
        if let (Some(x), Some(y)) = (x, y) {
            if x != y {
                return Some(false);
            }
            seen = Some(true);
        }
    }
    seen
}

/// Whether two GPUs sat in the same place: the slot when both name one, else the path when both
/// know it, else the address.
fn same_place(a: &GpuIdentity, a_addr: &str, b: &GpuIdentity, b_addr: &str) -> bool {
    match (&a.slot, &b.slot, &a.path, &b.path) {
        (Some(x), Some(y), _, _) => x == y,
        (None, None, Some(x), Some(y)) => x == y,
        (None, None, None, None) => a_addr == b_addr,
        // One side knows a slot or path the other does not: a different kind of host view
        // (the ledger of an older agent); the address is all they share.
        _ => a_addr == b_addr,
    }
}

/// Matches `ledger` against `observed` (the host's GPUs).
pub fn match_gpus(ledger: &Ledger, observed: &[&PciDevice]) -> Matching {
    let mut m = Matching::default();
    let mut taken: BTreeSet<usize> = BTreeSet::new();
    let mut found: BTreeMap<usize, String> = BTreeMap::new();
    // By identity.
    for (li, l) in ledger.gpus.iter().enumerate() {
        if let Some((oi, o)) = observed
            .iter()
            .enumerate()
            .find(|(oi, o)| !taken.contains(oi) && agree(&l.identity, &o.identity) == Some(true))
        {
            taken.insert(oi);
            found.insert(li, o.address.clone());
        }
    }
    // By place, for what identity did not find.
    for (li, l) in ledger.gpus.iter().enumerate() {
        if found.contains_key(&li) {
            continue;
        }
        let at = observed.iter().enumerate().find(|(oi, o)| {
            !taken.contains(oi) && same_place(&l.identity, &l.address, &o.identity, &o.address)
        });
        match at {
            Some((oi, o)) if agree(&l.identity, &o.identity) == Some(false) => {
                taken.insert(oi);
                m.replaced.push((li, o.address.clone()));
            }
            Some((oi, o)) => {
                taken.insert(oi);
                found.insert(li, o.address.clone());
            }
            None => m.missing.push(li),
        }
    }
    m.same = found.into_iter().collect();
    m.added = observed
        .iter()
        .enumerate()
        .filter(|(oi, _)| !taken.contains(oi))
        .map(|(_, o)| o.address.clone())
        .collect();
    m
}

/// Each GPU's identity as far as it is known: what was observed, and the UUID and serial the
/// ledger remembers for the same GPU when it cannot be read now (it is not on `nvidia`).
pub fn known_identities(
    ledger: Option<&Ledger>,
    observed: &[&PciDevice],
) -> BTreeMap<String, GpuIdentity> {
    let mut out: BTreeMap<String, GpuIdentity> = observed
        .iter()
        .map(|d| (d.address.clone(), d.identity.clone()))
        .collect();
    let Some(l) = ledger else {
        return out;
    };
    for (li, addr) in match_gpus(l, observed).same {
        let old = &l.gpus[li].identity;
        if let Some(id) = out.get_mut(&addr) {
            if id.uuid.is_none() {
                id.uuid = old.uuid.clone();
            }
            if id.serial.is_none() {
                id.serial = old.serial.clone();
            }
        }
    }
    out
}
