//! The repository's YAML manifests: multi-document files such as `crds/gpuplane.dev_crds.yaml`
//! and `e2e/kube/agent-rbac.yaml`.

use crate::paths::repo_root;
use serde_yaml::Value as Yaml;

/// The documents of a multi-document YAML text (split at `---` markers), empty ones dropped.
pub fn yaml_docs(text: &str) -> Vec<Yaml> {
    text.split("\n---")
        .map(|doc| doc.trim_start_matches("---"))
        .map(|doc| serde_yaml::from_str::<Yaml>(doc).unwrap_or_else(|e| panic!("YAML: {e}\n{doc}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// The documents of the file `rel` under the repository root.
pub fn repo_yaml_docs(rel: &str) -> Vec<Yaml> {
    let path = repo_root().join(rel);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    yaml_docs(&text)
}

/// The names of `examples/invalid/*.yaml` (without `.yaml`), sorted: the realistic mistakes
/// every door is tested on.
pub fn invalid_examples() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(repo_root().join("examples/invalid"))
        .expect("examples/invalid")
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".yaml")
                .to_string()
        })
        .collect();
    v.sort();
    v
}
