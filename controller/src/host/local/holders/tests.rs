use super::*;

#[test]
fn cgroups_attribute_processes() {
    assert_eq!(
        attribution("0::/lxc/129/ns/system.slice/sglang-qwen.service\n"),
        (Some(129), None, Some("sglang-qwen.service".into())),
        "a container's process names the unit of the container's own systemd"
    );
    assert_eq!(
        attribution("0::/lxc.payload.130/init.scope\n"),
        (Some(130), None, None)
    );
    assert_eq!(
        attribution("0::/qemu.slice/200.scope\n"),
        (None, Some(200), None)
    );
    assert_eq!(
        attribution("0::/system.slice/nvidia-persistenced.service\n"),
        (None, None, Some("nvidia-persistenced.service".into()))
    );
    assert_eq!(
        attribution("0::/user.slice/user-0.slice/session-3.scope\n"),
        (None, None, None)
    );
}

#[test]
fn device_numbers_decode_like_the_kernel() {
    // makedev(195, 3) and makedev(511, 0) in glibc's encoding
    assert_eq!(dev_numbers((195 << 8) | 3), (195, 3));
    assert_eq!(dev_numbers(511u64 << 8), (511, 0));
    // majors above 4095 keep their high bits at bit 32+
    assert_eq!(dev_numbers((4096u64 << 32) | 5), (4096, 5));
}

#[test]
fn only_a_dev_target_is_followed() {
    // A directory of links as /proc/<pid>/fd is.
    let t = tempfile::tempdir().unwrap();
    let fds = t.path().join("fd");
    std::fs::create_dir(&fds).unwrap();
    // A descriptor of a device node: its numbers are read.
    std::os::unix::fs::symlink("/dev/null", fds.join("3")).unwrap();
    // A descriptor of a file elsewhere (think: a hung FUSE mount) is never stat'ed, even when
    // the file turns out to be a device.
    let elsewhere = t.path().join("elsewhere");
    std::os::unix::fs::symlink("/dev/null", &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, fds.join("4")).unwrap();
    // Sockets and pipes: names, no numbers.
    std::os::unix::fs::symlink("socket:[1234]", fds.join("5")).unwrap();
    let mut seen = vec![];
    for_each_fd(&fds, |target, number| {
        seen.push((target.to_string(), number))
    });
    seen.sort();
    let mut want = vec![
        ("/dev/null".to_string(), Some((1, 3))),
        (elsewhere.display().to_string(), None),
        ("socket:[1234]".to_string(), None),
    ];
    want.sort();
    assert_eq!(seen, want);
    // A process gone: no descriptors, no error.
    for_each_fd(&t.path().join("gone"), |_, _| panic!("nothing to see"));
}

#[test]
fn a_split_scan_answers_as_one_thread_would() {
    let items: Vec<u32> = (0..1000).collect();
    let odd = |c: &[u32]| c.iter().copied().filter(|x| x % 2 == 1).collect::<Vec<_>>();
    assert_eq!(
        split_over_threads(&items, 8, odd),
        odd(&items),
        "all, in order"
    );
    assert_eq!(
        split_over_threads(&items, 1, odd),
        odd(&items),
        "one thread"
    );
    assert_eq!(split_over_threads(&items[..3], 8, odd), vec![1]);
    assert!(split_over_threads(&[] as &[u32], 8, odd).is_empty());
    assert!(threads_for(1) == 1 && threads_for(10_000) <= SCAN_THREADS_MAX);
}

#[test]
#[should_panic(expected = "a scan thread failed")]
fn a_scan_thread_that_panics_is_not_an_empty_answer() {
    let items: Vec<u32> = (0..1000).collect();
    split_over_threads(&items, 8, |c: &[u32]| -> Vec<u32> {
        if c.contains(&999) {
            panic!("a scan thread failed");
        }
        c.to_vec()
    });
}

#[test]
fn this_machines_proc_shows_a_child_that_holds_a_node() {
    // The real /proc (every process's descriptors, split over threads): a child whose stdin is
    // /dev/null holds "the device" /dev/null.
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut n = Nodes::default();
    n.paths.insert("/dev/null".into());
    let nodes = vec![("0000:01:00.0".to_string(), n)];
    let found = scan_nodes(&Root("/".into()), &nodes);
    // The same scan begun beside other work (an observation's), on a thread of its own here.
    let beside = HolderScan::start(&Root("/".into()), nodes.clone()).finish();
    child.kill().unwrap();
    let pids = |a: &Answer| {
        a["0000:01:00.0"]
            .iter()
            .map(|h| h.pid)
            .collect::<BTreeSet<_>>()
    };
    assert!(
        pids(&beside).contains(&child.id()),
        "the scan begun beside sees the child"
    );

    child.wait().unwrap();
    let holders = &found["0000:01:00.0"];
    let h = holders
        .iter()
        .find(|h| h.pid == child.id())
        .expect("the child is seen");
    assert_eq!(h.command, "sleep");
    assert!(
        holders.iter().all(|h| h.pid != std::process::id()),
        "the agent itself is never its own GPU's holder"
    );
}
