//! The servers for Prometheus's `file_sd_configs`: the JSON of `/sd/servers` (`discovery/`) as
//! a file, replaced atomically after each pass through the one writer (`crate::atomic_file`:
//! Prometheus, which re-reads the file when it changes, never sees half a list, and a link
//! planted in the directory is replaced, never written through). The agent refuses to start
//! when someone other than root can write the directory (`super::check_dirs`).

use std::path::Path;

/// Replaces `path` with `json`; a failure is logged (the listing is for monitoring: it never
/// stops a pass).
pub fn write(path: &Path, json: &str) {
    if path.file_name().is_none() {
        tracing::warn!("--file-sd {}: not a file path", path.display());
        return;
    }
    super::write_or_log(path, json);
}

#[cfg(test)]
mod tests;
