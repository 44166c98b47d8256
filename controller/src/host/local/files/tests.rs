use super::*;

#[test]
fn atomic_write_replaces_and_leaves_no_temp() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("129.conf");
    std::fs::write(&p, "old").unwrap();
    write_atomic(&p, "new\n").unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "new\n");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
}

#[test]
fn locks_exclude_each_other() {
    let d = tempfile::tempdir().unwrap();
    let lock = d.path().join("priv/lock/file-mapping_pci_cfg");
    let r = with_cfs_lock(&lock, Duration::from_secs(1), || {
        assert!(lock.is_dir());
        with_cfs_lock(&lock, Duration::from_millis(300), || Ok(())).map(|_| ())
    });
    // A live writer's lock is a wait, named, not a failure.
    let e = r.unwrap_err();
    assert!(
        matches!(&e, LocalError::LockHeld { lock: l, .. } if *l == lock),
        "{e}"
    );
    assert!(e.to_string().contains("is held"), "{e}");
    assert!(!lock.exists(), "released after use");
    let fl = d.path().join("pve-config-129.lock");
    let held = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&fl)
        .unwrap();
    held.lock().unwrap();
    let e = with_flock(&fl, Duration::from_millis(300), || Ok(())).unwrap_err();
    assert!(
        matches!(
            e,
            LocalError::LockHeld {
                held_secs: None,
                ..
            }
        ),
        "{e}"
    );
    held.unlock().unwrap();
    assert!(with_flock(&fl, Duration::from_millis(300), || Ok(1)).is_ok());
}

#[test]
fn a_replaced_file_keeps_its_mode_and_a_new_one_gets_a_fixed_one() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for m in [0o600, 0o640, 0o755] {
        let p = t.path().join(format!("f{m:o}"));
        std::fs::write(&p, "old\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
        write_atomic(&p, "new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new\n");
        assert_eq!(mode(&p), m, "{}", p.display());
    }
    let fresh = t.path().join("unit.service");
    write_atomic(&fresh, "x\n").unwrap();
    assert_eq!(mode(&fresh), 0o644);
    let pve = t.path().join("etc/pve/lxc");
    std::fs::create_dir_all(&pve).unwrap();
    let conf = pve.join("101.conf");
    write_atomic(&conf, "x\n").unwrap();
    assert_eq!(mode(&conf), 0o640);
    // No temp file is left beside them.
    assert_eq!(std::fs::read_dir(&pve).unwrap().count(), 1);
}

#[test]
fn a_dead_writers_cfs_lock_is_removed_at_120_s_and_never_before() {
    let d = tempfile::tempdir().unwrap();
    let lock = d.path().join("priv/lock/file-mapping_pci_cfg");
    std::fs::create_dir_all(&lock).unwrap();
    // 110 s old: a live writer may still hold it; we wait and leave it.
    crate::testutil::set_mtime_ago(&lock, 110);
    let e = with_cfs_lock(&lock, Duration::from_millis(300), || Ok(())).unwrap_err();
    match &e {
        LocalError::LockHeld { held_secs, .. } => {
            assert!(held_secs.is_some_and(|s| (110..115).contains(&s)), "{e}")
        }
        _ => panic!("{e}"),
    }
    assert!(lock.is_dir(), "a lock younger than 120 s is never removed");
    // 121 s old: pmxcfs's rule says its writer is gone.
    crate::testutil::set_mtime_ago(&lock, 121);
    let (v, removed) = with_cfs_lock(&lock, Duration::from_millis(300), || Ok(7)).unwrap();
    assert_eq!(v, 7);
    let removed = removed.expect("reported");
    assert!(
        matches!(&removed, Leftover::StaleLock { age_secs, .. } if *age_secs >= 120),
        "{removed}"
    );
    assert!(removed.to_string().contains("stale lock"), "{removed}");
    assert!(!lock.exists(), "taken, then released");
}

#[test]
fn a_temp_file_of_a_dead_writer_is_removed_by_the_next_write_and_a_live_ones_is_kept() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("pci.cfg");
    std::fs::write(&p, "old\n").unwrap();
    // A pid that cannot run (above the kernel's pid_max limit) and one that runs (ours is
    // skipped by name, so take pid 1).
    let dead = d.path().join("pci.cfg.tmp.4194305");
    let live = d.path().join("pci.cfg.tmp.1");
    let other = d.path().join("other.cfg.tmp.4194305");
    for f in [&dead, &live, &other] {
        std::fs::write(f, "half").unwrap();
    }
    let left = write_atomic(&p, "new\n").unwrap();
    assert_eq!(left, vec![Leftover::TempFile { path: dead.clone() }]);
    assert!(!dead.exists());
    assert!(
        live.exists(),
        "a running writer's temporary file is its own"
    );
    assert!(
        other.exists(),
        "another file's temporary file is not ours to judge"
    );
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "new\n");
}

#[test]
fn pmxcfs_is_told_from_the_mount_table() {
    let mounts = "sysfs /sys sysfs rw 0 0\n/dev/sda1 / ext4 rw 0 0\n/dev/fuse /etc/pve fuse rw,nosuid,nodev,relatime,user_id=0,group_id=0,default_permissions,allow_other 0 0\n";
    let lock = std::path::Path::new("/etc/pve/priv/lock/file-mapping_pci_cfg");
    assert!(on_pmxcfs(mounts, lock));
    assert!(!on_pmxcfs(
        mounts,
        std::path::Path::new("/tmp/root/etc/pve/priv/lock/x")
    ));
    // A plain /etc/pve (no pmxcfs): the longest mount point that holds it is ext4.
    assert!(!on_pmxcfs("/dev/sda1 / ext4 rw 0 0\n", lock));
    // Another FUSE file system is not pmxcfs's.
    assert!(!on_pmxcfs("sshfs#h: /etc/pve fuse.sshfs rw 0 0\n", lock));
}
