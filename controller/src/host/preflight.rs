//! Preflight reads shared by the backends: a server's model directories and environment paths,
//! read through a [`Target`] (the host's files, a container's, the simulated host's), and the
//! cache that keeps a converged host from re-reading headers every reconcile.
//!
//! # Guarantees
//! - Reads only: nothing here writes, starts or stops anything.
//! - A model directory outside the request's roots (after resolving symlinks) is not read at
//!   all; the facts say so.
//! - A cached result is reused only while the request and the directories' listings (names,
//!   sizes, mtimes) are unchanged; a failing interpreter is asked again every time.

use super::model::{InterpreterFacts, PreflightFacts, PreflightRequest};
use crate::modelfiles::{self, DirFacts, Target};
use std::collections::BTreeMap;

/// Results kept between observations, by server id: the key they were read under.
#[derive(Debug, Clone, Default)]
pub struct Cache {
    entries: BTreeMap<String, (String, PreflightFacts)>,
}

impl Cache {
    /// The facts for `req`: from the cache when its key still holds, else read now through `t`
    /// (`interpreter` runs the import check, `gpu_memory` reads the GPUs' memory).
    pub fn facts(
        &mut self,
        t: &dyn Target,
        req: &PreflightRequest,
        interpreter: &dyn Fn() -> InterpreterFacts,
        gpu_memory: &dyn Fn() -> BTreeMap<String, u64>,
    ) -> PreflightFacts {
        let key = key(t, req);
        if let Some((k, f)) = self.entries.get(&req.server) {
            if *k == key && f.interpreter.error.is_none() {
                return f.clone();
            }
        }
        let f = PreflightFacts {
            interpreter: interpreter(),
            model: req.model_dir.as_deref().map(|d| read_dir(t, d, &req.roots)),
            draft: req.draft_dir.as_deref().map(|d| read_dir(t, d, &req.roots)),
            missing_paths: missing_paths(t, req),
            gpu_memory_mib: gpu_memory(),
        };
        self.entries.insert(req.server.clone(), (key, f.clone()));
        f
    }

    /// Forgets what was read for `server` (read against a spent budget: not to be trusted).
    pub fn forget(&mut self, server: &str) {
        self.entries.remove(server);
    }

    /// Forgets servers no longer asked about.
    pub fn retain(&mut self, requests: &[PreflightRequest]) {
        self.entries
            .retain(|k, _| requests.iter().any(|r| &r.server == k));
    }
}

/// The cache key: the request and the listings of its directories.
fn key(t: &dyn Target, req: &PreflightRequest) -> String {
    let listing = |d: &Option<String>| {
        d.as_deref()
            .map(|d| match t.list(d) {
                Ok(e) => modelfiles::fingerprint(&e),
                Err(e) => e,
            })
            .unwrap_or_default()
    };
    format!(
        "{}|{}|{}",
        serde_json::to_string(req).unwrap_or_default(),
        listing(&req.model_dir),
        listing(&req.draft_dir)
    )
}

/// Whether `path` may be read under `roots`: below one of them, or anywhere when there are none
/// (a host without tenancy rules, the CLI on files).
fn within(path: &str, roots: &[String]) -> bool {
    roots.is_empty() || roots.iter().any(|r| under(path, r))
}

/// Whether `path` is `root` or below it (both absolute, compared by whole components).
pub fn under(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    path == root || path.starts_with(&format!("{root}/")) || root.is_empty()
}

/// A [`Target`] whose every file is resolved (symlinks followed, as SGLang's loader follows
/// them) and opened only when the result lies under the model roots: a `config.json` or shard
/// that links to `/etc/shadow` is named as such and never opened, its size never used.
/// Resolutions are kept for the one directory read (a shard is asked for twice).
pub struct Confined<'a> {
    t: &'a dyn Target,
    roots: &'a [String],
    resolved: std::cell::RefCell<BTreeMap<String, Result<String, String>>>,
}

impl<'a> Confined<'a> {
    pub fn new(t: &'a dyn Target, roots: &'a [String]) -> Confined<'a> {
        Confined {
            t,
            roots,
            resolved: Default::default(),
        }
    }
}

