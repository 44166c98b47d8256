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

use super::error::LocalError;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(if path.to_string_lossy().contains("/etc/pve/") {
            0o640
        } else {
            0o644
        });
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| LocalError::io("cannot create", &tmp, e))?;
    // The umask may have taken bits away at creation; put back exactly the old file's.
    let res = f
        .write_all(content.as_bytes())
        .and_then(|_| f.flush())
        .and_then(|_| synced(f.sync_all()))
        .and_then(|_| match f.metadata()?.permissions().mode() & 0o777 {
            m if m == mode => Ok(()),
            _ => synced(f.set_permissions(std::fs::Permissions::from_mode(mode))),
        });
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
    })?;
    // The rename itself is durable once the directory is synced (best effort).
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// An fsync (or chmod) result, where "not supported here" counts as done: pmxcfs and some FUSE
/// file systems answer so, and refusing every write there would help nobody.
fn synced(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | libc::EPERM)
            ) =>
        {
            Ok(())
        }
        r => r,
    }
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
