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

/// Writes `text` to `f` as `cat > f` does: one open that truncates, a pause of `pause` with the
/// file empty and open, the text, the close. Returns once it has truncated.
fn cat_slowly(f: &Path, text: &'static str, pause: Duration) -> std::thread::JoinHandle<()> {
    use std::io::Write as _;
    let mut file = std::fs::File::create(f).unwrap();
    std::thread::spawn(move || {
        std::thread::sleep(pause);
        file.write_all(text.as_bytes()).unwrap();
    })
}

#[test]
fn a_file_written_in_two_steps_is_read_whole() {
    // As `cat > f` writes: truncated first, filled a little later, closed.
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("server.yaml");
    std::fs::write(&f, "kind: InferenceServer # v1\n").unwrap();
    let w = Watch::new(d.path());
    let writer = cat_slowly(&f, "kind: InferenceServer\n", Duration::from_millis(150));
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
fn a_writer_that_pauses_longer_than_any_settle_time_is_read_once_it_closes() {
    // Longer than QUIET, the fixed quiet time the agent once waited: the file is held open
    // and empty for 1.2 s, and only its close says the write is finished.
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("server.yaml");
    std::fs::write(&f, "kind: InferenceServer # v1\n").unwrap();
    let w = Watch::new(d.path());
    let writer = cat_slowly(
        &f,
        "kind: InferenceServer # v2\n",
        Duration::from_millis(1200),
    );
    w.until_quiet();
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        "kind: InferenceServer # v2\n"
    );
    writer.join().unwrap();
}

#[test]
fn a_finished_write_is_read_at_once_not_after_a_quiet_time() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("server.yaml");
    std::fs::write(&f, "v: 1\n").unwrap();
    let w = Watch::new(d.path());
    std::fs::write(&f, "v: 2\n").unwrap();
    let t = Instant::now();
    w.until_quiet();
    assert!(t.elapsed() < QUIET, "{:?}", t.elapsed());
    // A file renamed into place is finished too.
    let tmp = d.path().join(".server.yaml.tmp");
    std::fs::write(&tmp, "v: 3\n").unwrap();
    std::fs::rename(&tmp, &f).unwrap();
    let t = Instant::now();
    w.until_quiet();
    assert!(t.elapsed() < QUIET, "{:?}", t.elapsed());
}

#[test]
fn a_file_modified_in_the_future_does_not_hold_the_read_forever() {
    // The rule without inotify: modification times.
    let d = tempfile::tempdir().unwrap();
    let f = std::fs::File::create(d.path().join("a.yaml")).unwrap();
    f.set_modified(SystemTime::now() + Duration::from_secs(3600))
        .unwrap();
    let w = Watch::polling(d.path());
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

#[test]
fn without_inotify_a_file_written_in_two_opens_is_read_once_quiet() {
    // The modification-time rule: truncated and closed, filled 150 ms later.
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("server.yaml");
    std::fs::write(&f, "").unwrap();
    let w = Watch::polling(d.path());
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
fn a_symlinked_directory_swapped_in_one_rename_is_followed_at_once() {
    // As git-sync publishes a revision: a new directory, then the link renamed over the old.
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (d.path().join("rev-a"), d.path().join("rev-b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::write(a.join("server.yaml"), "v: 1\n").unwrap();
    let live = d.path().join("live");
    std::os::unix::fs::symlink(&a, &live).unwrap();
    let mut w = Watch::new(&live);
    std::fs::create_dir(&b).unwrap();
    std::fs::write(b.join("server.yaml"), "v: 2\n").unwrap();
    let next = d.path().join("live.new");
    std::os::unix::fs::symlink(&b, &next).unwrap();
    // The changes come 100 ms into each wait: woken by an event, the wait ends well before the
    // 1 s poll would have seen them.
    let later = |f: Box<dyn FnOnce() + Send>| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            f()
        })
    };
    let (n, l) = (next.clone(), live.clone());
    let swap = later(Box::new(move || std::fs::rename(n, l).unwrap()));
    let t = Instant::now();
    assert_eq!(w.wait(Duration::from_secs(60), None), Wake::Changed);
    assert!(
        t.elapsed() < POLL,
        "woken by the swap, not the poll: {:?}",
        t.elapsed()
    );
    swap.join().unwrap();
    let got = w.read_stable(|| std::fs::read_to_string(live.join("server.yaml")).unwrap());
    assert_eq!(got, "v: 2\n");
    // The watch followed the link: a write in the new directory wakes it too.
    let f = b.join("server.yaml");
    let write = later(Box::new(move || std::fs::write(f, "v: 3\n").unwrap()));
    let t = Instant::now();
    assert_eq!(w.wait(Duration::from_secs(60), None), Wake::Changed);
    assert!(t.elapsed() < POLL, "{:?}", t.elapsed());
    write.join().unwrap();
}
