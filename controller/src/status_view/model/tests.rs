use super::*;
use serde_json::json;

fn doc(v: Value) -> Doc {
    Doc {
        origin: "GpuPartition-x.yaml".into(),
        kind: Kind::Partition,
        value: Ok(v),
    }
}

#[test]
fn hostile_text_is_one_short_line_and_wrong_types_are_left_out() {
    let r = resource(&doc(json!({
        "resource": "GpuPartition/x\x1b[2J\nforged line",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "R\tX", "message": "\u{202e}".to_string() + &"m".repeat(100_000),
             "lastTransitionTime": "not a time"},
            "not an object",
            {"type": 7, "status": ["bad"]},
        ],
        "gpus": [{"address": "0000:01:00.0", "numa": "zero", "missing": "yes"}, 3],
    })));
    assert!(
        !r.name.contains('\x1b') && !r.name.contains('\n'),
        "{:?}",
        r.name
    );
    assert_eq!(r.conditions.len(), 2);
    assert_eq!(r.conditions[0].reason, "R X");
    assert!(!r.conditions[0].message.contains('\u{202e}'));
    assert!(r.conditions[0].message.len() <= MESSAGE_MAX);
    assert_eq!(r.conditions[0].since, None);
    assert_eq!(r.conditions[1].type_, "7");
    assert_eq!(r.conditions[1].status, "Unknown");
    assert_eq!(r.gpus.len(), 1);
    assert_eq!((r.gpus[0].numa, r.gpus[0].missing), (None, false));
}

#[test]
fn a_huge_document_is_capped() {
    let g: Vec<Value> = (0..10_000)
        .map(|i| json!({"address": i.to_string()}))
        .collect();
    let c: Vec<Value> = (0..10_000).map(|_| json!({"type": "Ready"})).collect();
    let r = resource(&doc(json!({"gpus": g, "conditions": c})));
    assert_eq!(
        (r.gpus.len(), r.conditions.len()),
        (MAX_GPUS, MAX_CONDITIONS)
    );
}

#[test]
fn an_unreadable_document_says_why_under_its_file_name() {
    let r = resource(&Doc {
        origin: "InferenceServer-default_a.yaml".into(),
        kind: Kind::Server,
        value: Err("bad YAML\x07".into()),
    });
    assert_eq!(r.name, "InferenceServer-default_a");
    assert_eq!(r.unreadable.as_deref(), Some("bad YAML\u{fffd}"));
}
