//! Atomic edits of files other programs also edit, under the locks Proxmox uses.
//!
//! Proxmox's own writer (`file_set_contents`) writes `<file>.tmp.<pid>` with O_EXCL in the same
//! directory, never chmods it (pmxcfs allows only 0600/0640), and renames it over the target;
//! rename is atomic on pmxcfs. Guest configs are serialized by a node-local flock
//! (`/run/lock/lxc/pve-config-<vmid>.lock`), shared files such as `mapping/pci.cfg` by a
//! cluster-wide cfs lock (a directory `/etc/pve/priv/lock/file-<name>`). We do the same.
//!
//! # Guarantees of [`write_atomic`]
//! - The new file gets the old file's permission bits (a new file: 0640 under `/etc/pve`, as
//!   pmxcfs wants; 0644 elsewhere), set at creation, so the agent's umask never decides them.
//! - The data is fsynced before the rename and the directory after it, so a power cut leaves
//!   the old file or the new one, never an empty one. A file system that does not implement
//!   fsync (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`) is not an error; any other failure (`EIO`,
//!   `ENOSPC`) is, and the target is left as it was.
//! - A temporary file `<file>.tmp.<pid>` that a writer killed before its rename left beside the
//!   target (its pid no longer runs) is removed by the next write of that file, and reported.
//!
//! # What a kill leaves, and who heals it
//! - A flock dies with its process (the kernel releases it): nothing to heal.
//! - A cfs lock directory outlives its writer. Proxmox's rule (pve-cluster `PVE::Cluster`,
//!   `$cfs_lock`): a writer that finds the lock taken sends pmxcfs an unlock request
//!   (`utime(0, 0, lock)`), sleeps and retries until its acquire timeout (10 s); pmxcfs removes a
//!   lock older than 120 s on such a request. [`with_cfs_lock`] does the same on pmxcfs; where
//!   `/etc/pve` is a plain directory (no pmxcfs: tests, hosts without the cluster file system)
//!   it applies pmxcfs's rule itself: a lock directory whose mtime is 120 s old or more is
//!   removed (logged, and reported to the caller for an event), a younger one never.
//! - A lock still held at the acquire timeout is [`LocalError::LockHeld`]: a wait, not a
//!   failure. The caller retries later; the lock expires by itself if its writer is gone.

use super::error::LocalError;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// pmxcfs removes a cfs lock this old on the next unlock request ("cfs locks have a timeout of
/// 120"), so a lock younger than this may still belong to a live writer.
pub const CFS_LOCK_EXPIRY: Duration = Duration::from_secs(120);
/// How long a writer waits for a lock before it gives up for now (Proxmox's default).
pub const LOCK_ACQUIRE: Duration = Duration::from_secs(10);

/// Something a killed writer left behind, removed by a later write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leftover {
    /// A cfs lock directory at least [`CFS_LOCK_EXPIRY`] old on a plain `/etc/pve`.
    StaleLock { path: PathBuf, age_secs: u64 },
    /// `<file>.tmp.<pid>` of a writer that no longer runs.
    TempFile { path: PathBuf },
}

impl std::fmt::Display for Leftover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Leftover::StaleLock { path, age_secs } => write!(
                f,
                "removed the stale lock {} ({age_secs} s old; a lock older than {} s belongs to a writer that is gone)",
                path.display(),
                CFS_LOCK_EXPIRY.as_secs()
            ),
            Leftover::TempFile { path } => write!(
                f,
                "removed {}, left by a writer killed before its rename",
                path.display()
            ),
        }
    }
}

/// Writes `content` to `path` atomically (temp file in the same directory + rename); returns
/// what dead writers had left beside it and was removed. The file keeps the old one's mode
/// (a new one gets 0640 under `/etc/pve`, 0644 elsewhere).
pub fn write_atomic(path: &Path, content: &str) -> Result<Vec<Leftover>, LocalError> {
    write_atomic_mode(path, content, None)
}

/// [`write_atomic`] with the mode `mode` when given, whatever the old file had. The writing is
/// the one atomic writer's (`crate::atomic_file`: exclusive create, no link followed, fsync,
/// rename); here only the mode is chosen and its answers put in this backend's words.
pub fn write_atomic_mode(
    path: &Path,
    content: &str,
    mode: Option<u32>,
) -> Result<Vec<Leftover>, LocalError> {
    let mode = mode.unwrap_or_else(|| {
        std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(if path.to_string_lossy().contains("/etc/pve/") {
                0o640
            } else {
                0o644
            })
    });
    use crate::atomic_file::Error as E;
    let removed =
        crate::atomic_file::write(path, content.as_bytes(), mode).map_err(|e| match e {
            E::TooLarge { path, .. } => LocalError::TooLarge { path },
            E::Io { what, path, source } => LocalError::io(what, path, source),
            E::Rename { from, to, source } => LocalError::Rename { from, to, source },
        })?;
    Ok(removed
        .into_iter()
        .map(|path| {
            let left = Leftover::TempFile { path };
            tracing::warn!("{left} (its writer no longer runs)");
            left
        })
        .collect())
}

