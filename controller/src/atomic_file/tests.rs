//! The one writer against planted links and unsafe directories.

use super::{check_dir, temp_name, write, Error};
use std::os::unix::fs::PermissionsExt;

#[test]
fn replaces_whole_with_the_mode_asked_and_leaves_no_temp() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("a.json");
    write(&p, b"[1]", 0o600).unwrap();
    write(&p, b"[]", 0o644).unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "[]");
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["a.json"]);
}

/// Issue 37: a link planted at the target's name or at the temporary name is never written
/// through; the file the link names keeps its bytes.
#[test]
fn a_planted_link_is_replaced_never_followed() {
    let d = tempfile::tempdir().unwrap();
    let victim = d.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let p = d.path().join("servers.json");
    std::os::unix::fs::symlink(&victim, &p).unwrap();
    std::os::unix::fs::symlink(&victim, temp_name(&p, std::process::id())).unwrap();
    write(&p, b"[]", 0o644).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(!std::fs::symlink_metadata(&p).unwrap().is_symlink());
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "[]");
}

#[test]
fn a_dead_writers_temp_is_removed_and_reported_a_live_ones_kept() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("f");
    let dead = temp_name(&p, 999_999_999);
    let live = temp_name(&p, 1);
    std::fs::write(&dead, "x").unwrap();
    std::fs::write(&live, "x").unwrap();
    let removed = write(&p, b"y", 0o644).unwrap();
    assert_eq!(removed, vec![dead.clone()]);
    assert!(!dead.exists() && live.exists());
}

#[test]
fn too_large_is_refused_and_the_old_file_kept() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("f");
    write(&p, b"old", 0o644).unwrap();
    let big = vec![b'x'; super::MAX_LEN + 1];
    assert!(matches!(
        write(&p, &big, 0o644),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(std::fs::read(&p).unwrap(), b"old");
}

/// Issue 37: a directory someone else can write is refused, saying how to fix it; one under a
/// sticky world-writable directory (`/tmp`) that only root or the agent writes is accepted.
#[test]
fn a_directory_others_can_write_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let ok = d.path().join("ok");
    check_dir(&ok).unwrap();
    let open = d.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = check_dir(&open).unwrap_err();
    assert!(e.contains("mode 777") && e.contains("chmod 0755"), "{e}");
    // Below a directory others may write (not sticky): refused too, naming that directory.
    let below = open.join("sd");
    let e = check_dir(&below).unwrap_err();
    assert!(
        e.starts_with(&open.canonicalize().unwrap().display().to_string()),
        "{e}"
    );
    // Group-writable by a group other than root's.
    let group = d.path().join("group");
    std::fs::create_dir(&group).unwrap();
    std::fs::set_permissions(&group, std::fs::Permissions::from_mode(0o775)).unwrap();
    std::os::unix::fs::chown(&group, None, Some(1234)).unwrap();
    assert!(check_dir(&group).is_err());
}
