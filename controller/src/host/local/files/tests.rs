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
    assert!(r.unwrap_err().to_string().contains("cfs-lock"));
    assert!(!lock.exists(), "released after use");
    let fl = d.path().join("pve-config-129.lock");
    let held = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&fl)
        .unwrap();
    held.lock().unwrap();
    let e = with_flock(&fl, Duration::from_millis(300), || Ok(())).unwrap_err();
    assert!(e.to_string().contains("can't lock"), "{e}");
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
