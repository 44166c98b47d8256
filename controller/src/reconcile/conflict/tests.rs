//! The conflict rule is a function of the objects alone: the same winner and the same message
//! whatever the list order, across 100 reconciles, and conditions that do not flap.

use super::*;
use crate::desired::{check_servers_together, resolve_server};
use crate::testutil::{desired, manifests, twin};
use gpuplane_crds::condition::{merge, Condition};
use gpuplane_crds::InferenceServer;

/// The reference partition named `name`, for `node`, created at `created` (RFC 3339) if given.
fn partition(name: &str, node: &str, created: Option<&str>) -> GpuPartition {
    let mut p = manifests().partitions[0].clone();
    p.metadata.name = Some(name.into());
    p.spec.node_name = node.into();
    p.metadata.creation_timestamp = created
        .map(|c| serde_json::from_value(serde_json::Value::String(c.into())).expect("timestamp"));
    p
}

/// 100 orders of `v`: a fixed pseudo-random shuffle per round (xorshift), so runs repeat.
fn orders<T: Clone>(v: &[T]) -> Vec<Vec<T>> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..100)
        .map(|_| {
            let mut o = v.to_vec();
            for i in (1..o.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                o.swap(i, (x % (i as u64 + 1)) as usize);
            }
            o
        })
        .collect()
}

#[test]
fn the_oldest_partition_for_a_node_wins_whatever_the_order() {
    let all = vec![
        partition("zeta", "kpro6", Some("2026-01-01T10:00:00Z")),
        partition("beta", "kpro6", Some("2026-01-01T10:00:05Z")),
        // Same second as beta: the name decides.
        partition("alpha", "kpro6", Some("2026-01-01T10:00:05Z")),
        // Never stored by an API server: last.
        partition("aaa", "kpro6", None),
        // Another node: no conflict with these.
        partition("other", "kpro7", Some("2020-01-01T00:00:00Z")),
    ];
    let decide = |list: &[GpuPartition]| -> Vec<Option<String>> {
        all.iter().map(|p| partition_loses(p, list)).collect()
    };
    let first = decide(&all);
    assert_eq!(first[0], None, "zeta is the oldest claim on kpro6");
    assert_eq!(first[4], None, "other is alone on kpro7");
    for m in &first[1..4] {
        let m = m.as_deref().expect("a younger partition loses");
        assert!(m.contains("already claimed by GpuPartition zeta"), "{m}");
    }
    let mut sorted = all.clone();
    sort_by_claim(&mut sorted);
    let names: Vec<String> = sorted.iter().map(|p| p.name_any()).collect();
    assert_eq!(names, ["other", "zeta", "alpha", "beta", "aaa"]);
    for (round, o) in orders(&all).into_iter().enumerate() {
        assert_eq!(decide(&o), first, "round {round}");
    }
}

#[test]
fn a_conflict_condition_does_not_flap_across_100_reconciles() {
    let all = vec![
        partition("old", "kpro6", Some("2026-01-01T10:00:00Z")),
        partition("new", "kpro6", Some("2026-01-02T10:00:00Z")),
    ];
    let mut conditions: Vec<Condition> = vec![];
    let mut first_time = None;
    for o in orders(&all) {
        let msg = partition_loses(&all[1], &o).expect("new loses");
        let computed = refusal::conflict(&msg, Some(1), &crate::clock::now());
        conditions = merge(&conditions, &computed.conditions);
        let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", REASON.as_str())
        );
        let t = ready.last_transition_time.clone();
        assert_eq!(
            first_time.get_or_insert(t.clone()),
            &t,
            "the condition flapped"
        );
    }
}

/// The reference server, named `name`, created at `created`, on the reference slice.
fn server(name: &str, created: &str, port: u16) -> InferenceServer {
    let mut s = manifests().servers[0].clone();
    s.metadata.name = Some(name.into());
    s.spec.unit.name = format!("gpuplane-{name}");
    s.spec.listen.port = port;
    s.metadata.creation_timestamp =
        Some(serde_json::from_value(serde_json::Value::String(created.into())).unwrap());
    s
}

#[test]
fn of_two_servers_on_one_slice_the_older_keeps_it_whatever_the_order() {
    let mut host = twin();
    let d = desired(&mut host, &manifests());
    let all = vec![
        server("young", "2026-01-02T00:00:00Z", 30001),
        server("old", "2026-01-01T00:00:00Z", 30002),
        server("middle", "2026-01-01T12:00:00Z", 30003),
    ];
    for (round, mut o) in orders(&all).into_iter().enumerate() {
        sort_by_claim(&mut o);
        let resolved: Vec<_> = o
            .iter()
            .map(|s| resolve_server(s, &d.partition).expect("valid"))
            .collect();
        let losers: std::collections::BTreeSet<String> = check_servers_together(&resolved)
            .into_iter()
            .filter(|e| e.field == "spec.partitionRef.slice")
            .map(|e| e.resource.to_string())
            .collect();
        let want = [
            "InferenceServer/default/middle",
            "InferenceServer/default/young",
        ];
        assert_eq!(
            losers.into_iter().collect::<Vec<_>>(),
            want,
            "round {round}"
        );
    }
}
