//! Status as files: one YAML file per resource under the status directory
//! (`GpuPartition-kpro6.yaml`, `InferenceServer-default_qwen35-122b.yaml`), the conditions in the
//! Kubernetes shape, replaced atomically; `_invalid.yaml` while the manifests are invalid.

use crate::host::model::UnitRef;
use crate::status::ResourceStatus;
use std::collections::BTreeMap;
use std::path::Path;

/// Writes each resource's conditions (a server's with its unit: what the agent stops and
/// removes when the server leaves the manifests, [`removed_servers`]); removes `_invalid.yaml`.
pub fn write(
    dir: &Path,
    status: &BTreeMap<crate::resource_key::ResourceKey, ResourceStatus>,
    units: &BTreeMap<crate::resource_key::ResourceKey, UnitRef>,
) {
    for (resource, st) in status {
        for c in &st.conditions {
            tracing::info!(resource = %resource, "{}={} ({}): {}", c.type_, c.status, c.reason, c.message);
        }
        put_conditions(dir, &resource.to_string(), st, units.get(resource));
    }
    let _ = std::fs::remove_file(dir.join("_invalid.yaml"));
}

/// A server that has a status file but is no longer in the manifests: its file and the unit the
/// agent ran it as.
#[derive(Debug, Clone, PartialEq)]
pub struct Removed {
    pub resource: crate::resource_key::ResourceKey,
    pub file: String,
    pub unit: UnitRef,
}

/// The servers whose status file names a unit and which `live` (the manifests' servers, with
/// their units) no longer lists. A file without a unit (written by an older agent, or a
/// refusal) names none.
pub fn removed_servers(
    dir: &Path,
    live: &BTreeMap<crate::resource_key::ResourceKey, UnitRef>,
) -> Vec<Removed> {
    #[derive(serde::Deserialize)]
    struct File {
        resource: String,
        /// [`UnitRef::key`]: `host/NAME` or `lxc-VMID/NAME`.
        #[serde(default)]
        unit: Option<String>,
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut out = vec![];
    // Bounded: at most this many files are read per pass (a status directory is the agent's).
    for e in entries.flatten().take(4096) {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with("InferenceServer-") || !name.ends_with(".yaml") {
            continue;
        }
        let Some(f) = read_small(&e.path()).and_then(|t| serde_yaml::from_str::<File>(&t).ok())
        else {
            continue;
        };
        let (Ok(resource), Some(unit)) = (
            f.resource.parse(),
            f.unit.as_deref().and_then(UnitRef::from_key),
        ) else {
            continue;
        };
        if !live.contains_key(&resource) && file_name(&f.resource) == name {
            out.push(Removed {
                resource,
                file: name,
                unit,
            });
        }
    }
    out.sort_by(|a, b| a.file.cmp(&b.file));
    out
}

/// A regular file's text, at most 1 MiB of it (a status file is a few KiB). Anything else under
/// a status file's name (a FIFO would block the open forever, a device never ends) is not read,
/// as `manifests` and `gpuplane status` refuse it.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(1 << 20)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Removes the status file of a server that is gone.
pub fn forget(dir: &Path, file: &str) {
    let _ = std::fs::remove_file(dir.join(file));
}

/// Writes `resource`'s file with its conditions merged into what it held (lastTransitionTime
/// survives unless a condition's status flips, as in the API), a partition's GPU table and a
/// server's unit.
fn put_conditions(dir: &Path, resource: &str, st: &ResourceStatus, unit: Option<&UnitRef>) {
    let name = file_name(resource);
    let conditions = gpuplane_crds::condition::merge(&previous(dir, &name), &st.conditions);
    let mut doc = serde_json::json!({
        "resource": resource,
        "conditions": conditions,
    });
    if let Some(u) = unit {
        doc["unit"] = serde_json::json!(u.key());
    }
    if !st.gpus.is_empty() {
        doc["gpus"] = serde_json::json!(st.gpus);
        doc["layoutHash"] = serde_json::json!(st.layout_hash);
    }
    let text = serde_yaml::to_string(&doc).unwrap_or_default();
    put(dir, &name, &text);
}

/// The conditions in the status file `name`, if it is there and readable.
fn previous(dir: &Path, name: &str) -> Vec<gpuplane_crds::condition::Condition> {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        conditions: Vec<gpuplane_crds::condition::Condition>,
    }
    read_small(&dir.join(name))
        .and_then(|t| serde_yaml::from_str::<File>(&t).ok())
        .map(|f| f.conditions)
        .unwrap_or_default()
}

