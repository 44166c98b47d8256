use super::*;
use crate::host::ledger::LedgerGpu;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// The matching as a pairwise scan (what `match_gpus` did before its index): the oracle.
fn scan(ledger: &Ledger, observed: &[&PciDevice]) -> Matching {
    let mut m = Matching::default();
    let mut taken: BTreeSet<usize> = BTreeSet::new();
    let mut found: BTreeMap<usize, String> = BTreeMap::new();
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

/// Identities from a small alphabet, so that values collide and sides disagree often.
fn identity() -> impl Strategy<Value = (GpuIdentity, String)> {
    let v = || proptest::option::of(prop::sample::select(vec!["a", "b", "c"]));
    (v(), v(), v(), v(), v(), 0..4u8).prop_map(|(dsn, uuid, serial, slot, path, a)| {
        let s = |x: Option<&str>| x.map(str::to_string);
        (
            GpuIdentity {
                dsn: s(dsn),
                uuid: s(uuid),
                serial: s(serial),
                slot: s(slot),
                path: s(path),
            },
            format!("0000:0{a}:00.0"),
        )
    })
}

proptest! {
    #[test]
    fn the_index_matches_as_the_pairwise_scan_does(
        old in prop::collection::vec(identity(), 0..7),
        now in prop::collection::vec(identity(), 0..7),
    ) {
        let ledger = Ledger {
            gpus: old
                .into_iter()
                .map(|(identity, address)| LedgerGpu { address, identity, ..Default::default() })
                .collect(),
            ..Default::default()
        };
        let devices: Vec<PciDevice> = now
            .into_iter()
            .map(|(identity, address)| PciDevice { address, identity, ..Default::default() })
            .collect();
        let refs: Vec<&PciDevice> = devices.iter().collect();
        prop_assert_eq!(match_gpus(&ledger, &refs), scan(&ledger, &refs));
    }
}
