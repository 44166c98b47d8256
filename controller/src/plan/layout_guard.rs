//! The guard: never move a GPU between owners unless the spec asked for it.
//!
//! Compares the owners the resolved spec gives the GPUs on the bus now with the owners the
//! ledger remembers for the same physical GPUs (`matching.rs`). Under an unchanged spec (the
//! ledger's spec hash is the spec's), any difference comes from the host, not from a person: a
//! renumbering under an `addresses` or `numaNode` selector, a GPU replaced in place, a GPU
//! gone, a new GPU a `count` slice would take. Then every slice involved is frozen: the planner
//! plans nothing for it (its GPUs, its consumer, its servers), and the partition is `Stalled`
//! with `HostLayoutChanged`, `GpuReplaced` or `GpuMissing` and the table of old → new. The
//! other slices keep converging and serving.
//!
//! A person acknowledges by changing the spec, or by annotating the partition
//! `gpuplane.dev/accept-layout: <hash>` with the layout hash the message prints (the hash of
//! the GPUs on the bus now, so an acknowledgement never covers a later, different change).
//!
//! A GPU that replaced another in place (or appeared) and whose UUID is unknown goes to no VM
//! until it has been seen on `nvidia` (the agent binds it there first, and the ledger records
//! its UUID), unless the partition is annotated `gpuplane.dev/allow-unverified-gpus: "true"`.
//! Pure.

use crate::desired::DesiredPartition;
use crate::host::ledger::{Ledger, LedgerGpu};
use crate::host::model::{GpuIdentity, HostState, PciDevice};
use crate::layout::matching::{known_from, match_gpus, Known, Matching};
use crate::layout::{layout_hash, Terms, ACCEPT_ANNOTATION, UNVERIFIED_ANNOTATION};
use gpuplane_crds::reason::Reason;
use gpuplane_crds::GpuDriver;
use std::collections::{BTreeMap, BTreeSet};

/// Its reasons, most severe first.
pub const GPU_MISSING: Reason = Reason::GpuMissing;
pub const GPU_REPLACED: Reason = Reason::GpuReplaced;
pub const LAYOUT_CHANGED: Reason = Reason::HostLayoutChanged;
pub const IDENTITY_UNKNOWN: Reason = Reason::GpuIdentityUnknown;

/// A slice the guard froze.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    pub slice: String,
    pub reason: Reason,
    pub message: String,
}

/// The guard's answer for one plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict<'h> {
    /// Slices nothing may change for, each with why.
    pub stalls: Vec<Stall>,
    /// Why `next` is to be written (it differs from the stored ledger): what changed, old → new.
    pub write: Option<String>,
    /// GPUs of VM slices to bind to `nvidia` first, so their identity is known: address → slice.
    pub identify_first: BTreeMap<String, String>,
    /// The ledger as it should be after this plan (`None` when the guard stalled, or the
    /// partition has no layout terms): the quarantine decides on it (`health/quarantine.rs`).
    pub next: Option<Ledger>,
    /// Each GPU's identity as far as it is known (`known_identities`), by address, when the
    /// partition has layout terms: the mappings' notes use it too (computed once a plan).
    pub known: Option<Known<'h>>,
}

impl Verdict<'_> {
    /// Whether slice `name` is frozen.
    pub fn frozen(&self, name: &str) -> bool {
        self.stalls.iter().any(|s| s.slice == name)
    }
}

/// One difference between the ledger and the spec's selection now.
struct Change {
    reason: Reason,
    /// The slices it touches (the old owner, the new one).
    slices: BTreeSet<String>,
    row: String,
}

