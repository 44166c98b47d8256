use super::*;

#[test]
fn commands_get_killed_at_the_deadline() {
    let e = run(&["sleep".into(), "5".into()], Duration::from_millis(200)).unwrap_err();
    assert!(e.to_string().contains("did not finish"), "{e}");
    let o = run(
        &[
            "sh".into(),
            "-c".into(),
            "echo hi; echo err >&2; exit 3".into(),
        ],
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(
        (o.code, o.stdout.as_str(), o.stderr.as_str()),
        (Some(3), "hi\n", "err\n")
    );
}

#[test]
fn a_blocking_write_becomes_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("unbind");
    // A FIFO with no reader blocks open(2) for writing, like a driver that does not let go.
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let e = sysfs_write(&fifo, "0000:01:00.0", Duration::from_millis(300)).unwrap_err();
    assert!(e.to_string().contains("blocked for more than"), "{e}");
}
