use super::*;
use crate::testutil::{manifests, twin};
use gpuplane_crds::{GpuNodePoolSpec, MaxUnavailable};

fn pool(name: &str, max: Option<MaxUnavailable>) -> GpuNodePool {
    GpuNodePool::new(
        name,
        GpuNodePoolSpec {
            max_unavailable: max,
            paused: false,
        },
    )
}

fn msgs(e: &[SpecError]) -> Vec<String> {
    e.iter().map(|e| e.to_string()).collect()
}

/// Issue 37: `maxUnavailable` of -1, "150%", "abc" or "25" was admitted at every door. Each is
/// refused on the pool's own field, with the fix; a count ≥ 0 and 0%–100% pass ("0%" freezes,
/// as 0 does).
#[test]
fn max_unavailable_is_a_count_or_a_percentage_or_refused_with_the_fix() {
    for (bad, says) in [
        (
            MaxUnavailable::Count(-1),
            r#"GpuNodePool/fleet: spec.maxUnavailable: -1 is not a count ≥ 0 or a percentage 0%–100%; write e.g. 1 or "25%""#,
        ),
        (
            MaxUnavailable::Percent("150%".into()),
            r#"GpuNodePool/fleet: spec.maxUnavailable: "150%" is not a count ≥ 0 or a percentage 0%–100%; write e.g. 1 or "25%""#,
        ),
        (
            MaxUnavailable::Percent("abc".into()),
            r#"GpuNodePool/fleet: spec.maxUnavailable: "abc" is not a count ≥ 0 or a percentage 0%–100%; write e.g. 1 or "25%""#,
        ),
        (
            MaxUnavailable::Percent("25".into()),
            r#"GpuNodePool/fleet: spec.maxUnavailable: "25" is not a count ≥ 0 or a percentage 0%–100%: a count is written without quotes; write 25 or "25%""#,
        ),
    ] {
        assert_eq!(msgs(&check(&pool("fleet", Some(bad)))), [says]);
    }
    for good in [
        None,
        Some(MaxUnavailable::Count(0)),
        Some(MaxUnavailable::Count(2)),
        Some(MaxUnavailable::Percent("0%".into())),
        Some(MaxUnavailable::Percent("25%".into())),
        Some(MaxUnavailable::Percent("100%".into())),
    ] {
        assert_eq!(
            msgs(&check(&pool("fleet", good.clone()))),
            Vec::<String>::new(),
            "{good:?}"
        );
    }
}

/// A pool whose name no label value can hold has no members: refused at its name.
#[test]
fn a_pool_name_longer_than_a_label_value_is_refused() {
    let name = format!("fleet-{}", "a".repeat(60));
    let e = msgs(&check(&pool(&name, None)));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("metadata.name: is 66 characters long") && e[0].contains("shorten the name"),
        "{e:?}"
    );
}

/// Issue 37: a `gpuplane.dev/pool` label no pool name can have was accepted and the host
/// converged (outside any pool's budget in practice: the member waits for a pool that cannot
/// exist, or an operator believes it is in one). Refused host-independently and against the host.
#[test]
fn a_pool_label_no_pool_can_have_is_refused_at_every_door() {
    let mut m = manifests();
    let labels = m.partitions[0].metadata.labels.get_or_insert_default();
    labels.insert(POOL_LABEL.into(), "Fleet_A".into());
    let want = r#"GpuPartition/kpro6: metadata.labels["gpuplane.dev/pool"]: "Fleet_A" cannot be the name of a GpuNodePool"#;
    let offline = msgs(&crate::desired::offline::validate(&m.partitions, &m.servers).0);
    assert!(
        offline.len() == 1
            && offline[0].starts_with(want)
            && offline[0].contains("gpuplane.dev/pool: fleet-a"),
        "{offline:?}"
    );
    let st = crate::host::Host::observe(&mut twin()).unwrap();
    let on_host = crate::desired::resolve_partition(&m.partitions[0], &st, "10de", "nvidia")
        .map(|_| ())
        .unwrap_err();
    assert!(msgs(&on_host)[0].starts_with(want), "{on_host:?}");
    // A name a pool can have, or an empty label (no pool), passes.
    for ok in ["fleet-a", "eu.fleet-1", ""] {
        let mut m = manifests();
        let labels = m.partitions[0].metadata.labels.get_or_insert_default();
        labels.insert(POOL_LABEL.into(), ok.into());
        let errors = crate::desired::offline::validate(&m.partitions, &m.servers).0;
        assert_eq!(msgs(&errors), Vec::<String>::new(), "{ok:?}");
    }
}

#[test]
fn the_example_for_a_label_value_is_a_pool_name() {
    assert_eq!(suggestion("Fleet_A"), "fleet-a");
    assert_eq!(suggestion("__"), "inference-fleet");
    assert!(is_pool_name(&suggestion(&"X".repeat(100))));
}
