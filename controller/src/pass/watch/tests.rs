use super::*;
use crate::testutil::{desired, manifests, twin};

#[test]
fn the_watch_set_names_every_server_unit_then_the_removed_ones() {
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    let gone = d.servers[0].unit.clone();
    d.removed_units.push(gone.clone());
    let w = WatchSet::of(&d);
    assert_eq!(w.units.len(), d.servers.len() + 1);
    assert_eq!(w.units.last(), Some(&gone));
    assert_eq!(w.preflight, crate::desired::preflight::requests(&d));
}

#[test]
fn an_observation_seeds_only_a_converge_that_watches_the_same() {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    assert!(!d.servers.is_empty());
    let mut watching = Watching::default();
    let observed = h.observe().unwrap();
    // A fresh door watched nothing: the servers' units were not read.
    let first = watching.seed(&mut h, WatchSet::of(&d), observed);
    assert!(first.is_none());
    // The next pass observes under the same set: complete.
    let observed = h.observe().unwrap();
    let second = watching.seed(&mut h, WatchSet::of(&d), observed.clone());
    assert_eq!(second, Some(observed));
    // A server gone: the set changed, no seed.
    let mut fewer = d.clone();
    fewer.servers.pop();
    let observed = h.observe().unwrap();
    assert!(watching
        .seed(&mut h, WatchSet::of(&fewer), observed)
        .is_none());
}

#[test]
fn nothing_to_watch_is_complete_from_the_first_look() {
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    d.servers.clear();
    let observed = h.observe().unwrap();
    let mut watching = Watching::default();
    assert_eq!(
        watching.seed(&mut h, WatchSet::of(&d), observed.clone()),
        Some(observed)
    );
}
