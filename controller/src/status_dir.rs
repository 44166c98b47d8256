//! The standalone agent's status directory as one contract, shared by its writer
//! (`standalone/status_files.rs`) and its reader (`status_view/files.rs`, `gpuplane status`):
//! which file holds which resource, what else the directory holds, and how much of one file
//! anyone reads.
//!
//! # Guarantees
//! - One resource, one file: [`file_name`] maps every [`ResourceKey`] to a name no other key
//!   gets, inside the directory (no `/`, no leading `.`).
//! - A file is read only when it is a regular file (a link, a FIFO or a device is refused, never
//!   followed or opened blocking), and at most [`MAX_BYTES`] of it.

use crate::resource_key::ResourceKey;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The file that says why the manifests, as a whole, were not applied.
pub const INVALID: &str = "_invalid.yaml";

/// The most files of the directory anyone reads in one go.
pub const MAX_FILES: usize = 1000;

/// The largest status file read (a partition's file with hundreds of GPUs is under 200 KiB).
pub const MAX_BYTES: u64 = 4 << 20;

const PARTITION: &str = "GpuPartition-";
const SERVER: &str = "InferenceServer-";
const EXT: &str = ".yaml";

/// What a file of the directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Partition,
    Server,
    /// [`INVALID`]: the manifests were refused as a whole.
    Invalid,
}

/// Which kind of document a file name holds, if it is one of the agent's (its temporary
/// `.NAME.tmp` files are none).
pub fn kind_of(name: &str) -> Option<FileKind> {
    if name == INVALID {
        return Some(FileKind::Invalid);
    }
    if !name.ends_with(EXT) {
        return None;
    }
    if name.starts_with(PARTITION) {
        Some(FileKind::Partition)
    } else if name.starts_with(SERVER) {
        Some(FileKind::Server)
    } else {
        None
    }
}

/// `GpuPartition/kpro6` → `GpuPartition-kpro6.yaml`, `InferenceServer/ns/name` →
/// `InferenceServer-ns_name.yaml`. Kinds have no `-`, namespaces and names no `_`, so no two
/// resources share a file (`a-b/c` and `a/b-c` did, as `Kind-a-b-c.yaml`); any other byte (only
/// in names validation refuses) becomes `_` too, so the name stays one file in the directory.
pub fn file_name(key: &ResourceKey) -> String {
    let printed = key.to_string();
    let (kind, rest) = printed.split_once('/').unwrap_or((&printed, ""));
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| match c {
                'A'..='Z' | 'a'..='z' | '0'..='9' | '-' | '.' => c,
                _ => '_',
            })
            .collect()
    };
    let rest = safe(rest);
    format!("{}-{}{EXT}", safe(kind), rest.trim_start_matches('.'))
}

/// One file of the directory, as text: refused unless it is a regular file, and when it is
/// larger than [`MAX_BYTES`].
pub fn read_file(path: &Path) -> Result<String, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot open: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file, not read".into());
    }
    let mut bytes = Vec::new();
    f.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(format!("larger than {MAX_BYTES} bytes, not read"));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests;