/// Marks each resource that `errs` names `Ready=False InvalidSpec`, with its own messages, in
/// its status file: a reader of one resource's file sees the refusal there, not the last good
/// pass. (`_invalid.yaml`, written next, has the whole list.) A pool has no status file here:
/// this agent asks no pool, and nothing would remove the file once the pool is fixed; its
/// refusal is in `_invalid.yaml`.
pub fn write_refusals(dir: &Path, errs: &[crate::desired::SpecError]) {
    let mut by: BTreeMap<crate::resource_key::ResourceKey, Vec<String>> = BTreeMap::new();
    let own_file = |e: &&crate::desired::SpecError| {
        !matches!(e.resource, crate::resource_key::ResourceKey::Pool { .. })
    };
    for e in errs.iter().filter(own_file) {
        by.entry(e.resource.clone())
            .or_default()
            .push(format!("{}: {}", e.field, e.message));
    }
    for (resource, msgs) in by {
        let now = crate::clock::now();
        let st = crate::status::refusal::invalid(&msgs, None, &now);
        put_conditions(dir, &resource.to_string(), &st, None);
    }
}

/// Records why the manifests were not applied.
pub fn write_invalid(dir: &Path, message: &str) {
    let text = serde_yaml::to_string(&serde_json::json!({
        "reason": "InvalidSpec",
        "message": message,
    }))
    .unwrap_or_default();
    put(dir, "_invalid.yaml", &text);
}

/// `Kind/name` → `Kind-name.yaml`, `Kind/ns/name` → `Kind-ns_name.yaml`. Kinds have no `-`,
/// namespaces and names no `_`, so no two resources share a file (`a-b/c` and `a/b-c` did, as
/// `Kind-a-b-c.yaml`); any other byte (only in names validation refuses) becomes `_` too, so
/// the name stays one file in the status directory.
pub fn file_name(resource: &str) -> String {
    let (kind, rest) = resource.split_once('/').unwrap_or((resource, ""));
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| match c {
                'A'..='Z' | 'a'..='z' | '0'..='9' | '-' | '.' => c,
                _ => '_',
            })
            .collect()
    };
    let rest = safe(rest);
    let rest = rest.trim_start_matches('.');
    format!("{}-{rest}.yaml", safe(kind))
}

/// Replaces `dir/name` (see [`super::write_or_log`]).
fn put(dir: &Path, name: &str, text: &str) {
    super::write_or_log(&dir.join(name), text);
}

#[cfg(test)]
mod tests {
    use super::{file_name, removed_servers};

    /// A FIFO or a device under a server's status-file name is skipped, not opened (opening a
    /// FIFO blocks until a writer comes: the agent's pass would never end).
    #[test]
    fn only_regular_files_are_read() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("InferenceServer-default_a.yaml");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(ok.success());
        std::os::unix::fs::symlink("/dev/zero", d.path().join("InferenceServer-default_b.yaml"))
            .unwrap();
        std::fs::write(
            d.path().join("InferenceServer-default_c.yaml"),
            "resource: InferenceServer/default/c\nunit: host/sglang-c.service\n",
        )
        .unwrap();
        let removed = removed_servers(d.path(), &Default::default());
        let files: Vec<&str> = removed.iter().map(|r| r.file.as_str()).collect();
        assert_eq!(files, ["InferenceServer-default_c.yaml"]);
    }

    /// Issue 23: `a-b/c` and `a/b-c` wrote one file.
    #[test]
    fn no_two_resources_share_a_status_file() {
        assert_eq!(file_name("GpuPartition/kpro6"), "GpuPartition-kpro6.yaml");
        assert_eq!(
            file_name("InferenceServer/default/qwen35-122b"),
            "InferenceServer-default_qwen35-122b.yaml"
        );
        assert_ne!(
            file_name("InferenceServer/a-b/c"),
            file_name("InferenceServer/a/b-c")
        );
        // An invalid name stays one file of the directory.
        assert_eq!(
            file_name("InferenceServer/default/../../etc/x"),
            "InferenceServer-default_.._.._etc_x.yaml"
        );
        assert!(!file_name("GpuPartition/..").contains('/'));
    }
}
