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
use std::borrow::Cow;
use std::collections::BTreeMap;

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

/// The observed GPUs by each value that can match them, so that matching a ledger of n GPUs
/// looks at the few GPUs that share a value with each entry instead of all n (a pairwise scan
/// made the planner quadratic in the GPUs). Lookups give indices into `observed`; a match
/// is still decided by `agree` and `same_place`, the lowest index first, as a scan would.
/// One sorted vector of (kind, value, index): kinds 0–2 the strong identities (DSN, UUID,
/// serial), 3 the slot, 4 the path of a GPU that names no slot, 5 the address.
struct Index<'o>(Vec<(u8, &'o str, usize)>);

impl<'o> Index<'o> {
    fn of(observed: &[&'o PciDevice]) -> Self {
        let mut v = Vec::with_capacity(observed.len() * 3);
        for (oi, o) in observed.iter().enumerate() {
            for (k, x) in strong(&o.identity).into_iter().enumerate() {
                if let Some(x) = x {
                    v.push((k as u8, x, oi));
                }
            }
            match (&o.identity.slot, &o.identity.path) {
                (Some(s), _) => v.push((3, s.as_str(), oi)),
                (None, Some(p)) => v.push((4, p.as_str(), oi)),
                (None, None) => {}
            }
            v.push((5, o.address.as_str(), oi));
        }
        v.sort_unstable();
        Index(v)
    }

    /// Pushes the indices filed under (`kind`, `value`) onto `out`.
    fn find(&self, kind: u8, value: &str, out: &mut Vec<usize>) {
        let from = self.0.partition_point(|e| (e.0, e.1) < (kind, value));
        out.extend(
            self.0[from..]
                .iter()
                .take_while(|e| e.0 == kind && e.1 == value)
                .map(|e| e.2),
        );
    }

    /// Indices that share an identity value with `id`, ascending.
    fn by_identity(&self, id: &GpuIdentity) -> Vec<usize> {
        let mut out = Vec::new();
        for (k, x) in strong(id).into_iter().enumerate() {
            if let Some(x) = x {
                self.find(k as u8, x, &mut out);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Indices that may sit in the same place as a GPU with `id` at `addr` (a superset of
    /// `same_place`'s answers), ascending.
    fn by_place(&self, id: &GpuIdentity, addr: &str) -> Vec<usize> {
        let mut out = Vec::new();
        match (&id.slot, &id.path) {
            (Some(s), _) => self.find(3, s, &mut out),
            (None, Some(p)) => self.find(4, p, &mut out),
            (None, None) => {}
        }
        self.find(5, addr, &mut out);
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// Matches `ledger` against `observed` (the host's GPUs).
///
/// Which GPUs are taken and what each ledger entry found are kept by index (the planner
/// matches every plan): an address is copied once, into the answer.
pub fn match_gpus(ledger: &Ledger, observed: &[&PciDevice]) -> Matching {
    let mut m = Matching::default();
    let mut taken = vec![false; observed.len()];
    // Ledger index → the observed index of the same GPU.
    let mut found: Vec<Option<usize>> = vec![None; ledger.gpus.len()];
    let ix = Index::of(observed);
    // By identity.
    for (li, l) in ledger.gpus.iter().enumerate() {
        if let Some(oi) = ix
            .by_identity(&l.identity)
            .into_iter()
            .find(|oi| !taken[*oi] && agree(&l.identity, &observed[*oi].identity) == Some(true))
        {
            taken[oi] = true;
            found[li] = Some(oi);
        }
    }
    // By place, for what identity did not find.
    for (li, l) in ledger.gpus.iter().enumerate() {
        if found[li].is_some() {
            continue;
        }
        let at = ix
            .by_place(&l.identity, &l.address)
            .into_iter()
            .map(|oi| (oi, observed[oi]))
            .find(|(oi, o)| {
                !taken[*oi] && same_place(&l.identity, &l.address, &o.identity, &o.address)
            });
        match at {
            Some((oi, o)) if agree(&l.identity, &o.identity) == Some(false) => {
                taken[oi] = true;
                m.replaced.push((li, o.address.clone()));
            }
            Some((oi, _)) => {
                taken[oi] = true;
                found[li] = Some(oi);
            }
            None => m.missing.push(li),
        }
    }
    m.same = found
        .iter()
        .enumerate()
        .filter_map(|(li, oi)| oi.map(|oi| (li, observed[oi].address.clone())))
        .collect();
    m.added = observed
        .iter()
        .zip(&taken)
        .filter(|(_, t)| !**t)
        .map(|(o, _)| o.address.clone())
        .collect();
    m
}

/// Each GPU's identity as far as it is known, by address: borrowed from the bus's view where
/// that is all there is to know, owned where the ledger adds what cannot be read now (a GPU on
/// `vfio-pci`: its UUID and serial). Built every plan (the layout guard's, the mappings'
/// notes), so a GPU read whole on the bus costs no copy.
pub type Known<'a> = BTreeMap<&'a str, Cow<'a, GpuIdentity>>;

/// Each GPU's identity as far as it is known: what was observed, and the UUID and serial the
/// ledger remembers for the same GPU when it cannot be read now (it is not on `nvidia`).
pub fn known_identities<'a>(ledger: Option<&Ledger>, observed: &[&'a PciDevice]) -> Known<'a> {
    let m = ledger.map(|l| match_gpus(l, observed));
    known_from(ledger.zip(m.as_ref()), observed)
}

/// [`known_identities`] with the ledger already matched to `observed` (the layout guard
/// matches once for both).
pub fn known_from<'a>(
    matched: Option<(&Ledger, &Matching)>,
    observed: &[&'a PciDevice],
) -> Known<'a> {
    let mut out: Known<'a> = observed
        .iter()
        .map(|d| (d.address.as_str(), Cow::Borrowed(&d.identity)))
        .collect();
    let Some((l, m)) = matched else {
        return out;
    };
    for (li, addr) in &m.same {
        let old = &l.gpus[*li].identity;
        let Some(id) = out.get_mut(addr.as_str()) else {
            continue;
        };
        let uuid = id.uuid.is_none() && old.uuid.is_some();
        let serial = id.serial.is_none() && old.serial.is_some();
        if uuid || serial {
            let id = id.to_mut();
            if uuid {
                id.uuid = old.uuid.clone();
            }
            if serial {
                id.serial = old.serial.clone();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
