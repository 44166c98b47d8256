//! `gpuplane status`: what a person asks of a host — which GPU is where, on which driver, whose
//! it is, and how each resource is doing — read from what the agents already publish (the
//! standalone agent's status directory, or the cluster's objects), never from the host itself,
//! so it is safe to run anywhere, any time, as any user who can read the status.
//!
//! | file        | holds                                                                  |
//! |-------------|------------------------------------------------------------------------|
//! | `files.rs`  | the status directory, read bounded (regular files of the agent's names) |
//! | `kube.rs`   | the cluster's objects in the status files' shape                       |
//! | `model.rs`  | documents read leniently, every string sanitized and capped, once       |
//! | `render.rs` | the tables (GPUs per host, conditions per resource) and `-o yaml`; pure |
//! | `table.rs`  | kubectl's column alignment and ages; colour after padding              |
//! | `watch.rs`  | `-w`: only what changed since the last read                            |
//! | `wait.rs`   | `gpuplane wait`: is every resource there yet; pure                    |

pub mod files;
pub mod kube;
pub mod model;
pub mod render;
pub mod table;
pub mod wait;
pub mod watch;

use model::{Doc, Specs};
use render::Frame;
use std::path::PathBuf;

/// Where the status comes from.
pub enum Source {
    /// The standalone agent's status directory; `manifests`, when given, is read for each
    /// partition's node and its slices' consumers (the status files do not carry them).
    Dir {
        dir: PathBuf,
        manifests: Option<PathBuf>,
    },
    /// The cluster.
    Cluster(kube::Cluster),
}

/// `-o`: the default table, `wide` (path, UUID, serial, messages), `yaml` (the documents).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Wide,
    Yaml,
}

impl Source {
    /// One read: the documents, the specs at hand, and notes for stderr (what could not be read).
    pub fn read(&self) -> Result<(Vec<Doc>, Specs, Vec<String>), String> {
        match self {
            Source::Cluster(c) => c.read(),
            Source::Dir { dir, manifests } => {
                let docs = files::read(dir)?;
                let mut notes = vec![];
                let specs = match manifests {
                    None => Specs::new(),
                    Some(m) => match crate::manifests::Manifests::load(m) {
                        Ok(m) => m
                            .partitions
                            .iter()
                            .map(|p| {
                                let name = p.metadata.name.clone().unwrap_or_default();
                                (model::clean(&name, 253), model::spec_of(&p.spec))
                            })
                            .collect(),
                        Err(e) => {
                            notes.push(model::clean(&format!("consumers not shown: {e}"), 400));
                            Specs::new()
                        }
                    },
                };
                for d in &docs {
                    if let Err(e) = &d.value {
                        notes.push(model::clean(&format!("{}: {e}", d.origin), 400));
                    }
                }
                Ok((docs, specs, notes))
            }
        }
    }

    /// The resources the manifests at hand name (`GpuPartition/NAME`,
    /// `InferenceServer/NAMESPACE/NAME`, as the status documents name them): a wait needs each
    /// one's status. None for the cluster, whose objects are the list.
    pub fn expected(&self) -> Result<Vec<String>, String> {
        let Source::Dir {
            manifests: Some(m), ..
        } = self
        else {
            return Ok(vec![]);
        };
        let m = crate::manifests::Manifests::load(m).map_err(|e| e.to_string())?;
        let name = |n: &Option<String>| n.clone().unwrap_or_default();
        let partitions = m
            .partitions
            .iter()
            .map(|p| format!("GpuPartition/{}", name(&p.metadata.name)));
        let servers = m.servers.iter().map(|s| {
            let ns = s.metadata.namespace.as_deref().unwrap_or("default");
            format!("InferenceServer/{ns}/{}", name(&s.metadata.name))
        });
        Ok(partitions.chain(servers).collect())
    }

    /// One read as a frame of `format` at `now`, and its notes.
    pub fn frame(
        &self,
        format: Format,
        now: jiff::Timestamp,
    ) -> Result<(Frame, Vec<String>), String> {
        let (docs, specs, notes) = self.read()?;
        Ok((frame(&docs, &specs, format, now), notes))
    }
}

/// The frame of `docs` in `format` at `now`. Pure.
pub fn frame(docs: &[Doc], specs: &Specs, format: Format, now: jiff::Timestamp) -> Frame {
    match format {
        Format::Yaml => Frame::Yaml(render::yaml(docs)),
        f => Frame::Tables(render::tables(docs, specs, f == Format::Wide, now)),
    }
}
