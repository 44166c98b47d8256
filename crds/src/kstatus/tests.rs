use super::*;
use serde_json::json;

fn obj(generation: i64, observed: Option<i64>, conditions: Value) -> Value {
    let mut status = json!({ "conditions": conditions });
    if let Some(o) = observed {
        status["observedGeneration"] = json!(o);
    }
    json!({ "metadata": { "name": "x", "generation": generation }, "status": status })
}

fn c(t: &str, s: &str, r: &str) -> Value {
    json!({ "type": t, "status": s, "reason": r, "message": "" })
}

#[test]
fn each_rule_decides_in_kstatus_order() {
    let cases = [
        (
            obj(1, Some(1), json!([c("Ready", "True", "Converged")])),
            Kstatus::Current,
            "Ready",
        ),
        (
            obj(1, Some(1), json!([c("Ready", "False", "GpuInUse")])),
            Kstatus::InProgress,
            "GpuInUse",
        ),
        (
            obj(1, Some(1), json!([c("Ready", "Unknown", "Why")])),
            Kstatus::InProgress,
            "Why",
        ),
        (
            obj(2, Some(1), json!([c("Stalled", "True", "GpuInUse")])),
            Kstatus::InProgress,
            "LatestGenerationNotObserved",
        ),
        (
            obj(
                1,
                Some(1),
                json!([c("Ready", "True", "A"), c("Stalled", "True", "GpuInUse")]),
            ),
            Kstatus::Failed,
            "GpuInUse",
        ),
        // The first abnormal-true condition in list order wins.
        (
            obj(
                1,
                Some(1),
                json!([
                    c("Reconciling", "True", "Applying"),
                    c("Stalled", "True", "X")
                ]),
            ),
            Kstatus::InProgress,
            "Applying",
        ),
        (
            obj(
                1,
                Some(1),
                json!([c("Stalled", "False", "X"), c("Reconciling", "False", "Y")]),
            ),
            Kstatus::Current,
            "NoKnownConditions",
        ),
        // No observedGeneration: the generation check is skipped.
        (
            obj(5, None, json!([c("Ready", "True", "A")])),
            Kstatus::Current,
            "Ready",
        ),
        (
            json!({ "metadata": { "generation": 1 } }),
            Kstatus::Current,
            "NoKnownConditions",
        ),
    ];
    for (o, status, reason) in cases {
        let v = compute(&o);
        assert_eq!((v.status, v.reason.as_str()), (status, reason), "{o}");
    }
}

#[test]
fn deletion_comes_before_everything() {
    let mut o = obj(1, Some(1), json!([c("Stalled", "True", "X")]));
    o["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    assert_eq!(compute(&o).status, Kstatus::Terminating);
}
