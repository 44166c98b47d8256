use super::*;
use gpuplane_crds::condition::{Condition, Time};

fn c(t: &str, s: &str, at: &str) -> Condition {
    Condition {
        type_: t.into(),
        status: s.into(),
        reason: "R".into(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: Time(at.parse().unwrap()),
    }
}

#[test]
fn merge_keeps_transition_time_and_drops_stale_types() {
    let old = vec![
        c("Ready", "True", "2026-01-01T00:00:00Z"),
        c("Old", "True", "2026-01-01T00:00:00Z"),
    ];
    let new = vec![
        c("Ready", "True", "2026-02-01T00:00:00Z"),
        c("P2PSafe", "False", "2026-02-01T00:00:00Z"),
    ];
    let m = merge(&old, &new);
    assert_eq!(m.len(), 2);
    assert_eq!(
        m[0].last_transition_time,
        Time("2026-01-01T00:00:00Z".parse().unwrap())
    );
    assert_eq!(m[1].type_, "P2PSafe");
}
