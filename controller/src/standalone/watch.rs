//! Waiting for the manifests to change: a cheap fingerprint (names, sizes, modification times)
//! of the directory, polled every second. Polling needs no inotify limits and works on every
//! filesystem a `git pull` may write to.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// What the directory looked like.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fingerprint(Vec<(String, u64, Option<SystemTime>)>);

/// The fingerprint of `dir` (or of the one file `dir` names) now.
pub fn fingerprint(dir: &Path) -> Fingerprint {
    let mut v = Vec::new();
    let entries: Vec<std::path::PathBuf> = if dir.is_dir() {
        std::fs::read_dir(dir)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    } else {
        vec![dir.to_path_buf()]
    };
    for p in entries {
        if let Ok(m) = std::fs::metadata(&p) {
            v.push((p.display().to_string(), m.len(), m.modified().ok()));
        }
    }
    v.sort();
    Fingerprint(v)
}

/// Sleeps until `dir` differs from `seen` or `wait` passes; returns the fingerprint now.
pub fn until_changed(dir: &Path, seen: Fingerprint, wait: Duration) -> Fingerprint {
    let end = Instant::now() + wait;
    loop {
        let now = fingerprint(dir);
        if now != seen || Instant::now() >= end {
            return now;
        }
        std::thread::sleep(Duration::from_secs(1).min(end - Instant::now()));
    }
}