impl Target for Confined<'_> {
    fn list(&self, dir: &str) -> Result<Vec<modelfiles::Entry>, String> {
        self.t.list(dir)
    }
    fn read(&self, path: &str, offset: u64, max: u64) -> Result<Vec<u8>, String> {
        let real = self.confine(path)?;
        self.t.read(&real, offset, max)
    }
    fn exists(&self, path: &str) -> bool {
        self.t.exists(path)
    }
    fn resolve(&self, path: &str) -> Result<String, String> {
        self.t.resolve(path)
    }
    fn confine(&self, path: &str) -> Result<String, String> {
        if let Some(r) = self.resolved.borrow().get(path) {
            return r.clone();
        }
        let r = self.t.resolve(path).and_then(|real| {
            if within(&real, self.roots) {
                Ok(real)
            } else {
                Err(format!(
                    "links to {}, outside the slice's modelRoots; not read",
                    crate::text::sanitize(&real, 200)
                ))
            }
        });
        self.resolved
            .borrow_mut()
            .insert(path.to_string(), r.clone());
        r
    }
}

/// Reads one model directory, unless it lies outside `roots`.
fn read_dir(t: &dyn Target, dir: &str, roots: &[String]) -> DirFacts {
    let outside = |p: &str| !within(p, roots);
    let refuse = |why: String| DirFacts {
        path: dir.to_string(),
        problems: vec![why],
        ..DirFacts::default()
    };
    if outside(dir) {
        return refuse(format!("{dir}: not under the slice's modelRoots; not read"));
    }
    let real = match t.resolve(dir) {
        Ok(r) => r,
        Err(e) => return refuse(format!("{dir}: {e}")),
    };
    if outside(&real) {
        return refuse(format!(
            "{dir}: resolves to {real}, outside the slice's modelRoots; not read"
        ));
    }
    match t.list(&real) {
        Ok(entries) => {
            let mut f = modelfiles::inspect(&Confined::new(t, roots), &real, &entries);
            f.path = dir.to_string();
            f
        }
        Err(e) => refuse(format!("{dir}: {e}")),
    }
}

/// Environment paths that do not exist in the target.
fn missing_paths(t: &dyn Target, req: &PreflightRequest) -> Vec<String> {
    req.env_paths
        .iter()
        .filter(|(_, p)| !t.exists(p))
        .map(|(v, p)| format!("{v}={p}"))
        .collect()
}

/// The import check the interpreter runs: a constant program (no spec text in it) that prints
/// one JSON line: `sglang`, `torch`, `cuda` versions, or `error`.
pub const IMPORT_CHECK: &str = r#"import json
r = {}
try:
    import sglang
    r["sglang"] = str(getattr(sglang, "__version__", "unknown"))
except BaseException as e:
    r["error"] = "import sglang failed: %s: %s" % (type(e).__name__, e)
try:
    import torch
    r["torch"] = str(torch.__version__)
    r["cuda"] = str(torch.version.cuda)
except BaseException:
    pass
print(json.dumps(r))
"#;

/// The facts from the import check's output (its last line), or why it failed.
pub fn interpreter_facts(python: &str, ok: bool, stdout: &str, stderr: &str) -> InterpreterFacts {
    let clean = |s: &str| crate::text::sanitize(s, 300);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    let v: Option<serde_json::Value> = line.and_then(|l| serde_json::from_str(l).ok());
    let Some(v) = v.filter(|_| ok) else {
        let tail = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return InterpreterFacts {
            error: Some(format!("{python} cannot run: {}", clean(tail))),
            ..InterpreterFacts::default()
        };
    };
    let get = |k: &str| v.get(k).and_then(|x| x.as_str()).map(clean);
    InterpreterFacts {
        error: get("error").map(|e| format!("{python}: {e}")),
        sglang: get("sglang"),
        torch: get("torch"),
        cuda: get("cuda").filter(|c| c != "None"),
    }
}

/// `nvidia-smi --query-gpu=pci.bus_id,memory.total --format=csv,noheader,nounits` output to
/// MiB by full PCI address (nvidia-smi prints `00000000:01:00.0`), for `gpus` only.
pub fn parse_gpu_memory(out: &str, gpus: &[String]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let Some((bus, mem)) = l.split_once(',') else {
            continue;
        };
        let bus = bus.trim().to_ascii_lowercase();
        let Ok(mib) = mem.trim().parse::<u64>() else {
            continue;
        };
        if let Some(g) = gpus.iter().find(|g| bus.ends_with(&g.to_ascii_lowercase())) {
            m.insert(g.clone(), mib);
        }
    }
    m
}

#[cfg(test)]
mod tests;
