use super::Staging;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// Finding 6: staged files had predictable names in /tmp, mode 0644, and followed symlinks.
#[test]
fn staged_files_are_private_random_and_never_follow_a_planted_path() {
    let state = tempfile::tempdir().unwrap();
    let s = Staging::open(state.path()).unwrap();
    let dir = state.path().join("staging");
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    let a = s.file(b"Environment=HF_TOKEN=x").unwrap();
    let b = s.file(b"two").unwrap();
    assert_ne!(a.to_path_buf(), b.to_path_buf());
    assert!(a.starts_with(&dir));
    assert_eq!(std::fs::metadata(&a).unwrap().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read(&a).unwrap(), b"Environment=HF_TOKEN=x");
    let gone = a.to_path_buf();
    drop(a);
    assert!(!gone.exists(), "removed after use");
}

#[test]
fn a_loose_or_planted_staging_directory_is_tightened_or_refused() {
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().join("staging");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    Staging::open(state.path()).unwrap();
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    let state2 = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(state.path(), state2.path().join("staging")).unwrap();
    assert!(
        Staging::open(state2.path()).is_err(),
        "a symlink is refused"
    );
}

#[test]
fn a_staged_file_left_by_a_killed_push_is_removed_and_a_fresh_one_kept() {
    let state = tempfile::tempdir().unwrap();
    let s = Staging::open(state.path()).unwrap();
    let live = s.file(b"in use").unwrap();
    let dead = state.path().join("staging/gpuplane-left");
    std::fs::write(&dead, "unit text").unwrap();
    crate::testutil::set_mtime_ago(&dead, 3700);
    Staging::open(state.path()).unwrap();
    assert!(!dead.exists(), "an hour-old staged file is a killed push's");
    assert!(live.exists(), "a fresh one belongs to a push in progress");
}
