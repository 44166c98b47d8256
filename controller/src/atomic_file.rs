//! The one atomic writer: every file the agent writes (host files through the local backend,
//! the standalone agent's status files and its file_sd list, the simulated host's file) goes
//! through [`write`].
//!
//! # Guarantees
//! - The temporary file `<name>.tmp.<pid>` is created with `O_CREAT|O_EXCL` (a link planted
//!   under its name is never followed: the create fails, after one attempt to remove the name,
//!   which removes a link itself, never its target) in the target's own directory, written,
//!   fsynced, and renamed over the target. `rename` replaces a link planted at the target's
//!   name; it never writes through it. The directory is fsynced after the rename (best effort).
//! - A reader sees the old file or the new one, never a mix; a power cut leaves one of them.
//! - The mode is set at creation and checked after (the umask never decides it).
//! - A `<name>.tmp.<pid>` whose pid no longer runs (a writer killed before its rename) is
//!   removed and returned, so callers can report it.
//! - A file system that does not implement fsync or chmod (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`,
//!   `EPERM`: pmxcfs, some FUSE) is not an error; any other failure is, and the target is left
//!   as it was.
//!
//! [`check_dir`] says whether a directory may hold the agent's files at all: one that someone
//! other than root (or the agent's own user) can write lets that someone replace the directory's
//! entries between the agent's writes and a reader's reads.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The largest file the agent writes: its own files are small, and this bounds a mistake.
pub const MAX_LEN: usize = 1024 * 1024;

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {len} bytes is more than the {MAX_LEN} bytes the agent writes to one file", path.display())]
    TooLarge { path: PathBuf, len: usize },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot rename {} to {}: {source}", from.display(), to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
}

/// Writes `content` to `path` atomically with permission bits `mode`; returns the temporary
/// files of dead writers it removed beside `path`.
pub fn write(path: &Path, content: &[u8], mode: u32) -> Result<Vec<PathBuf>, Error> {
    if content.len() > MAX_LEN {
        return Err(Error::TooLarge {
            path: path.to_path_buf(),
            len: content.len(),
        });
    }
    let tmp = temp_name(path, std::process::id());
    // Ours from an earlier call of this process that failed half-way, or a planted link:
    // `remove_file` removes the name, never what a link points to.
    let _ = std::fs::remove_file(&tmp);
    let removed = remove_dead_temps(path);
    let io = |what, e| Error::Io {
        what,
        path: tmp.clone(),
        source: e,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(|e| io("cannot create", e))?;
    let res = f
        .write_all(content)
        .and_then(|_| f.flush())
        .and_then(|_| tolerated(f.sync_all()))
        .and_then(|_| match f.metadata()?.permissions().mode() & 0o7777 {
            m if m == mode => Ok(()),
            _ => tolerated(f.set_permissions(std::fs::Permissions::from_mode(mode))),
        });
    drop(f);
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("cannot write", e));
    }
    crate::crashpoint::temp_written();
    std::fs::rename(&tmp, path).map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        Error::Rename {
            from: tmp.clone(),
            to: path.to_path_buf(),
            source,
        }
    })?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(removed)
}

/// `<name>.tmp.<pid>` beside `path`.
fn temp_name(path: &Path, pid: u32) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{name}.tmp.{pid}"))
}

/// Removes `<name>.tmp.<pid>` files beside `path` whose pid no longer runs. A live pid's file is
/// another writer's work in progress and is left alone. Bounded: at most 100,000 entries read.
fn remove_dead_temps(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return vec![];
    };
    let prefix = format!("{}.tmp.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut out = vec![];
    for e in entries.flatten().take(100_000) {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = n.strip_prefix(&prefix).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let p = e.path();
        if std::fs::remove_file(&p).is_ok() {
            out.push(p);
        }
    }
    out
}

/// An fsync or chmod result where "not supported here" counts as done.
fn tolerated(r: std::io::Result<()>) -> std::io::Result<()> {
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

/// Creates `dir` (and its parents, 0755) when missing, then checks that nobody but root or the
/// agent's own user can change its entries: the directory itself must be owned by one of them
/// and writable by no one else, and so must each directory above it, but for a sticky one
/// (`/tmp`: others may add entries there, not replace ours). A group-writable directory counts
/// only when its group is root's.
pub fn check_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let me = euid();
    let full =
        std::fs::canonicalize(dir).map_err(|e| format!("cannot resolve {}: {e}", dir.display()))?;
    let mut at = Some(full.as_path());
    let mut first = true;
    while let Some(d) = at {
        let m = std::fs::metadata(d).map_err(|e| format!("cannot read {}: {e}", d.display()))?;
        let mode = m.mode();
        let sticky = mode & 0o1000 != 0;
        let trusted_owner = m.uid() == 0 || m.uid() == me;
        let others_write = mode & 0o002 != 0 || (mode & 0o020 != 0 && m.gid() != 0);
        let ok = if first {
            trusted_owner && !others_write
        } else {
            trusted_owner && (!others_write || sticky)
        };
        if !ok {
            return Err(format!(
                "{} (mode {:o}, owner uid {}, gid {}) can be written by users other than root: whoever can write it can replace the agent's files there; give it to root and remove group/other write (chown root:root, chmod 0755), or name another directory",
                d.display(),
                mode & 0o7777,
                m.uid(),
                m.gid()
            ));
        }
        first = false;
        at = d.parent();
    }
    Ok(())
}

/// The effective user id, read without `unsafe` (`/proc/self` is owned by it).
fn euid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