/// Checks `d`'s selection on `host` against the ledger `host` shows.
pub fn check<'h>(d: &DesiredPartition, host: &'h HostState) -> Verdict<'h> {
    let Some(t) = &d.layout else {
        return Verdict::default();
    };
    let observed: Vec<&PciDevice> = host.gpus(&t.gpu_vendor).collect();
    let owner_now: BTreeMap<&str, &str> = d
        .slices
        .iter()
        .flat_map(|s| s.gpus.iter().map(move |g| (g.as_str(), s.name.as_str())))
        .collect();
    let owner_of = |a: &str| owner_now.get(a).map(|s| s.to_string());
    let ledger = host.gpu_ledger.as_ref().filter(|l| l.partition == d.name);
    let matched = ledger.map(|l| match_gpus(l, &observed));
    let known = known_from(ledger.zip(matched.as_ref()), &observed);
    let mut fresh: Vec<LedgerGpu> = observed
        .iter()
        .map(|o| {
            ledger_entry(
                o,
                GpuIdentity::clone(&known[o.address.as_str()]),
                owner_of(&o.address),
            )
        })
        .collect();
    let (Some(l), Some(m)) = (ledger, matched) else {
        let mut v = first_ledger(d, t, fresh);
        v.known = Some(known);
        return v;
    };
    let same_spec = l.spec_hash == t.spec_hash;
    // The layout hash is read only where a message or an acknowledgement needs it.
    let hash_cell = std::cell::OnceCell::new();
    let hash = || hash_cell.get_or_init(|| layout_hash(&observed)).as_str();
    let accepted = !same_spec || t.accept_layout.as_deref().is_some_and(|a| a == hash());
    let quarantines_lost = t.health.quarantine != gpuplane_crds::QuarantinePolicy::Never;
    let mut changes = changes(l, &m, &owner_of, quarantines_lost);
    changes.extend(contested(t, l, &m));
    let mut v = Verdict {
        known: Some(known),
        ..Verdict::default()
    };
    if !accepted && !changes.is_empty() {
        v.stalls = stalls(&changes, hash());
        if !v.stalls.is_empty() {
            return v;
        }
    }
    mark_unverified(&mut fresh, l, &m);
    carry_health(&mut fresh, l, &m);
    if same_spec {
        fresh.extend(kept_missing(l, &m));
    }
    let new = Ledger {
        partition: d.name.clone(),
        spec_hash: t.spec_hash.clone(),
        gpus: fresh,
    };
    v.identify_first = identify_first(d, host, &new, t, &mut v.stalls);
    if !new.same_stored(l) {
        let rows: Vec<String> = changes.iter().map(|c| c.row.clone()).collect();
        let why = if rows.is_empty() {
            "bring the GPU ledger up to date (identities seen now)".to_string()
        } else {
            let how = if !same_spec {
                "the spec changed".to_string()
            } else if accepted {
                format!("accepted by {ACCEPT_ANNOTATION}={}", hash())
            } else {
                "no GPU changes owner".to_string()
            };
            format!("the host's GPU layout changed ({how}): {}", rows.join("; "))
        };
        v.write = Some(why);
    }
    v.next = Some(new);
    v
}

/// The verdict on a host with no ledger for the partition yet: record every GPU on the bus.
fn first_ledger<'h>(d: &DesiredPartition, t: &Terms, fresh: Vec<LedgerGpu>) -> Verdict<'h> {
    let mut v = Verdict::default();
    if !fresh.is_empty() {
        let why = format!(
            "record the identity and owner of the host's {} GPUs",
            fresh.len()
        );
        let new = Ledger {
            partition: d.name.clone(),
            spec_hash: t.spec_hash.clone(),
            gpus: fresh,
        };
        v.next = Some(new);
        v.write = Some(why);
    }
    v
}

/// A GPU whose UUID is unknown stays unverified (the same GPU) or becomes so (one that took
/// another's place, or appeared), until it has been seen on `nvidia`.
fn mark_unverified(fresh: &mut [LedgerGpu], l: &Ledger, m: &Matching) {
    let at = by_address(fresh);
    for (li, addr) in &m.same {
        if let Some(&i) = at.get(addr.as_str()) {
            let e = &mut fresh[i];
            e.unverified = l.gpus[*li].unverified && e.identity.uuid.is_none();
        }
    }
    let newcomers = m.replaced.iter().map(|(_, a)| a).chain(&m.added);
    for addr in newcomers {
        if let Some(&i) = at.get(addr.as_str()) {
            let e = &mut fresh[i];
            e.unverified = e.identity.uuid.is_none();
        }
    }
}

/// Address → index of the fresh entries (one lookup each instead of a scan: the guard stays
/// linear in the GPUs).
fn by_address(fresh: &[LedgerGpu]) -> BTreeMap<String, usize> {
    fresh
        .iter()
        .enumerate()
        .map(|(i, e)| (e.address.clone(), i))
        .collect()
}

