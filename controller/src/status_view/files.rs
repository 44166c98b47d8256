//! The standalone agent's status directory, read without trusting it: only regular files
//! named as the agent names them (`GpuPartition-*.yaml`, `InferenceServer-*.yaml`,
//! `_invalid.yaml`; its temporary `.NAME.tmp` files are skipped), at most
//! [`status_dir::MAX_FILES`] of them and [`status_dir::MAX_BYTES`] of each (the directory's
//! contract, `crate::status_dir`, shared with the writer), so a FIFO, a link to `/dev/zero` or a huge file cannot hang or
//! exhaust the view; a file that does not parse is shown as unreadable, not a failure.

use super::model::{Doc, Kind};
use crate::status_dir::{self, FileKind, MAX_FILES};
use std::path::Path;

/// Which kind of document a file name holds, if it is one of the agent's.
fn kind_of(name: &str) -> Option<Kind> {
    Some(match status_dir::kind_of(name)? {
        FileKind::Partition => Kind::Partition,
        FileKind::Server => Kind::Server,
        FileKind::Invalid => Kind::Invalid,
    })
}

/// The documents of `dir`, sorted by file name; `Err` when the directory cannot be listed.
pub fn read(dir: &Path) -> Result<Vec<Doc>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        format!(
            "cannot read the status directory {}: {e} (the agent writes it: gpuplane run --manifests DIR --status-dir {})",
            dir.display(),
            dir.display()
        )
    })?;
    let mut names: Vec<(String, Kind)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let kind = kind_of(&name)?;
            // Not followed: a link is not what the agent writes.
            e.file_type().ok()?.is_file().then_some((name, kind))
        })
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    names.truncate(MAX_FILES);
    Ok(names
        .into_iter()
        .map(|(name, kind)| Doc {
            value: parse(&dir.join(&name)),
            origin: name,
            kind,
        })
        .collect())
}

/// One file's YAML as a JSON value (the agent writes string keys only).
fn parse(path: &Path) -> Result<serde_json::Value, String> {
    let text = status_dir::read_file(path)?;
    serde_yaml::from_str(&text).map_err(|e| format!("not YAML the agent writes: {e}"))
}

#[cfg(test)]
mod tests;
