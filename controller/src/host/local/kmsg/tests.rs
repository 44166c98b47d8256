use super::*;

#[test]
fn a_record_gives_its_sequence_number_and_first_line() {
    assert_eq!(
        parse("6,112,2093,-;vfio-pci 0000:41:00.0: enabling\n SUBSYSTEM=pci"),
        Some((112, "vfio-pci 0000:41:00.0: enabling"))
    );
    assert_eq!(parse("6,x,1,-;no number"), None);
    assert_eq!(parse("no header"), None);
}

#[test]
fn under_a_test_root_the_file_is_read_whole_at_each_look() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("dev")).unwrap();
    std::fs::write(t.path().join("dev/kmsg"), "one\n").unwrap();
    let root = Root(t.path().to_path_buf());
    let mut m = Mirror::default();
    assert_eq!(m.read(&root), "one\n");
    std::fs::write(t.path().join("dev/kmsg"), "one\ntwo\n").unwrap();
    assert_eq!(m.read(&root), "one\ntwo\n");
}

/// On this machine's own kernel log (where the test may read it): the mirror's second look
/// gives what a fresh read of the whole ring gives.
#[test]
fn a_second_look_matches_a_fresh_read_of_the_ring() {
    let Some(mut f) = open() else {
        eprintln!("/dev/kmsg is not readable here: nothing to compare");
        return;
    };
    let root = Root("/".into());
    let mut m = Mirror::default();
    let _ = m.read(&root);
    let second = m.read(&root);
    let mut fresh = String::new();
    records(&mut f, MAX_RECORDS, |_, msg| {
        fresh.push_str(msg);
        fresh.push('\n');
    });
    // A record logged between the two reads would be in the fresh one only.
    assert_eq!(
        second.is_empty(),
        fresh.is_empty(),
        "{second:?} against {fresh:?}"
    );
    assert!(
        fresh.starts_with(&second),
        "the mirror's {} bytes are not the ring's first {} bytes",
        second.len(),
        fresh.len()
    );
}

/// A look whose ring's first record cannot be told drops nothing: what the reader consumed is
/// never read again, so clearing it would lose the kernel log for the agent's life.
#[test]
fn a_failed_probe_keeps_what_was_read() {
    if open().is_none() {
        eprintln!("/dev/kmsg is not readable here: nothing to keep");
        return;
    }
    let root = Root("/".into());
    let mut m = Mirror::default();
    let first = m.read(&root);
    m.probe = None;
    let second = m.read(&root);
    assert!(
        !first.is_empty() && second.starts_with(&first),
        "{} bytes read, {} kept",
        first.len(),
        second.len()
    );
}
