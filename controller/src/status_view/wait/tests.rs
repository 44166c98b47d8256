use super::*;
use crate::status_view::model::Condition;

fn cond(type_: &str, status: &str, reason: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: "m".into(),
        since: None,
    }
}

fn res(name: &str, kind: Kind, conditions: Vec<Condition>) -> Resource {
    Resource {
        name: name.into(),
        kind,
        conditions,
        gpus: vec![],
        layout_hash: None,
        unreadable: None,
    }
}

fn ready(name: &str, status: &str) -> Resource {
    let kind = if name.starts_with("GpuPartition/") {
        Kind::Partition
    } else {
        Kind::Server
    };
    res(
        name,
        kind,
        vec![cond("Ready", status, "R"), cond("Stalled", "False", "S")],
    )
}

const P: &str = "GpuPartition/kpro6";
const S: &str = "InferenceServer/default/qwen";

#[test]
fn met_only_when_every_resource_has_the_condition_true() {
    let both = [ready(P, "True"), ready(S, "True")];
    assert_eq!(
        judge(&both, "Ready", &[]),
        Verdict::Met(vec![
            format!("{P}: condition met"),
            format!("{S}: condition met")
        ])
    );
    let one = [ready(P, "True"), ready(S, "False")];
    assert!(
        matches!(judge(&one, "Ready", &[]), Verdict::Waiting(w) if w.len() == 1 && w[0].starts_with(S))
    );
}

#[test]
fn an_empty_read_or_a_missing_expected_resource_is_never_met() {
    assert!(matches!(judge(&[], "Ready", &[]), Verdict::Waiting(_)));
    let only_p = [ready(P, "True")];
    assert_eq!(
        judge(&only_p, "Ready", &[P.into(), S.into()]),
        Verdict::Waiting(vec![format!("{S}: no status yet")])
    );
}

#[test]
fn stalled_or_refused_manifests_end_the_wait() {
    let mut s = ready(S, "False");
    s.conditions[1] = cond("Stalled", "True", "GpuInUse");
    assert_eq!(
        judge(&[ready(P, "True"), s.clone()], "Ready", &[]),
        Verdict::Failed(vec![format!("{S}: Stalled=True GpuInUse: m")])
    );
    // Waiting for Stalled itself is a wait like any other.
    assert!(matches!(judge(&[s], "Stalled", &[]), Verdict::Met(_)));
    let invalid = res(
        "(manifests)",
        Kind::Invalid,
        vec![cond("Valid", "False", "InvalidSpec")],
    );
    assert!(matches!(
        judge(&[invalid], "Ready", &[]),
        Verdict::Failed(_)
    ));
}

#[test]
fn a_missing_condition_is_waited_for() {
    let r = res(P, Kind::Partition, vec![]);
    assert_eq!(
        judge(&[r], "Ready", &[]),
        Verdict::Waiting(vec![format!("{P}: no Ready condition yet")])
    );
}
