//! Model directories as SGLang loads them, read without trusting them: `config.json`, the
//! safetensors index and each shard's header.
//!
//! Pure: every function takes bytes or a [`Target`] (the reads a host backend offers, on the
//! host or inside a container) and returns facts. Nothing here panics on any input: headers
//! are bounded ([`safetensors::HEADER_MAX`]), JSON files are read up to [`JSON_MAX`] bytes, and
//! names from `weight_map` must be plain file names inside the directory.
//!
//! # Guarantees
//! - A truncated shard is caught from its header and its size alone: the size must be exactly
//!   8 + header length + the largest data end the header declares. The weights are never read.
//! - Every shard `weight_map` names must exist; the sum of the shards' data must equal the
//!   index's `metadata.total_size` when the index gives one.
//! - Only names inside the model directory are ever opened, and each through
//!   [`Target::confine`] first (preflight: resolved, and refused outside the model roots).

pub mod config;
pub mod safetensors;

pub use config::ConfigFacts;

/// Largest JSON file (config, index) read, in bytes: a 1T-parameter index is ~3 MiB.
pub const JSON_MAX: u64 = 32 << 20;

/// Most problems reported per directory (a download missing 300 shards names the first few).
const PROBLEMS_MAX: usize = 8;

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub size: u64,
    /// Modification time, seconds (fractions as the target reports them), as text.
    pub mtime: String,
    pub is_file: bool,
}

/// The reads preflight needs from where the server will run.
pub trait Target {
    /// The entries of a directory; `Err` when it cannot be listed (missing, not a directory).
    fn list(&self, dir: &str) -> Result<Vec<Entry>, String>;
    /// Up to `max` bytes of a file from `offset`.
    fn read(&self, path: &str, offset: u64, max: u64) -> Result<Vec<u8>, String>;
    /// Whether a path exists.
    fn exists(&self, path: &str) -> bool;
    /// The path with every symlink resolved (`realpath`), to check it stays under a root.
    fn resolve(&self, path: &str) -> Result<String, String>;
    /// The path to open for `path`, or why it may not be opened at all; asked before anything
    /// about a file (its size included) is used. The default allows every path as it is;
    /// preflight confines every file to the slice's model roots (`host::preflight::Confined`).
    fn confine(&self, path: &str) -> Result<String, String> {
        Ok(path.to_string())
    }
}

/// What a model directory holds, as preflight judges it.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirFacts {
    /// The directory.
    pub path: String,
    /// What is wrong with its files, each naming the file and the numbers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// What `config.json` declares.
    #[serde(default)]
    pub config: ConfigFacts,
    /// Bytes of tensor data over every shard (the weights SGLang loads).
    pub weight_bytes: u64,
    /// Safetensors files checked.
    pub shards: u32,
    /// The index's `metadata.total_size`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_total_size: Option<u64>,
}

impl DirFacts {
    fn problem(&mut self, p: String) {
        if self.problems.len() < PROBLEMS_MAX {
            self.problems.push(p);
        } else if self.problems.len() == PROBLEMS_MAX {
            self.problems.push("(more problems not listed)".into());
        }
    }
}

/// A listing's fingerprint: names, sizes and mtimes, so a changed file re-runs the checks.
pub fn fingerprint(entries: &[Entry]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for e in entries {
        h.update(format!(
            "{}\0{}\0{}\0{}\n",
            e.name, e.size, e.mtime, e.is_file
        ));
    }
    format!("{:x}", h.finalize())
}

/// Checks the model directory `dir` through `t`, given its listing.
pub fn inspect(t: &dyn Target, dir: &str, entries: &[Entry]) -> DirFacts {
    let mut f = DirFacts {
        path: dir.to_string(),
        ..DirFacts::default()
    };
    let file = |name: &str| entries.iter().find(|e| e.is_file && e.name == name);
    let join = |name: &str| format!("{}/{name}", dir.trim_end_matches('/'));
    match file("config.json") {
        None => f.problem(format!(
            "{}: missing (SGLang reads the model's architecture from it)",
            join("config.json")
        )),
        Some(e) => match read_json(t, &join("config.json"), e.size) {
            Ok(v) => f.config = ConfigFacts::from_json(&v),
            Err(why) => f.problem(format!("{}: {why}", join("config.json"))),
        },
    }
    let shards: Vec<&Entry> = match file("model.safetensors.index.json") {
        Some(ix) => match read_json(t, &join("model.safetensors.index.json"), ix.size) {
            Ok(v) => index_shards(&mut f, &v, entries, &join),
            Err(why) => {
                f.problem(format!("{}: {why}", join("model.safetensors.index.json")));
                vec![]
            }
        },
        None => {
            let single: Vec<&Entry> = entries
                .iter()
                .filter(|e| e.is_file && e.name.ends_with(".safetensors"))
                .collect();
            if single.is_empty() && !entries.iter().any(|e| is_other_weights(&e.name)) {
                f.problem(format!(
                    "{dir}: no *.safetensors file and no model.safetensors.index.json"
                ));
            }
            single
        }
    };
    for e in shards {
        f.shards += 1;
        match shard_data_bytes(t, &join(&e.name), e.size) {
            Ok(n) => f.weight_bytes += n,
            Err(why) => f.problem(format!("{}: {why}", join(&e.name))),
        }
    }
    check_total(&mut f);
    f
}

