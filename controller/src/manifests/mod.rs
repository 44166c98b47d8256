//! Reading `GpuPartition`, `InferenceServer` and `GpuNodePool` resources from YAML files.
//!
//! Accepts a file or a directory (every `*.yaml`/`*.yml` in it, sorted), each possibly
//! holding several documents. Unknown kinds and malformed documents are errors that name
//! the file and the document number.

pub mod schema;

use gpuplane_crds::{GpuNodePool, GpuPartition, InferenceServer};
use serde::Deserialize;
use std::path::Path;

/// Resources read from manifests.
#[derive(Debug, Default, Clone)]
pub struct Manifests {
    pub partitions: Vec<GpuPartition>,
    pub servers: Vec<InferenceServer>,
    /// Pools, read so that a directory of a pool's members (as applied to a cluster) can hold
    /// the pool too: checked like the others (`desired::pool`), never asked for a slot here.
    pub pools: Vec<GpuNodePool>,
    /// `Kind/[namespace/]name` of every resource read → where it was read (`file, document n`).
    origins: std::collections::BTreeMap<String, String>,
}

/// A manifest problem.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}, document {doc}: {message}")]
    Invalid {
        path: String,
        doc: usize,
        message: String,
    },
    #[error("invalid spec (reason InvalidSpec), nothing was changed:\n{}", errors.iter().map(|e| format!("  - {kind}/{name} ({path}, document {doc}): {e}")).collect::<Vec<_>>().join("\n"))]
    Schema {
        path: String,
        doc: usize,
        kind: String,
        name: String,
        errors: Vec<schema::SchemaError>,
    },
    #[error("{path} is not read: {why}")]
    Refused { path: String, why: String },
    #[error("{0} has no *.yaml or *.yml files")]
    Empty(String),
    #[error("{resource} is defined twice: in {first} and in {second}; keep one")]
    Duplicate {
        resource: String,
        first: String,
        second: String,
    },
}

impl Manifests {
    /// The partition named `name`, if read.
    pub fn partition(&self, name: &str) -> Option<&GpuPartition> {
        self.partitions
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
    }

    /// Parses the documents of one YAML text.
    pub fn add_text(&mut self, text: &str, origin: &str) -> Result<(), ManifestError> {
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let invalid = |message: String| ManifestError::Invalid {
                path: origin.into(),
                doc: i + 1,
                message,
            };
            let value = serde_yaml::Value::deserialize(doc).map_err(|e| invalid(e.to_string()))?;
            if value.is_null() {
                continue;
            }
            let kind = checked_kind(&value, origin, i + 1)?;
            self.add_doc(value, &kind, origin, i + 1)?;
        }
        Ok(())
    }

    /// Adds one document of kind `kind` (document `doc` of `origin`); a resource named twice is
    /// refused with both places.
    fn add_doc(
        &mut self,
        value: serde_yaml::Value,
        kind: &str,
        origin: &str,
        doc: usize,
    ) -> Result<(), ManifestError> {
        let invalid = |message: String| ManifestError::Invalid {
            path: origin.into(),
            doc,
            message,
        };
        match kind {
            "GpuPartition" => {
                let p: GpuPartition =
                    from_value(value).map_err(|e| invalid(format!("GpuPartition: {e}")))?;
                let key = format!("GpuPartition/{}", p.metadata.name.as_deref().unwrap_or(""));
                self.note_origin(key, format!("{origin}, document {doc}"))?;
                self.partitions.push(p);
            }
            "InferenceServer" => {
                let mut s: InferenceServer =
                    from_value(value).map_err(|e| invalid(format!("InferenceServer: {e}")))?;
                if s.metadata.namespace.is_none() {
                    s.metadata.namespace = Some("default".into());
                }
                let key = format!(
                    "InferenceServer/{}/{}",
                    s.metadata.namespace.as_deref().unwrap_or(""),
                    s.metadata.name.as_deref().unwrap_or("")
                );
                self.note_origin(key, format!("{origin}, document {doc}"))?;
                self.servers.push(s);
            }
            "GpuNodePool" => {
                let p: GpuNodePool =
                    from_value(value).map_err(|e| invalid(format!("GpuNodePool: {e}")))?;
                let key = format!("GpuNodePool/{}", p.metadata.name.as_deref().unwrap_or(""));
                self.note_origin(key, format!("{origin}, document {doc}"))?;
                self.pools.push(p);
            }
            other => {
                return Err(invalid(format!(
                    "kind {other:?} is not one of {}",
                    KINDS.join(", ")
                )))
            }
        }
        Ok(())
    }

    /// Remembers where `resource` was read; a second definition is an error naming both places.
    fn note_origin(&mut self, resource: String, at: String) -> Result<(), ManifestError> {
        if let Some(first) = self.origins.get(&resource) {
            return Err(ManifestError::Duplicate {
                resource,
                first: first.clone(),
                second: at,
            });
        }
        self.origins.insert(resource, at);
        Ok(())
    }

    /// Reads a file or every YAML file of a directory.
    ///
    /// # Guarantees
    /// Only regular files are read, each at most [`MANIFEST_MAX`] bytes (a link to `/dev/zero`
    /// grew the agent without bound before). A directory's entry may be a symlink only to a file
    /// inside the same directory (as a ConfigMap volume's `..data/` links are); one that leads
    /// out is refused, naming it.
    pub fn load(path: &Path) -> Result<Manifests, ManifestError> {
        let mut m = Manifests::default();
        if path.is_dir() {
            let dir = std::fs::canonicalize(path).map_err(|e| ManifestError::Read {
                path: path.display().to_string(),
                source: e,
            })?;
            let mut files: Vec<_> = std::fs::read_dir(path)
                .map_err(|e| ManifestError::Read {
                    path: path.display().to_string(),
                    source: e,
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_manifest_file(p))
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(ManifestError::Empty(path.display().to_string()));
            }
            for f in files {
                let real = std::fs::canonicalize(&f).map_err(|e| ManifestError::Read {
                    path: f.display().to_string(),
                    source: e,
                })?;
                if !real.starts_with(&dir) {
                    return Err(ManifestError::Refused {
                        path: f.display().to_string(),
                        why: format!(
                            "it is a link to {}, outside {}",
                            real.display(),
                            dir.display()
                        ),
                    });
                }
                m.add_text(&read_bounded(&f)?, &f.display().to_string())?;
            }
        } else {
            m.add_text(&read_bounded(path)?, &path.display().to_string())?;
        }
        Ok(m)
    }
}

