//! Status as files: one YAML file per resource under the status directory
//! (`GpuPartition-kpro6.yaml`, `InferenceServer-default_qwen35-122b.yaml`), the conditions in the
//! Kubernetes shape, replaced atomically; `_invalid.yaml` while the manifests are invalid.

use crate::status::ResourceStatus;
use std::collections::BTreeMap;
use std::path::Path;

/// Writes each resource's conditions; removes `_invalid.yaml`.
pub fn write(dir: &Path, status: &BTreeMap<crate::resource_key::ResourceKey, ResourceStatus>) {
    for (resource, st) in status {
        for c in &st.conditions {
            tracing::info!(resource = %resource, "{}={} ({}): {}", c.type_, c.status, c.reason, c.message);
        }
        put_conditions(dir, &resource.to_string(), st);
    }
    let _ = std::fs::remove_file(dir.join("_invalid.yaml"));
}

/// Writes `resource`'s file with its conditions merged into what it held (lastTransitionTime
/// survives unless a condition's status flips, as in the API), and a partition's GPU table.
fn put_conditions(dir: &Path, resource: &str, st: &ResourceStatus) {
    let name = file_name(resource);
    let conditions = gpuplane_crds::condition::merge(&previous(dir, &name), &st.conditions);
    let mut doc = serde_json::json!({
        "resource": resource,
        "conditions": conditions,
    });
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
    std::fs::read_to_string(dir.join(name))
        .ok()
        .and_then(|t| serde_yaml::from_str::<File>(&t).ok())
        .map(|f| f.conditions)
        .unwrap_or_default()
}

/// Marks each resource that `errs` names `Ready=False InvalidSpec`, with its own messages, in
/// its status file: a reader of one resource's file sees the refusal there, not the last good
/// pass. (`_invalid.yaml`, written next, has the whole list.)
pub fn write_refusals(dir: &Path, errs: &[crate::desired::SpecError]) {
    let mut by: BTreeMap<crate::resource_key::ResourceKey, Vec<String>> = BTreeMap::new();
    for e in errs {
        by.entry(e.resource.clone())
            .or_default()
            .push(format!("{}: {}", e.field, e.message));
    }
    for (resource, msgs) in by {
        let now = crate::clock::now();
        let st = crate::status::refusal::invalid(&msgs, None, &now);
        put_conditions(dir, &resource.to_string(), &st);
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

/// Replaces `dir/name` atomically; failures are logged.
fn put(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let r = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&tmp, text))
        .and_then(|_| std::fs::rename(&tmp, &path));
    if let Err(e) = r {
        tracing::warn!("cannot write {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::file_name;

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
