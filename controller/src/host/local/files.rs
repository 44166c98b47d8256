//! Atomic edits of files other programs also edit, under the locks Proxmox uses.
//!
//! Proxmox's own writer (`file_set_contents`) writes `<file>.tmp.<pid>` with O_EXCL in the same
//! directory, never chmods it (pmxcfs allows only 0600/0640), and renames it over the target;
//! rename is atomic on pmxcfs. Guest configs are serialized by a node-local flock
//! (`/run/lock/lxc/pve-config-<vmid>.lock`), shared files such as `mapping/pci.cfg` by a
//! cluster-wide cfs lock (a directory `/etc/pve/priv/lock/file-<name>`). We do the same.

use super::error::LocalError;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Writes `content` to `path` atomically (temp file in the same directory + rename).
pub fn write_atomic(path: &Path, content: &str) -> Result<(), LocalError> {
    if content.len() > 1024 * 1024 {
        return Err(LocalError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let tmp = path.with_file_name(format!(
        "{}.tmp.{}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| LocalError::io("cannot create", &tmp, e))?;
    let res = f.write_all(content.as_bytes()).and_then(|_| f.flush());
    drop(f);
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(LocalError::io("cannot write", &tmp, e));
    }
    std::fs::rename(&tmp, path).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        LocalError::Rename {
            from: tmp.clone(),
            to: path.to_path_buf(),
            source,
        }
    })
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
            Err(e) => {
                return Err(LocalError::Lock(format!(
                    "can't lock file '{}' - {e}",
                    lock_path.display()
                )))
            }
        }
    }
    let r = f();
    let _ = file.unlock();
    r
}

/// Holds a pmxcfs cluster lock (`mkdir <lock_dir>`) while `f` runs.
pub fn with_cfs_lock<T>(
    lock_dir: &Path,
    timeout: Duration,
    f: impl FnOnce() -> Result<T, LocalError>,
) -> Result<T, LocalError> {
    if let Some(parent) = lock_dir.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let start = Instant::now();
    loop {
        match std::fs::create_dir(lock_dir) {
            Ok(()) => break,
            Err(e)
                if e.kind() == std::io::ErrorKind::AlreadyExists && start.elapsed() < timeout =>
            {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(e) => {
                return Err(LocalError::Lock(format!(
                    "cfs-lock '{}' error: {e}",
                    lock_dir.display()
                )))
            }
        }
    }
    let r = f();
    let _ = std::fs::remove_dir(lock_dir);
    r
}

#[cfg(test)]
mod tests;
