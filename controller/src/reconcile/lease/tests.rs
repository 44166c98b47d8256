use super::*;

fn lease(label: Option<&str>, holder: &str, renewed_secs_ago: i64) -> Lease {
    let now = jiff::Timestamp::now();
    Lease {
        metadata: ObjectMeta {
            name: Some(lease_name("n1")),
            labels: label.map(|n| [(NODE_LABEL.to_string(), n.to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                now - jiff::SignedDuration::from_secs(renewed_secs_ago),
            )),
            ..LeaseSpec::default()
        }),
    }
}

#[test]
fn only_a_fresh_labelled_held_lease_is_a_claim() {
    let now = jiff::Timestamp::now();
    assert!(is_live_claim(&lease(Some("n1"), "pod-a", 1), "n1", now));
    // Run out.
    assert!(!is_live_claim(&lease(Some("n1"), "pod-a", 60), "n1", now));
    // Held by nobody.
    assert!(!is_live_claim(&lease(Some("n1"), "", 1), "n1", now));
    // Written past the webhook: no label, or another node's.
    assert!(!is_live_claim(&lease(None, "pod-a", 1), "n1", now));
    assert!(!is_live_claim(&lease(Some("n2"), "pod-a", 1), "n1", now));
}
