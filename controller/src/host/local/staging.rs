//! The agent's private staging directory: where a file is written before `pct push` copies it
//! into a container.
//!
//! It replaces predictable names in the shared `/tmp` (`gpuplane-<pid>-<unit>`), which another
//! local user could pre-create as a symlink or read (unit files hold env values). The directory
//! is `<state dir>/staging` (`/var/lib/gpuplane/staging`): in chart mode the state dir is a
//! hostPath mounted at the same path, so the pod writes where the host's `pct` (through
//! nsenter) reads.

use super::error::LocalError;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The staging directory under a state dir.
#[derive(Debug, Clone)]
pub struct Staging {
    dir: PathBuf,
}

impl Staging {
    /// `<state_dir>/staging`, created mode 0700 if missing.
    ///
    /// # Guarantees
    /// On `Ok`, the path is a real directory (not a symlink), owned by the agent's user, mode
    /// 0700 (a looser mode is tightened).
    pub fn open(state_dir: &Path) -> Result<Self, LocalError> {
        let dir = state_dir.join("staging");
        std::fs::create_dir_all(state_dir)
            .map_err(|e| LocalError::io("cannot create", state_dir, e))?;
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(LocalError::io("cannot create", &dir, e)),
        }
        let meta =
            std::fs::symlink_metadata(&dir).map_err(|e| LocalError::io("cannot stat", &dir, e))?;
        // SAFETY: geteuid(2) has no preconditions and touches no memory.
        let me = unsafe { libc::geteuid() };
        if !meta.file_type().is_dir() || meta.uid() != me {
            return Err(LocalError::io(
                "refusing to stage in",
                &dir,
                std::io::Error::other("not a directory owned by the agent's user"),
            ));
        }
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| LocalError::io("cannot chmod", &dir, e))?;
        }
        remove_stale(&dir);
        Ok(Staging { dir })
    }

    /// A new file holding `content`, with a random name, created with `O_EXCL` (never follows or
    /// reuses an existing path) and mode 0600; it is removed when the returned path is dropped.
    pub fn file(&self, content: &[u8]) -> Result<tempfile::TempPath, LocalError> {
        let mut f = tempfile::Builder::new()
            .prefix("gpuplane-")
            .tempfile_in(&self.dir)
            .map_err(|e| LocalError::io("cannot create a file in", &self.dir, e))?;
        f.write_all(content)
            .and_then(|_| f.as_file().sync_all())
            .map_err(|e| LocalError::io("cannot write", f.path(), e))?;
        Ok(f.into_temp_path())
    }
}

/// A staged file lives only while one `pct push` runs (bounded by the command deadline, 120 s);
/// one older than this was left by an agent killed mid-push.
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes staged files a killed agent left (older than [`STALE_AFTER`]). Bounded: at most
/// 10,000 entries are looked at per call.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten().take(10_000) {
        let old = e
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= STALE_AFTER);
        if old && e.file_name().to_string_lossy().starts_with("gpuplane-") {
            let _ = std::fs::remove_file(e.path());
            tracing::warn!("removed {}, left by a killed push", e.path().display());
        }
    }
}

#[cfg(test)]
mod tests;
