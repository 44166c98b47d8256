//! The standalone agent's status directory, read without trusting it: only regular files
//! named as the agent names them (`GpuPartition-*.yaml`, `InferenceServer-*.yaml`,
//! `_invalid.yaml`; its temporary `.NAME.tmp` files are skipped), at most [`MAX_FILES`] of them
//! and [`MAX_BYTES`] of each, so a FIFO, a link to `/dev/zero` or a huge file cannot hang or
//! exhaust the view; a file that does not parse is shown as unreadable, not a failure.

use super::model::{Doc, Kind};
use std::io::Read;
use std::path::Path;

pub const MAX_FILES: usize = 1000;
/// The largest status file read (a partition's file with hundreds of GPUs is under 200 KiB).
pub const MAX_BYTES: u64 = 4 << 20;

/// Which kind of document a file name holds, if it is one of the agent's.
fn kind_of(name: &str) -> Option<Kind> {
    if name == "_invalid.yaml" {
        return Some(Kind::Invalid);
    }
    if !name.ends_with(".yaml") {
        return None;
    }
    if name.starts_with("GpuPartition-") {
        Some(Kind::Partition)
    } else if name.starts_with("InferenceServer-") {
        Some(Kind::Server)
    } else {
        None
    }
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
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let mut bytes = Vec::new();
    f.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(format!("larger than {MAX_BYTES} bytes, not read"));
    }
    let text = String::from_utf8_lossy(&bytes);
    serde_yaml::from_str(&text).map_err(|e| format!("not YAML the agent writes: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_agents_files_only_and_survives_bad_ones() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::write(p.join("GpuPartition-a.yaml"), "resource: GpuPartition/a\n").unwrap();
        std::fs::write(p.join("InferenceServer-ns_b.yaml"), ": : [ not yaml").unwrap();
        std::fs::write(p.join(".GpuPartition-a.yaml.tmp"), "half written").unwrap();
        std::fs::write(p.join("notes.txt"), "x").unwrap();
        std::fs::write(
            p.join("GpuPartition-big.yaml"),
            vec![b'a'; MAX_BYTES as usize + 10],
        )
        .unwrap();
        std::os::unix::fs::symlink("/dev/zero", p.join("GpuPartition-zero.yaml")).unwrap();
        let docs = read(p).unwrap();
        let names: Vec<&str> = docs.iter().map(|d| d.origin.as_str()).collect();
        assert_eq!(
            names,
            [
                "GpuPartition-a.yaml",
                "GpuPartition-big.yaml",
                "InferenceServer-ns_b.yaml"
            ]
        );
        assert!(docs[0].value.is_ok());
        assert!(docs[1].value.as_ref().unwrap_err().contains("larger than"));
        assert!(docs[2].value.as_ref().unwrap_err().contains("not YAML"));
        assert!(read(&p.join("absent"))
            .unwrap_err()
            .contains("--status-dir"));
    }
}
