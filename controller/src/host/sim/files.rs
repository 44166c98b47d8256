//! The simulated host's files that preflight reads: model directories described by their
//! shape (shards, bytes per shard, which shards are missing or cut short), interpreters and
//! the paths that exist. Headers are generated exactly as a real safetensors file holds them,
//! so the real backend's checks ([`crate::modelfiles`]) run unchanged on them.

use super::SimHost;
use crate::host::model::{InterpreterFacts, PreflightFacts};
use crate::host::preflight::Cache;
use crate::modelfiles::{safetensors, Entry, Target};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What the simulated host's servers would find on disk (the same wherever they run).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SimFiles {
    /// Model directories by absolute path.
    pub models: BTreeMap<String, SimModel>,
    /// Interpreters by path, with what they import.
    pub interpreters: BTreeMap<String, SimInterpreter>,
    /// Other paths that exist (`CUDA_HOME`, library directories).
    pub paths: BTreeSet<String>,
    /// Total memory of every GPU, MiB (`nvidia-smi`'s `memory.total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_memory_mib: Option<u64>,
}

/// A model directory: `config.json`, an index and `shards` safetensors files.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SimModel {
    /// `config.json`'s content.
    pub config: serde_json::Value,
    pub shards: u32,
    /// Tensor bytes in each shard.
    pub shard_bytes: u64,
    /// Shard file names that are absent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// Bytes missing at the end of a shard (a cut-off download), by file name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub truncated: BTreeMap<String, u64>,
}

impl SimModel {
    /// The file name of shard `i` (1-based), as Hugging Face names them.
    pub fn shard_name(&self, i: u32) -> String {
        format!("model-{i:05}-of-{:05}.safetensors", self.shards)
    }

    fn header(&self, i: u32) -> Vec<u8> {
        safetensors::shard_bytes_header(&format!("layer.{i}.weight"), self.shard_bytes)
    }

    fn index(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = (1..=self.shards)
            .map(|i| (format!("layer.{i}.weight"), self.shard_name(i).into()))
            .collect();
        serde_json::json!({
            "metadata": {"total_size": self.shard_bytes * u64::from(self.shards)},
            "weight_map": map,
        })
        .to_string()
    }

    /// Each file and its content as far as preflight reads it (shards: the header).
    fn files(&self) -> Vec<(String, u64, Vec<u8>)> {
        let mut v = vec![];
        v.extend(self.config_file());
        v.push(self.index_file());
        v.extend((1..=self.shards).filter_map(|i| self.shard_file(i)));
        v
    }

    /// The one file `name` (size and content), generated alone: a read of one shard's header
    /// must not generate every shard's (that made each observe quadratic in the shard count).
    fn file(&self, name: &str) -> Option<(u64, Vec<u8>)> {
        let found = match name {
            "config.json" => self.config_file(),
            "model.safetensors.index.json" => Some(self.index_file()),
            _ => (1..=self.shards)
                .find(|&i| self.shard_name(i) == name)
                .and_then(|i| self.shard_file(i)),
        };
        found.map(|(_, size, content)| (size, content))
    }

    fn config_file(&self) -> Option<(String, u64, Vec<u8>)> {
        (!self.config.is_null()).then(|| {
            let c = self.config.to_string().into_bytes();
            ("config.json".into(), c.len() as u64, c)
        })
    }

    fn index_file(&self) -> (String, u64, Vec<u8>) {
        let ix = self.index().into_bytes();
        ("model.safetensors.index.json".into(), ix.len() as u64, ix)
    }

    /// Shard `i` (1-based): its name, its size (header and tensor bytes, less what was cut
    /// off) and its header; `None` when it is missing.
    fn shard_file(&self, i: u32) -> Option<(String, u64, Vec<u8>)> {
        let name = self.shard_name(i);
        if self.missing.contains(&name) {
            return None;
        }
        let h = self.header(i);
        let full = h.len() as u64 + self.shard_bytes;
        let size = full.saturating_sub(self.truncated.get(&name).copied().unwrap_or(0));
        Some((name, size, h))
    }
}

/// An interpreter and what it imports.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SimInterpreter {
    /// SGLang's version; `None`: `import sglang` fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sglang: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
}