/// The kinds a manifest may hold.
pub const KINDS: &[&str] = &["GpuPartition", "InferenceServer", "GpuNodePool"];

/// Whether [`Manifests::load`] reads this entry of a directory: `*.yaml` and `*.yml`.
pub fn is_manifest_file(p: &Path) -> bool {
    p.extension().is_some_and(|x| x == "yaml" || x == "yml")
}

/// Largest manifest file read (bytes): far above any real set of partitions and servers.
pub const MANIFEST_MAX: u64 = 4 * 1024 * 1024;

/// A regular file's text, at most [`MANIFEST_MAX`] bytes.
fn read_bounded(p: &Path) -> Result<String, ManifestError> {
    use std::io::Read;
    let io = |e: std::io::Error| ManifestError::Read {
        path: p.display().to_string(),
        source: e,
    };
    let meta = std::fs::metadata(p).map_err(io)?;
    if !meta.is_file() {
        return Err(ManifestError::Refused {
            path: p.display().to_string(),
            why: "it is not a regular file".into(),
        });
    }
    let mut text = String::new();
    std::fs::File::open(p)
        .map_err(io)?
        .take(MANIFEST_MAX + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MANIFEST_MAX {
        return Err(ManifestError::Refused {
            path: p.display().to_string(),
            why: format!("it is larger than {} MiB", MANIFEST_MAX / (1024 * 1024)),
        });
    }
    Ok(text)
}

/// Deserializes a document; an error names the field's path (`spec.listen.port: ...`).
fn from_value<T: serde::de::DeserializeOwned>(v: serde_yaml::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("{path}: {}", e.into_inner())
        }
    })
}

/// The kind of document `doc` of `origin`, after its apiVersion and (for our kinds) the CRD
/// schema were checked.
fn checked_kind(
    value: &serde_yaml::Value,
    origin: &str,
    doc: usize,
) -> Result<String, ManifestError> {
    let invalid = |message: String| ManifestError::Invalid {
        path: origin.into(),
        doc,
        message,
    };
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default()
        .to_string();
    let api = value
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or_default()
        .to_string();
    if api != "gpuplane.dev/v1alpha1" {
        return Err(invalid(format!(
            "apiVersion {api:?} is not gpuplane.dev/v1alpha1"
        )));
    }
    if KINDS.contains(&kind.as_str()) {
        let json = serde_json::to_value(value).map_err(|e| invalid(e.to_string()))?;
        let errors = schema::check(&kind, &json);
        if !errors.is_empty() {
            return Err(ManifestError::Schema {
                path: origin.into(),
                doc,
                name: json["metadata"]["name"]
                    .as_str()
                    .unwrap_or("(unnamed)")
                    .into(),
                kind,
                errors,
            });
        }
    }
    Ok(kind)
}

#[cfg(test)]
mod tests;
