use super::Recent;
use std::cell::Cell;

#[test]
fn an_equal_input_is_answered_from_memory_a_changed_one_is_computed() {
    let runs = Cell::new(0);
    let len = |s: &str| {
        runs.set(runs.get() + 1);
        Some(s.len())
    };
    let mut m: Recent<String, usize> = Recent::new(2);
    assert_eq!(m.get("abc", len), Some(3));
    assert_eq!(m.get("abc", len), Some(3));
    assert_eq!(runs.get(), 1, "the second ask is answered from memory");
    assert_eq!(m.get("abcd", len), Some(4));
    assert_eq!(runs.get(), 2, "a changed input is computed");
}

#[test]
fn at_most_max_inputs_are_kept_the_oldest_goes_first_and_none_is_not_kept() {
    let runs = Cell::new(0);
    let len = |s: &str| {
        runs.set(runs.get() + 1);
        Some(s.len())
    };
    let mut m: Recent<String, usize> = Recent::new(2);
    for s in ["a", "bb", "ccc"] {
        m.get(s, len);
    }
    assert_eq!(m.len(), 2);
    m.get("a", len);
    assert_eq!(
        runs.get(),
        4,
        "the oldest input was dropped and computed again"
    );
    m.get("ccc", len);
    assert_eq!(runs.get(), 4, "a recent one is still kept");
    let mut e: Recent<String, usize> = Recent::new(2);
    assert_eq!(e.get("x", |_| None), None);
    assert!(e.is_empty(), "a None is not remembered");
}
