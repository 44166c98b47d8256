use super::clean;

/// Finding 8: a crashed server's log went into status and events unsanitized and uncapped.
#[test]
fn a_hostile_log_tail_is_bounded_and_one_line_each() {
    let mut lines: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
    lines.push(format!("\u{1b}]0;pwned\u{7}{}", "é".repeat(10_000)));
    let c = clean(&lines);
    assert_eq!(c.len(), 30);
    assert_eq!(c[0], "line 71");
    let last = c.last().unwrap();
    assert!(
        last.len() <= 512 && !last.chars().any(|ch| ch.is_control()),
        "{last:?}"
    );
}