impl Target for SimFiles {
    fn list(&self, dir: &str) -> Result<Vec<Entry>, String> {
        let m = self
            .models
            .get(dir.trim_end_matches('/'))
            .ok_or("No such file or directory")?;
        let mut v: Vec<Entry> = m
            .files()
            .into_iter()
            .map(|(name, size, _)| Entry {
                name,
                size,
                mtime: "0".into(),
                is_file: true,
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    fn read(&self, path: &str, offset: u64, max: u64) -> Result<Vec<u8>, String> {
        let (dir, name) = path.rsplit_once('/').ok_or("No such file")?;
        let m = self.models.get(dir).ok_or("No such file or directory")?;
        let (size, content) = m.file(name).ok_or("No such file or directory")?;
        // Past the generated content (tensor data) reads zeros, up to the file's size.
        let end = offset.saturating_add(max).min(size);
        let mut out = vec![0; end.saturating_sub(offset) as usize];
        let from = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(content.len());
        let to = usize::try_from(end)
            .unwrap_or(usize::MAX)
            .min(content.len());
        if from < to {
            out[..to - from].copy_from_slice(&content[from..to]);
        }
        Ok(out)
    }

    fn exists(&self, path: &str) -> bool {
        let p = path.trim_end_matches('/');
        self.paths.contains(p) || self.models.contains_key(p) || self.interpreters.contains_key(p)
    }

    fn resolve(&self, path: &str) -> Result<String, String> {
        // No links here: a path resolves to itself when it exists (a model's files are whatever
        // the model generates; reading a missing one fails there).
        let p = path.trim_end_matches('/');
        let in_model = p
            .rsplit_once('/')
            .is_some_and(|(d, _)| self.models.contains_key(d));
        if self.exists(p) || in_model {
            Ok(p.to_string())
        } else {
            Err("No such file or directory".into())
        }
    }
}

impl SimHost {
    /// Preflight facts for the requests whose location runs, when the description simulates
    /// files (`files:`); none otherwise.
    pub(super) fn observe_preflight(&self) -> BTreeMap<String, PreflightFacts> {
        let Some(files) = &self.file.files else {
            return BTreeMap::new();
        };
        let mut cache = Cache::default();
        let mut out = BTreeMap::new();
        for req in &self.preflight {
            if !self.runs(req.location) {
                continue;
            }
            let interp = || {
                match files.interpreters.get(&req.python) {
                None => InterpreterFacts {
                    error: Some(format!(
                        "{} cannot run: No such file or directory",
                        req.python
                    )),
                    ..Default::default()
                },
                Some(i) => InterpreterFacts {
                    error: i.sglang.is_none().then(|| {
                        format!(
                            "{}: import sglang failed: ModuleNotFoundError: No module named 'sglang'",
                            req.python
                        )
                    }),
                    sglang: i.sglang.clone(),
                    torch: i.torch.clone(),
                    cuda: i.cuda.clone(),
                },
            }
            };
            let mem = || {
                files
                    .gpu_memory_mib
                    .map(|m| req.gpus.iter().map(|g| (g.clone(), m)).collect())
                    .unwrap_or_default()
            };
            out.insert(req.server.clone(), cache.facts(files, req, &interp, &mem));
        }
        out
    }
}

impl SimHost {
    /// Smoke tests of Ready servers: the simulated server answers each chat request the way
    /// SGLang shapes it (content echoing the prompt; `reasoning_content` when the unit sets
    /// `--reasoning-parser`; a parsed call of the first tool offered when it sets
    /// `--tool-call-parser`, unless `behaviour.smokeNoToolCall`), judged like a real answer.
    pub(super) fn observe_smoke(&self, st: &mut crate::host::model::HostState) {
        for req in &self.preflight {
            let Some(spec) = &req.smoke else { continue };
            let Some(u) = st.units.get_mut(&req.unit.key()) else {
                continue;
            };
            let file = u.file.clone().unwrap_or_default();
            let Some(obs) = u.server.as_mut() else {
                continue;
            };
            let ready = obs.http == crate::host::model::HttpState::Healthy
                && obs.models.contains(&req.served_name);
            if !ready {
                continue;
            }
            let argv = crate::systemd::unit::parse(&file)
                .map(|p| p.exec_start)
                .unwrap_or_default();
            let has = |flag: &str| argv.iter().any(|a| a == flag);
            let failures = spec
                .requests
                .iter()
                .filter_map(|q| {
                    let mut msg = serde_json::json!({
                        "role": "assistant",
                        "content": format!("You asked: {}", q.prompt),
                    });
                    if has("--reasoning-parser") {
                        msg["reasoning_content"] = "Let me think about that.".into();
                    }
                    if let Some(t) = q.tools.first() {
                        if has("--tool-call-parser") && !self.file.behaviour.smoke_no_tool_call {
                            msg["content"] = serde_json::Value::Null;
                            msg["tool_calls"] = serde_json::json!([{"id": "call_0", "index": 0, "type": "function",
                                "function": {"name": t.name, "arguments": "{}"}}]);
                        }
                    }
                    let body = serde_json::json!({"object": "chat.completion", "choices": [{"index": 0, "message": msg}]});
                    crate::sglang::smoke::judge(q, 200, &body.to_string()).err()
                })
                .collect();
            obs.smoke = Some(crate::host::model::SmokeResult {
                unit_hash: crate::digest::sha256(&file),
                requests: spec.requests.len() as u32,
                failures,
            });
        }
    }
}
