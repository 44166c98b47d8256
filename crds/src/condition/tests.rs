use super::*;

fn cond(status: &str, reason: &str, at: &str) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: reason.into(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: Time(at.parse().unwrap()),
    }
}

#[test]
fn keeps_transition_time_unless_status_flips() {
    let mut cs = vec![cond("False", "A", "2026-01-01T00:00:00Z")];
    set_condition(&mut cs, cond("False", "B", "2026-01-02T00:00:00Z"));
    assert_eq!(cs[0].reason, "B");
    assert_eq!(
        cs[0].last_transition_time,
        Time("2026-01-01T00:00:00Z".parse().unwrap())
    );
    set_condition(&mut cs, cond("True", "C", "2026-01-03T00:00:00Z"));
    assert_eq!(
        cs[0].last_transition_time,
        Time("2026-01-03T00:00:00Z".parse().unwrap())
    );
    assert_eq!(cs.len(), 1);
}