/// The owned GPUs gone or replaced, marked missing: they stay in the ledger while the spec
/// that gave them a slice stands, so their slice is not stalled again for the same loss, and a
/// selector that names one is not a spec error.
fn kept_missing<'a>(l: &'a Ledger, m: &'a Matching) -> impl Iterator<Item = LedgerGpu> + 'a {
    let replaced = m.replaced.iter().map(|(li, _)| li);
    m.missing
        .iter()
        .chain(replaced)
        .map(|li| &l.gpus[*li])
        .filter(|g| g.owner.is_some())
        .map(|g| LedgerGpu {
            missing: true,
            ..g.clone()
        })
}

/// Every difference between the ledger and what the bus and the selection show now.
///
/// A GPU gone from the bus freezes its slice only where `spec.health` quarantines nothing
/// (`quarantines_lost` false): otherwise the quarantine takes it out of its slice and the
/// slice goes on with the others (`health/quarantine.rs`); the row is still said.
fn changes(
    l: &Ledger,
    m: &Matching,
    owner_of: &dyn Fn(&str) -> Option<String>,
    quarantines_lost: bool,
) -> Vec<Change> {
    let mut out: Vec<Change> = m
        .same
        .iter()
        .filter_map(|(li, addr)| seen_again(&l.gpus[*li], addr, owner_of(addr)))
        .collect();
    let mut push = |reason, old: &Option<String>, new: &Option<String>, row: String| {
        let slices = old.iter().chain(new.iter()).cloned().collect();
        out.push(Change {
            reason,
            slices,
            row,
        });
    };
    for (li, addr) in &m.replaced {
        let g = &l.gpus[*li];
        let new = owner_of(addr);
        push(
            GPU_REPLACED,
            &g.owner,
            &new,
            format!(
                "{} at {} replaced by another GPU at {addr}: was {}, would be {}",
                g.describe(),
                g.address,
                slice_name(&g.owner),
                slice_name(&new)
            ),
        );
    }
    for li in &m.missing {
        let g = &l.gpus[*li];
        if !g.missing {
            let frozen = if quarantines_lost { &None } else { &g.owner };
            push(
                GPU_MISSING,
                frozen,
                &None,
                format!(
                    "{} at {} is gone from the bus ({})",
                    g.describe(),
                    g.address,
                    slice_name(&g.owner)
                ),
            );
        }
    }
    for addr in &m.added {
        let new = owner_of(addr);
        push(
            LAYOUT_CHANGED,
            &None,
            &new,
            format!("a new GPU at {addr} (would be {})", slice_name(&new)),
        );
    }
    out
}

/// `slice NAME`, or `no slice`, for a change's words.
fn slice_name(o: &Option<String>) -> String {
    match o {
        Some(s) => format!("slice {s}"),
        None => "no slice".into(),
    }
}

/// The change of a GPU seen again at `addr`, owned by `new` now: its owner changes, it moved,
/// or it had been missing; `None` when nothing changed.
fn seen_again(g: &LedgerGpu, addr: &str, new: Option<String>) -> Option<Change> {
    let owner_changes = g.owner != new;
    if !owner_changes && g.address == addr && !g.missing {
        return None;
    }
    let (was, now) = (slice_name(&g.owner), slice_name(&new));
    let row = if owner_changes {
        format!(
            "{} {} → {addr}: was {was}, would be {now}",
            g.describe(),
            g.address
        )
    } else {
        format!("{} {} → {addr} ({now})", g.describe(), g.address)
    };
    let slices = if owner_changes {
        g.owner.iter().chain(new.iter()).cloned().collect()
    } else {
        Default::default()
    };
    Some(Change {
        reason: LAYOUT_CHANGED,
        slices,
        row,
    })
}

/// GPUs two selectors pick since the host moved them (resolution records them only under an
/// unchanged, unacknowledged spec): each freezes every slice that picks it, and the slice the
/// ledger gave it.
fn contested(t: &Terms, l: &Ledger, m: &Matching) -> Vec<Change> {
    t.contested
        .iter()
        .map(|(addr, slices)| {
            let was = m.was(addr).map(|li| &l.gpus[li]);
            let mut all = slices.clone();
            all.extend(was.and_then(|g| g.owner.clone()));
            let names: Vec<String> = slices.iter().map(|s| format!("slice {s}")).collect();
            let what = was.map_or("a GPU".to_string(), |g| g.describe());
            let owner = match was.and_then(|g| g.owner.as_deref()) {
                Some(o) => format!("slice {o}"),
                None => "no slice".into(),
            };
            Change {
                reason: LAYOUT_CHANGED,
                slices: all,
                row: format!(
                    "{what} now at {addr} is picked by {} (it was {owner}'s)",
                    names.join(" and ")
                ),
            }
        })
        .collect()
}

