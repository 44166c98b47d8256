//! Status as files: one YAML file per resource under the status directory
//! (`GpuPartition-kpro6.yaml`, `InferenceServer-default-qwen35-122b.yaml`), the conditions in the
//! Kubernetes shape, replaced atomically; `_invalid.yaml` while the manifests are invalid.

use crate::status::ResourceStatus;
use std::collections::BTreeMap;
use std::path::Path;

/// Writes each resource's conditions; removes `_invalid.yaml`.
pub fn write(dir: &Path, status: &BTreeMap<String, ResourceStatus>) {
    for (resource, st) in status {
        for c in &st.conditions {
            tracing::info!(resource = %resource, "{}={} ({}): {}", c.type_, c.status, c.reason, c.message);
        }
        let name = file_name(resource);
        // lastTransitionTime survives unless a condition's status flips, as in the API.
        let conditions = gpuplane_crds::condition::merge(&previous(dir, &name), &st.conditions);
        let text = serde_yaml::to_string(&serde_json::json!({
            "resource": resource,
            "conditions": conditions,
        }))
        .unwrap_or_default();
        put(dir, &name, &text);
    }
    let _ = std::fs::remove_file(dir.join("_invalid.yaml"));
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

/// Records why the manifests were not applied.
pub fn write_invalid(dir: &Path, message: &str) {
    let text = serde_yaml::to_string(&serde_json::json!({
        "reason": "InvalidSpec",
        "message": message,
    }))
    .unwrap_or_default();
    put(dir, "_invalid.yaml", &text);
}

/// `Kind/ns/name` → `Kind-ns-name.yaml`.
pub fn file_name(resource: &str) -> String {
    format!("{}.yaml", resource.replace('/', "-"))
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
