use super::*;
use crate::status_view::model::{Doc, Kind, Specs};
use serde_json::json;

fn frame(ready: &str, reason: &str, since: &str, gpus: serde_json::Value) -> Frame {
    let docs = [Doc {
        origin: "GpuPartition-p.yaml".into(),
        kind: Kind::Partition,
        value: Ok(json!({
            "resource": "GpuPartition/p",
            "conditions": [
                {"type": "Ready", "status": ready, "reason": reason, "lastTransitionTime": since},
                {"type": "Degraded", "status": "False", "reason": "AsExpected",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
            "gpus": gpus,
        })),
    }];
    let now = "2026-01-01T01:00:00Z".parse().unwrap();
    crate::status_view::frame(&docs, &Specs::new(), crate::status_view::Format::Table, now)
}

fn text(f: &Option<Frame>) -> String {
    f.as_ref()
        .map(|f| crate::status_view::render::print(f, false))
        .unwrap_or_default()
}

#[test]
fn a_transition_shows_and_nothing_else_does() {
    let gpus = json!([{"address": "0000:01:00.0", "driver": "nvidia", "owner": "a"}]);
    let stalled = frame("False", "GpuMissing", "2026-01-01T00:50:00Z", gpus.clone());
    // The same read again, an hour later by the clock: ages grew, nothing changed.
    assert_eq!(changes(&stalled, &stalled), None);
    let ready = frame("True", "Converged", "2026-01-01T00:59:00Z", gpus);
    assert_eq!(
        text(&changes(&stalled, &ready)),
        "RESOURCE         TYPE    STATUS   REASON      AGE\n\
             GpuPartition/p   Ready   True     Converged   60s\n"
    );
}

#[test]
fn a_gpu_that_changes_or_goes_is_printed_under_its_host() {
    let before = frame(
        "True",
        "Converged",
        "2026-01-01T00:00:00Z",
        json!([{"address": "0000:01:00.0", "driver": "nvidia"},
                   {"address": "0000:02:00.0", "driver": "nvidia"}]),
    );
    let after = frame(
        "True",
        "Converged",
        "2026-01-01T00:00:00Z",
        json!([{"address": "0000:01:00.0", "driver": "vfio-pci", "health": "Unhealthy"}]),
    );
    assert_eq!(
        text(&changes(&before, &after)),
        "GpuPartition/p\n\
             ADDRESS               SLOT   NUMA   DRIVER     HEALTH      OWNER   CONSUMER   HOLDER\n\
             0000:01:00.0          -      -      vfio-pci   Unhealthy   -       -          -\n\
             0000:02:00.0 (gone)   -      -      nvidia     -           -       -          -\n"
    );
}
