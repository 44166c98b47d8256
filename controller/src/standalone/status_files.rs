//! Status as files: one YAML file per resource under the status directory
//! (`GpuPartition-kpro6.yaml`, `InferenceServer-default_qwen35-122b.yaml`), the conditions in the
//! Kubernetes shape, replaced atomically; `_invalid.yaml` while the manifests are invalid. The
//! names, the bounds and the reads are the directory's contract (`crate::status_dir`), shared
//! with `gpuplane status`.

use crate::host::model::UnitRef;
use crate::resource_key::ResourceKey;
use crate::status::ResourceStatus;
use crate::status_dir::{self, file_name, FileKind};
use gpuplane_crds::condition::Time;
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
        put_conditions(dir, resource, st, units.get(resource));
    }
    let _ = std::fs::remove_file(dir.join(status_dir::INVALID));
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
    for e in entries.flatten().take(status_dir::MAX_FILES) {
        let name = e.file_name().to_string_lossy().to_string();
        if status_dir::kind_of(&name) != Some(FileKind::Server) {
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
        if !live.contains_key(&resource) && file_name(&resource) == name {
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

/// A regular file's text, within the directory's bound. Anything else under a status file's
/// name (a FIFO would block the open forever, a device never ends) is not read, as `manifests`
/// and `gpuplane status` refuse it.
fn read_small(path: &Path) -> Option<String> {
    status_dir::read_file(path).ok()
}

/// Removes the status file of a server that is gone.
pub fn forget(dir: &Path, file: &str) {
    let _ = std::fs::remove_file(dir.join(file));
}

/// Writes `resource`'s file with its conditions merged into what it held (lastTransitionTime
/// survives unless a condition's status flips, as in the API), a partition's GPU table and a
/// server's unit.
fn put_conditions(dir: &Path, resource: &ResourceKey, st: &ResourceStatus, unit: Option<&UnitRef>) {
    let name = file_name(resource);
    let conditions = gpuplane_crds::condition::merge(&previous(dir, &name), &st.conditions);
    let mut doc = serde_json::json!({
        "resource": resource.to_string(),
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
pub fn write_refusals(dir: &Path, errs: &[crate::desired::SpecError], now: &Time) {
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
        let st = crate::status::refusal::invalid(&msgs, None, now);
        put_conditions(dir, &resource, &st, None);
    }
}

/// Records why the manifests were not applied.
pub fn write_invalid(dir: &Path, message: &str) {
    let text = serde_yaml::to_string(&serde_json::json!({
        "reason": crate::status::Reason::InvalidSpec.as_str(),
        "message": message,
    }))
    .unwrap_or_default();
    put(dir, status_dir::INVALID, &text);
}

/// Replaces `dir/name` (see [`super::write_or_log`]).
fn put(dir: &Path, name: &str, text: &str) {
    super::write_or_log(&dir.join(name), text);
}

#[cfg(test)]
mod tests;
