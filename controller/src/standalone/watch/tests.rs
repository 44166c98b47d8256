use super::*;

/// Makes `p` a minute old, as a file written long before.
fn backdate(p: &Path) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(60))
        .unwrap();
}

#[test]
fn a_write_wakes_the_wait_long_before_it_times_out() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.yaml"), "x: 1\n").unwrap();
    let mut w = Watch::new(d.path());
    let p = d.path().join("a.yaml");
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        std::fs::write(p, "x: 22\n").unwrap();
    });
    let t = Instant::now();
    assert_eq!(w.wait(Duration::from_secs(60), None), Wake::Changed);
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    writer.join().unwrap();
    w.read_stable(|| ());
    assert_eq!(w.wait(Duration::from_millis(300), None), Wake::Timeout);
}

#[test]
fn the_probe_wakes_the_wait_and_nothing_else_changes() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.yaml"), "x: 1\n").unwrap();
    let mut w = Watch::new(d.path());
    let mut asked = 0;
    let mut probe = || {
        asked += 1;
        asked == 3
    };
    assert_eq!(
        w.wait(Duration::from_secs(60), Some(&mut probe)),
        Wake::Ready
    );
    assert_eq!(asked, 3);
}

#[test]
fn a_file_written_in_two_steps_is_read_whole() {
    // As `cat > f` writes: truncated first, filled a little later.
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("server.yaml");
    std::fs::write(&f, "").unwrap();
    let w = Watch::new(d.path());
    let g = f.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        std::fs::write(g, "kind: InferenceServer\n").unwrap();
    });
    w.until_quiet();
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "kind: InferenceServer\n"
    );
    writer.join().unwrap();
}

#[test]
fn a_file_removed_and_created_again_is_read_once_it_is_back() {
    // As `git checkout` replaces a changed file: unlinked, then created and written.
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("server.yaml");
    std::fs::write(d.path().join("partition.yaml"), "kind: GpuPartition\n").unwrap();
    std::fs::write(&f, "kind: InferenceServer\n").unwrap();
    backdate(&d.path().join("partition.yaml"));
    backdate(&f);
    let w = Watch::new(d.path());
    std::fs::remove_file(&f).unwrap();
    let g = f.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        std::fs::write(g, "kind: InferenceServer # v2\n").unwrap();
    });
    w.until_quiet();
    assert_eq!(
        std::fs::read_to_string(&f).ok().as_deref(),
        Some("kind: InferenceServer # v2\n")
    );
    writer.join().unwrap();
}

#[test]
fn a_read_the_directory_changed_under_is_done_again() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("server.yaml");
    std::fs::write(&f, "v: 1\n").unwrap();
    backdate(&f);
    let mut w = Watch::new(d.path());
    let mut reads = 0;
    let got = w.read_stable(|| {
        reads += 1;
        let text = std::fs::read_to_string(&f).unwrap();
        if reads == 1 {
            // A writer, while the agent reads.
            std::fs::write(&f, "v: 2 # a longer text\n").unwrap();
        }
        text
    });
    assert_eq!((reads, got.as_str()), (2, "v: 2 # a longer text\n"));
    // What was read is what counts as seen: no change is pending.
    assert_eq!(w.wait(Duration::from_millis(300), None), Wake::Timeout);
}

#[test]
fn a_file_modified_in_the_future_does_not_hold_the_read_forever() {
    let d = tempfile::tempdir().unwrap();
    let f = std::fs::File::create(d.path().join("a.yaml")).unwrap();
    f.set_modified(SystemTime::now() + Duration::from_secs(3600))
        .unwrap();
    let w = Watch::new(d.path());
    let t = Instant::now();
    w.until_quiet();
    assert!(t.elapsed() >= QUIET_MAX, "{:?}", t.elapsed());
}

#[test]
fn a_stop_ends_the_wait_at_once_and_stays() {
    let d = tempfile::tempdir().unwrap();
    let mut w = Watch::new(d.path());
    let stopper = w.stopper();
    assert!(!w.stopped());
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        stopper.stop();
    });
    assert_eq!(w.wait(Duration::from_secs(3600), None), Wake::Stopped);
    t.join().unwrap();
    assert!(w.stopped());
    assert_eq!(w.wait(Duration::from_secs(3600), None), Wake::Stopped);
}

#[test]
fn only_what_is_read_counts_as_a_change() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a.yaml"), "x: 1\n").unwrap();
    let mut w = Watch::new(d.path());
    // A git checkout's own files and an editor's swap file are not manifests.
    std::fs::create_dir(d.path().join(".git")).unwrap();
    std::fs::write(d.path().join(".git/FETCH_HEAD"), "abc\n").unwrap();
    std::fs::write(d.path().join(".a.yaml.swp"), "x").unwrap();
    assert_eq!(w.wait(Duration::from_millis(1500), None), Wake::Timeout);
    std::fs::write(d.path().join("b.yml"), "x: 2\n").unwrap();
    assert_eq!(w.wait(Duration::from_secs(60), None), Wake::Changed);
}

#[test]
fn a_single_file_is_watched_through_its_directory() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("only.yaml");
    std::fs::write(&f, "x: 1\n").unwrap();
    let mut w = Watch::new(&f);
    assert_eq!(w.wait(Duration::from_millis(100), None), Wake::Timeout);
    let tmp = d.path().join("only.yaml.new");
    std::fs::write(&tmp, "x: 2 # replaced by rename\n").unwrap();
    std::fs::rename(&tmp, &f).unwrap();
    assert_eq!(w.wait(Duration::from_secs(60), None), Wake::Changed);
}