/// Weight formats preflight does not read (GGUF, `.bin`, `.pt`): their presence is not an error.
fn is_other_weights(name: &str) -> bool {
    [".bin", ".pt", ".pth", ".gguf"]
        .iter()
        .any(|x| name.ends_with(x))
}

/// The shards an index names, each once, in name order; problems for missing or odd names and a
/// `total_size` that is not what the shards hold (checked later, against their data).
fn index_shards<'e>(
    f: &mut DirFacts,
    v: &serde_json::Value,
    entries: &'e [Entry],
    join: &dyn Fn(&str) -> String,
) -> Vec<&'e Entry> {
    let ix = join("model.safetensors.index.json");
    let Some(map) = v.get("weight_map").and_then(|m| m.as_object()) else {
        f.problem(format!("{ix}: no weight_map object"));
        return vec![];
    };
    let names: std::collections::BTreeSet<&str> = map.values().filter_map(|s| s.as_str()).collect();
    let mut out = vec![];
    for n in names {
        if n.is_empty() || n.contains('/') || n.contains('\\') || n == "." || n == ".." {
            f.problem(format!(
                "{ix}: weight_map names {:?}, which is not a file of the model directory",
                crate::text::sanitize(n, 200)
            ));
            continue;
        }
        match entries.iter().find(|e| e.name == n && e.is_file) {
            Some(e) => out.push(e),
            None => f.problem(format!("{}: missing (named in weight_map)", join(n))),
        }
    }
    if let Some(total) = v.pointer("/metadata/total_size").and_then(|t| t.as_u64()) {
        f.index_total_size = Some(total);
    }
    out
}

/// Reads a JSON file of `size` bytes (at most [`JSON_MAX`]).
fn read_json(t: &dyn Target, path: &str, size: u64) -> Result<serde_json::Value, String> {
    let path = &t.confine(path)?;
    if size > JSON_MAX {
        return Err(format!("{size} bytes, more than the {JSON_MAX} read"));
    }
    let bytes = t.read(path, 0, size)?;
    serde_json::from_slice(&bytes).map_err(|e| format!("not valid JSON: {e}"))
}

/// The data bytes of a shard of `size` bytes, from its header; an error names the numbers.
fn shard_data_bytes(t: &dyn Target, path: &str, size: u64) -> Result<u64, String> {
    let path = &t.confine(path)?;
    if size < 8 {
        return Err(format!("{size} bytes: too short for a safetensors header"));
    }
    let head = t.read(path, 0, 8)?;
    let len = safetensors::header_len(&head)?;
    if 8 + len > size {
        return Err(format!(
            "{size} bytes, but its header alone declares {} (truncated)",
            8 + len
        ));
    }
    let header = t.read(path, 8, len)?;
    let h = safetensors::parse_header(&header)?;
    let want = 8 + len + h.data_end;
    if want != size {
        let what = if size < want {
            "truncated"
        } else {
            "longer than its header says"
        };
        return Err(format!(
            "{size} bytes, but its header declares {want} (8 + {len} header + {} data): {what}",
            h.data_end
        ));
    }
    Ok(h.data_end)
}

/// Checks the index's `total_size` against the shards' data, when both are known (a missing or
/// broken shard is already reported: the sum would only repeat it).
fn check_total(f: &mut DirFacts) {
    if let Some(total) = f.index_total_size {
        if f.problems.is_empty() && total != f.weight_bytes {
            f.problem(format!(
                "{}/model.safetensors.index.json: total_size {total}, but the shards hold {} bytes of tensors",
                f.path.trim_end_matches('/'),
                f.weight_bytes
            ));
        }
    }
}

#[cfg(test)]
mod tests;
