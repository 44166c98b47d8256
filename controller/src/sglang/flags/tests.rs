use super::*;

#[test]
fn table_has_the_real_flags() {
    assert!(table().len() >= 535);
    assert!(lookup("--tp-size").is_some());
    assert_eq!(
        lookup("--tensor-parallel-size").map(|f| f.name.as_str()),
        Some("--tp-size")
    );
    assert!(lookup("--disable-custom-all-reduce").is_some_and(|f| f.is_switch));
    assert!(!lookup("--speculative-num-steps").is_some_and(|f| f.is_switch));
    assert!(lookup("--tp").is_none());
}

#[test]
fn parser_choices() {
    assert!(check_choice("--tool-call-parser", "qwen3_coder").is_ok());
    assert!(check_choice("--reasoning-parser", "qwen3").is_ok());
    let err = check_choice("--reasoning-parser", "qwen35").unwrap_err();
    assert!(err.contains("qwen3-thinking"), "{err}");
}
