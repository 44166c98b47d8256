use super::*;

/// `sh -c script` under `deadline`, and how long the call took.
fn sh(script: &str, deadline: Duration) -> (Result<CmdOutput, LocalError>, Duration) {
    let t = Instant::now();
    let r = run(&["sh".into(), "-c".into(), script.into()], deadline);
    (r, t.elapsed())
}

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

/// Finding 4: a timeout killed only the direct child; a grandchild holding the pipes kept the
/// agent waiting (and ran on).
#[test]
fn the_deadline_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("grandchild-ran");
    let script = format!("(sleep 1; touch {}) & sleep 5", mark.display());
    let (r, took) = sh(&script, Duration::from_millis(200));
    let e = r.unwrap_err();
    assert!(e.to_string().contains("did not finish"), "{e}");
    assert!(took < Duration::from_secs(3), "waited for the grandchild");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!mark.exists(), "the grandchild outlived the deadline");
}

/// Finding 4: output of the container's own binaries was unbounded.
#[test]
fn output_is_bounded() {
    let o = run(
        &["sh".into(), "-c".into(), "head -c 5000000 /dev/zero".into()],
        Duration::from_secs(20),
    )
    .unwrap();
    assert_eq!(o.code, Some(0));
    assert_eq!(o.stdout.len(), OUTPUT_MAX);
}

/// Finding 8: children inherited the agent's whole environment.
#[test]
fn children_get_only_a_minimal_environment() {
    std::env::set_var("GPUPLANE_TEST_SECRET", "s3cret");
    let o = run(&["env".into()], Duration::from_secs(5)).unwrap();
    assert!(!o.stdout.contains("s3cret"), "{}", o.stdout);
    assert!(o.stdout.contains("PATH=/usr/local/sbin:"), "{}", o.stdout);
    let o = run_with_input(&["cat".into()], Some(b"from stdin"), Duration::from_secs(5)).unwrap();
    assert_eq!(o.stdout, "from stdin");
}

/// Issue 23: a child that exits but leaves a process holding its stdout (a container's `cat`
/// that leaves `sleep 100000 &` behind) hung the agent: the readers waited for an end of file
/// that never came, the host lock held all along. Now the call ends within its deadline, kills
/// what is left of the group, and says so.
#[test]
fn a_process_left_holding_the_output_does_not_hang_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo hi; sleep 100 & echo $! > {}", pidfile.display());
    let (r, took) = sh(&script, Duration::from_millis(800));
    let e = r.unwrap_err();
    assert!(took < Duration::from_secs(20), "returned after {took:?}");
    assert!(matches!(e, LocalError::OutputHeld { .. }), "{e}");
    assert!(e.to_string().contains("kept its output open"), "{e}");
    // The one left behind was in the child's group: it is gone.
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .to_string();
    let mut gone = false;
    for _ in 0..100 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.split(' ').nth(2) == Some("Z") {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone, "sleep {pid} outlived the call");

    // One that left its own session (out of reach of the group kill) is abandoned, not waited for.
    let (r, took) = sh("setsid sleep 30 & echo hi", Duration::from_millis(800));
    let e = r.unwrap_err();
    assert!(took < Duration::from_secs(20), "returned after {took:?}");
    assert!(matches!(e, LocalError::OutputHeld { .. }), "{e}");
}