/// The slices the changes freeze: every slice a change gives or takes a GPU, with the most
/// severe reason among its changes and all its rows.
fn stalls(changes: &[Change], hash: &str) -> Vec<Stall> {
    let mut by: BTreeMap<&str, (usize, Vec<&str>)> = BTreeMap::new();
    let rank = |r: Reason| match r {
        GPU_MISSING => 0,
        GPU_REPLACED => 1,
        _ => 2,
    };
    for c in changes {
        for s in &c.slices {
            let e = by.entry(s.as_str()).or_insert((usize::MAX, vec![]));
            e.0 = e.0.min(rank(c.reason));
            e.1.push(&c.row);
        }
    }
    by.into_iter()
        .map(|(slice, (r, rows))| Stall {
            slice: slice.to_string(),
            reason: [GPU_MISSING, GPU_REPLACED, LAYOUT_CHANGED][r.min(2)],
            message: format!(
                "slice {slice}: the host's GPUs changed under an unchanged spec, and the selection would give a GPU to another owner than before: {}. Nothing was changed for this slice. Check the host; to accept the new layout, annotate the partition {ACCEPT_ANNOTATION}={hash}, or change the spec",
                rows.join("; ")
            ),
        })
        .collect()
}

/// GPUs of `vfio-pci` slices whose identity is unknown since they appeared: bound to the host
/// driver first (address → slice). One already on the host driver whose UUID still could not
/// be read freezes its slice (`GpuIdentityUnknown`), unless the admin allows unverified GPUs.
fn identify_first(
    d: &DesiredPartition,
    host: &HostState,
    new: &Ledger,
    t: &Terms,
    stalls: &mut Vec<Stall>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if t.allow_unverified {
        return out;
    }
    let unverified: BTreeMap<&str, &LedgerGpu> = new
        .gpus
        .iter()
        .filter(|e| e.unverified)
        .map(|e| (e.address.as_str(), e))
        .collect();
    if unverified.is_empty() {
        return out;
    }
    for s in d.slices.iter().filter(|s| s.driver == GpuDriver::VfioPci) {
        for g in &s.gpus {
            let Some(e) = unverified.get(g.as_str()) else {
                continue;
            };
            let on_host = host.pci_devices.get(g).and_then(|x| x.driver.as_deref())
                == Some(d.host_driver.as_str());
            if on_host {
                stalls.push(Stall {
                    slice: s.name.clone(),
                    reason: IDENTITY_UNKNOWN,
                    message: format!(
                        "slice {}: {} at {g} took another GPU's place or is new, and its UUID could not be read on {} (is nvidia-smi there?); it goes to no VM until its identity is known. Annotate the partition {UNVERIFIED_ANNOTATION}=\"true\" to pass it through anyway",
                        s.name,
                        e.describe(),
                        d.host_driver
                    ),
                });
            } else {
                out.insert(g.clone(), s.name.clone());
            }
        }
    }
    out
}

/// The ledger entry for device `d` as observed now, with `identity` (observed, plus what the
/// ledger remembered for it) and `owner`.
fn ledger_entry(d: &PciDevice, identity: GpuIdentity, owner: Option<String>) -> LedgerGpu {
    LedgerGpu {
        address: d.address.clone(),
        id: d.model_id(),
        numa_node: d.numa_node,
        identity,
        owner,
        missing: false,
        unverified: false,
        ..LedgerGpu::default()
    }
}

/// The same GPU keeps its health memory (quarantine, accepted evidence, resets) across a
/// rewrite of the ledger; a GPU that took another's place starts clean (a replaced board
/// does not inherit its predecessor's quarantine).
fn carry_health(fresh: &mut [LedgerGpu], l: &Ledger, m: &Matching) {
    let at = by_address(fresh);
    for (li, addr) in &m.same {
        if let Some(&i) = at.get(addr.as_str()) {
            let e = &mut fresh[i];
            let old = &l.gpus[*li];
            e.quarantine = old.quarantine.clone();
            e.accepted_health = old.accepted_health.clone();
            e.resets = old.resets;
        }
    }
}

#[cfg(test)]
pub(super) mod tests;