/// Holds an exclusive flock on `lock_path` (created if missing) while `f` runs.
pub fn with_flock<T>(
    lock_path: &Path,
    timeout: Duration,
    f: impl FnOnce() -> Result<T, LocalError>,
) -> Result<T, LocalError> {
    if let Some(dir) = lock_path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(lock_path)
        .map_err(|e| LocalError::io("cannot open lock", lock_path, e))?;
    let start = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(100))
            }
            // A live process holds it (a flock dies with its holder): wait and retry later.
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(LocalError::LockHeld {
                    lock: lock_path.to_path_buf(),
                    held_secs: None,
                    waited_secs: start.elapsed().as_secs(),
                })
            }
            Err(e) => {
                return Err(LocalError::Lock(format!(
                    "can't lock file '{}' - {e}",
                    lock_path.display()
                )))
            }
        }
    }
    tracing::debug!("locked: {}", lock_path.display());
    crate::crashpoint::lock_taken();
    let r = f();
    crate::crashpoint::lock_releasing();
    let _ = file.unlock();
    r
}

/// Holds a pmxcfs cluster lock (`mkdir <lock_dir>`) while `f` runs, following Proxmox's
/// protocol (module docs): on pmxcfs an unlock request per retry, elsewhere pmxcfs's expiry rule
/// applied here. Returns `f`'s value and the stale lock removed on the way, if any.
///
/// # Caveats
/// On a plain directory a lock is judged by its mtime, so a clock set back by more than 120 s
/// makes a dead writer's lock wait longer, never a live one's go early.
pub fn with_cfs_lock<T>(
    lock_dir: &Path,
    timeout: Duration,
    f: impl FnOnce() -> Result<T, LocalError>,
) -> Result<(T, Option<Leftover>), LocalError> {
    if let Some(parent) = lock_dir.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let pmxcfs = std::fs::read_to_string("/proc/self/mounts")
        .map(|m| on_pmxcfs(&m, lock_dir))
        .unwrap_or(false);
    let start = Instant::now();
    let mut removed = None;
    loop {
        match std::fs::create_dir(lock_dir) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let age = age_of(lock_dir);
                if pmxcfs {
                    unlock_request(lock_dir);
                } else if let Some(age) = age.filter(|a| *a >= CFS_LOCK_EXPIRY) {
                    if std::fs::remove_dir(lock_dir).is_ok() {
                        let stale = Leftover::StaleLock {
                            path: lock_dir.to_path_buf(),
                            age_secs: age.as_secs(),
                        };
                        tracing::warn!("{stale}");
                        removed = Some(stale);
                        continue;
                    }
                }
                if start.elapsed() >= timeout {
                    return Err(LocalError::LockHeld {
                        lock: lock_dir.to_path_buf(),
                        held_secs: age.map(|a| a.as_secs()),
                        waited_secs: start.elapsed().as_secs(),
                    });
                }
                std::thread::sleep(Duration::from_millis(250))
            }
            Err(e) => {
                return Err(LocalError::Lock(format!(
                    "cfs-lock '{}' error: {e}",
                    lock_dir.display()
                )))
            }
        }
    }
    tracing::debug!("locked: {}", lock_dir.display());
    crate::crashpoint::lock_taken();
    let r = f();
    crate::crashpoint::lock_releasing();
    let _ = std::fs::remove_dir(lock_dir);
    r.map(|v| (v, removed))
}

/// How long ago the lock directory was made (its mtime); `None` when it cannot be read or lies
/// in the future.
fn age_of(lock_dir: &Path) -> Option<Duration> {
    let m = std::fs::metadata(lock_dir).ok()?.modified().ok()?;
    crate::clock::system_time().duration_since(m).ok()
}

/// pmxcfs's unlock request: `utime(0, 0)` on the lock; pmxcfs removes the lock if it expired.
fn unlock_request(lock_dir: &Path) {
    let epoch = std::fs::FileTimes::new()
        .set_accessed(SystemTime::UNIX_EPOCH)
        .set_modified(SystemTime::UNIX_EPOCH);
    if let Ok(d) = std::fs::File::open(lock_dir) {
        let _ = d.set_times(epoch);
    }
}

/// Whether `path` lies on pmxcfs, from `/proc/self/mounts` text: the longest mount point that
/// contains it is a FUSE mount of `/dev/fuse` (how pmxcfs mounts `/etc/pve`).
pub fn on_pmxcfs(mounts: &str, path: &Path) -> bool {
    let mut best: Option<(usize, bool)> = None;
    for l in mounts.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let [src, mnt, fstype, ..] = w[..] else {
            continue;
        };
        let mnt = mnt.replace("\\040", " ");
        if path.starts_with(&mnt) && best.is_none_or(|(n, _)| mnt.len() >= n) {
            best = Some((mnt.len(), fstype == "fuse" && src == "/dev/fuse"));
        }
    }
    best.is_some_and(|(_, fuse)| fuse)
}

#[cfg(test)]
mod tests;
