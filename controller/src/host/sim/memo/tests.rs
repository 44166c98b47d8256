use super::*;

#[test]
fn a_changed_text_is_parsed_again_and_an_unchanged_one_is_not() {
    let m: Memo<usize> = Memo::default();
    let mut parses = 0;
    let mut get = |t: &str| {
        *m.get(t, |t| {
            parses += 1;
            t.len()
        })
    };
    assert_eq!((get("ab"), get("ab"), get("abc")), (2, 2, 3));
    assert_eq!(parses, 2, "the unchanged text was not parsed again");
}

#[test]
fn it_starts_afresh_when_full() {
    let m: Memo<usize> = Memo::default();
    for i in 0..(MAX + 3) {
        m.get(&i.to_string(), |t| t.len());
    }
    assert!(m.0.lock().unwrap().len() <= MAX);
}
