use super::*;

fn spec(a: &str, steps: Option<u32>, topk: Option<u32>, draft: Option<u32>) -> SpeculativeSpec {
    SpeculativeSpec {
        algorithm: a.into(),
        num_steps: steps,
        eagle_topk: topk,
        num_draft_tokens: draft,
        draft_model_path: None,
    }
}

#[test]
fn reference_mtp_is_valid() {
    assert!(check(&spec("NEXTN", Some(3), Some(1), Some(4))).is_empty());
    assert!(check(&spec("nextn", None, None, None)).is_empty());
    assert!(check(&spec("EAGLE", Some(3), Some(4), Some(8))).is_empty());
}

#[test]
fn rejects_what_sglang_rejects_or_rewrites() {
    assert_eq!(check(&spec("MTP", None, None, None))[0].0, "algorithm");
    assert_eq!(check(&spec("NEXTN", None, Some(1), None))[0].0, "numSteps");
    assert_eq!(
        check(&spec("NEXTN", Some(3), None, Some(4)))[0].0,
        "eagleTopk"
    );
    let p = check(&spec("NEXTN", Some(3), Some(1), Some(10)));
    assert_eq!(p[0].0, "numDraftTokens");
    assert!(p[0].1.contains("numDraftTokens: 4"));
    // Found by checking against SGLang 0.5.23 itself (e2e/tests/sglang_args.rs):
    assert_eq!(check(&spec("NGRAM", None, Some(1), None))[0].0, "eagleTopk");
    assert_eq!(
        check(&spec("EAGLE", Some(299), Some(4), Some(300)))[0].0,
        "numDraftTokens"
    );
    assert!(check(&spec("EAGLE", Some(255), Some(4), Some(256))).is_empty());
}
