//! The lease against a mocked API server (tower-test): leadership ends when the last successful
//! renewal is `duration` old even if nothing else happens, and an error lets go at once.

use super::*;
use http::{Request, Response};
use kube::client::Body;

/// An API server that answers the lease's GET with `get_code` (404: no lease yet, then the
/// create is answered with the lease sent) or never answers at all (`None`).
fn mock(get_code: Option<u16>) -> kube::Client {
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        let mut hung = vec![];
        while let Some((req, send)) = handle.next_request().await {
            let Some(code) = get_code else {
                hung.push(send); // never answered
                continue;
            };
            let method = req.method().to_string();
            let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
            let (status, body) = if method == "POST" {
                (201, bytes.to_vec())
            } else {
                let reason = if code == 404 {
                    "NotFound"
                } else {
                    "Unauthorized"
                };
                let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": reason});
                (code, serde_json::to_vec(&status).unwrap())
            };
            send.send_response(
                Response::builder()
                    .status(status)
                    .body(Body::from(body))
                    .unwrap(),
            );
        }
    });
    kube::Client::new(svc, "default")
}

#[tokio::test]
async fn leadership_ends_when_the_lease_can_expire_for_the_others() {
    let lease = NodeLease::new(mock(Some(404)), "ns", "n1", "a", Duration::from_millis(300));
    assert!(!lease.is_leader());
    assert!(lease.try_acquire().await.unwrap());
    assert!(lease.is_leader());
    // No renewal: 300 ms after the start of the last successful one, another agent may see the
    // lease expired; by then this one no longer acts.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(!lease.is_leader());
    // A new renewal makes it lead again.
    assert!(lease.try_acquire().await.unwrap());
    assert!(lease.is_leader());
}

#[tokio::test]
async fn a_failed_renewal_lets_go_at_once() {
    let ok = mock(Some(404));
    let lease = NodeLease::new(ok, "ns", "n1", "a", Duration::from_secs(60));
    assert!(lease.try_acquire().await.unwrap());
    assert!(lease.is_leader());
    let failing = NodeLease {
        api: Api::namespaced(mock(Some(401)), "ns"),
        ..lease.clone()
    };
    assert!(failing.try_acquire().await.is_err());
    assert!(!lease.is_leader(), "still leading after a failed renewal");
}

#[tokio::test]
async fn a_renewal_that_never_answers_is_given_up_and_lets_go() {
    let lease = NodeLease::new(mock(Some(404)), "ns", "n1", "a", Duration::from_secs(60));
    assert!(lease.try_acquire().await.unwrap());
    let hung = NodeLease {
        api: Api::namespaced(mock(None), "ns"),
        ..lease.clone()
    };
    // What the agent's lease loop does with a renewal that does not answer within a period.
    let r = tokio::time::timeout(Duration::from_millis(100), hung.try_acquire()).await;
    assert!(r.is_err(), "the mock answered");
    hung.let_go("no answer");
    assert!(!lease.is_leader());
}

// The node label: which Leases are claims.

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
