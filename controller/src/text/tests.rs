use super::{sanitize, truncate, EVENT_NOTE_MAX};

/// Finding 4: `note.truncate(1000)` panicked when byte 1000 fell inside a character.
#[test]
fn cutting_inside_a_multibyte_character_does_not_panic() {
    for pad in 0..4 {
        let s = format!("{}{}", "a".repeat(pad), "é€😀".repeat(400));
        let t = truncate(&s, EVENT_NOTE_MAX);
        assert!(t.len() <= EVENT_NOTE_MAX && t.ends_with('…'), "{pad}");
        assert!(s.starts_with(t.trim_end_matches('…')));
    }
    assert_eq!(truncate("short", 10), "short");
    assert_eq!(truncate("ab", 0), "");
}

#[test]
fn control_characters_cannot_forge_lines_or_escapes() {
    let s = sanitize("ok\nReady=True\u{1b}[31m\r\tx", 100);
    assert_eq!(s, "ok Ready=True\u{fffd}[31m \tx");
    assert!(sanitize(&"😀".repeat(10_000), 64).len() <= 64);
}
