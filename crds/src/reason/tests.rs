use super::*;

#[test]
fn every_reason_has_one_name_that_parses_back_and_a_meaning() {
    let mut seen = std::collections::BTreeSet::new();
    for r in Reason::ALL {
        assert!(seen.insert(r.as_str()), "{r} twice");
        assert_eq!(Reason::parse(r.as_str()), Some(*r));
        assert!(!r.meaning().is_empty(), "{r} says nothing");
        assert!(
            r.as_str().chars().all(|c| c.is_ascii_alphanumeric())
                && r.as_str().starts_with(|c: char| c.is_ascii_uppercase()),
            "{r}: a condition reason is CamelCase"
        );
    }
    assert_eq!(Reason::parse("Converged"), Some(Reason::Converged));
    assert_eq!(Reason::parse("converged"), None);
}

#[test]
fn the_kstatus_pair_has_at_most_one_true_and_says_what_kstatus_reads() {
    for s in [
        Standing::Working,
        Standing::Stuck,
        Standing::Done,
        Standing::Detail,
    ] {
        let (reconciling, stalled) = s.pair();
        assert!(!(reconciling && stalled), "{s:?}");
        assert_eq!(s.kstatus().is_none(), s == Standing::Detail);
    }
}

#[test]
fn a_reason_serializes_as_its_name() {
    let json = serde_json::to_string(&Reason::GpuInUse).unwrap();
    assert_eq!(json, "\"GpuInUse\"");
    let back: Reason = serde_json::from_str(&json).unwrap();
    assert_eq!(back, Reason::GpuInUse);
}
