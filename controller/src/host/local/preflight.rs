//! Preflight on the real host: model files read on the host (under `--host-root`) or inside
//! the server's container (`pct exec`, argv only: no shell, spec text is never interpreted),
//! the interpreter's import check where the server runs, GPU memory from `nvidia-smi`.

use super::{LocalHost, Root};
use crate::host::model::{InterpreterFacts, Location, PreflightFacts, PreflightRequest};
use crate::host::preflight;
use crate::modelfiles::{Entry, Target};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};

/// The host's own files, under the backend's root.
struct HostFiles<'a>(&'a Root);

impl Target for HostFiles<'_> {
    fn list(&self, dir: &str) -> Result<Vec<Entry>, String> {
        let rd = std::fs::read_dir(self.0.path(dir)).map_err(|e| e.to_string())?;
        let mut v = vec![];
        for e in rd.flatten() {
            // Follows symlinks, as SGLang's loader does (Hugging Face caches link blobs).
            let Ok(md) = std::fs::metadata(e.path()) else {
                continue;
            };
            let mtime = md
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| format!("{}.{:09}", d.as_secs(), d.subsec_nanos()))
                .unwrap_or_default();
            v.push(Entry {
                name: e.file_name().to_string_lossy().into_owned(),
                size: md.len(),
                mtime,
                is_file: md.is_file(),
            });
        }
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    fn read(&self, path: &str, offset: u64, max: u64) -> Result<Vec<u8>, String> {
        let mut f = std::fs::File::open(self.0.path(path)).map_err(|e| e.to_string())?;
        f.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
        let mut buf = vec![];
        f.take(max)
            .read_to_end(&mut buf)
            .map_err(|e| e.to_string())?;
        Ok(buf)
    }

    fn exists(&self, path: &str) -> bool {
        self.0.path(path).exists()
    }

    fn resolve(&self, path: &str) -> Result<String, String> {
        let real = std::fs::canonicalize(self.0.path(path)).map_err(|e| e.to_string())?;
        let root = std::fs::canonicalize(&self.0 .0).map_err(|e| e.to_string())?;
        let rel = real
            .strip_prefix(&root)
            .map_err(|_| "resolves outside the host root".to_string())?;
        Ok(format!("/{}", rel.to_string_lossy()))
    }
}

/// A running container's files, through `pct exec <vmid> -- <tool> ...` (GNU coreutils/find).
struct ContainerFiles<'a> {
    host: &'a LocalHost,
    vmid: u32,
}

impl ContainerFiles<'_> {
    fn run(&self, argv: &[&str]) -> Result<String, String> {
        let o = self
            .host
            .at(Location::Container(self.vmid), argv)
            .map_err(|e| e.to_string())?;
        if !o.ok() {
            let why = o.stderr.lines().last().unwrap_or("failed").to_string();
            return Err(crate::text::sanitize(&why, 200));
        }
        Ok(o.stdout)
    }
}

impl Target for ContainerFiles<'_> {
    fn list(&self, dir: &str) -> Result<Vec<Entry>, String> {
        let out = self.run(&[
            "find",
            "-L",
            dir,
            "-mindepth",
            "1",
            "-maxdepth",
            "1",
            "-printf",
            "%y %s %T@ %f\\n",
        ])?;
        let mut v: Vec<Entry> = out
            .lines()
            .filter_map(|l| {
                let mut w = l.splitn(4, ' ');
                let (ty, size, mtime, name) = (w.next()?, w.next()?, w.next()?, w.next()?);
                Some(Entry {
                    name: name.to_string(),
                    size: size.parse().ok()?,
                    mtime: mtime.to_string(),
                    is_file: ty == "f",
                })
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    fn read(&self, path: &str, offset: u64, max: u64) -> Result<Vec<u8>, String> {
        // Text through `pct exec` is UTF-8: the binary length prefix is read as a number.
        if offset == 0 && max == 8 {
            let out = self.run(&["od", "-An", "-tu8", "--endian=little", "-N8", path])?;
            let n: u64 = out
                .trim()
                .parse()
                .map_err(|_| "cannot read the header length".to_string())?;
            return Ok(n.to_le_bytes().to_vec());
        }
        // A command's output is capped (1 MiB per stream, `exec.rs`): read in smaller pieces.
        // (Output is text: a multi-byte character cut at a piece's edge would not survive, but
        // headers and index files name tensors in ASCII.)
        const PIECE: u64 = 512 * 1024;
        let mut buf = vec![];
        while (buf.len() as u64) < max {
            let at = offset + buf.len() as u64;
            let want = PIECE.min(max - buf.len() as u64);
            let (skip, count) = (format!("skip={at}"), format!("count={want}"));
            let input = format!("if={path}");
            let out = self.run(&[
                "dd",
                &input,
                "iflag=skip_bytes,count_bytes",
                &skip,
                &count,
                "bs=64K",
                "status=none",
            ])?;
            let got = out.len() as u64;
            buf.extend_from_slice(out.as_bytes());
            if got < want {
                break;
            }
        }
        Ok(buf)
    }

    fn exists(&self, path: &str) -> bool {
        self.run(&["test", "-e", path]).is_ok()
    }

    fn resolve(&self, path: &str) -> Result<String, String> {
        Ok(self.run(&["realpath", "-e", path])?.trim().to_string())
    }
}

impl LocalHost {
    /// Preflight facts for every requested server whose location runs now.
    pub(super) fn observe_preflight(
        &mut self,
        running: &dyn Fn(Location) -> bool,
    ) -> BTreeMap<String, PreflightFacts> {
        let requests = self.preflight.clone();
        let mut cache = std::mem::take(&mut self.preflight_cache);
        cache.retain(&requests);
        let mut out = BTreeMap::new();
        for req in &requests {
            if !running(req.location) {
                continue;
            }
            let interp = || self.import_check(req);
            let mem = || self.gpu_memory_total(&req.gpus);
            let f = match req.location {
                Location::Host => cache.facts(&HostFiles(&self.root), req, &interp, &mem),
                Location::Container(vmid) => {
                    cache.facts(&ContainerFiles { host: self, vmid }, req, &interp, &mem)
                }
            };
            out.insert(req.server.clone(), f);
        }
        self.preflight_cache = cache;
        out
    }

    /// `python -c IMPORT_CHECK` where the server runs.
    fn import_check(&self, req: &PreflightRequest) -> InterpreterFacts {
        match self.at(req.location, &[&req.python, "-c", preflight::IMPORT_CHECK]) {
            Ok(o) => preflight::interpreter_facts(&req.python, o.ok(), &o.stdout, &o.stderr),
            Err(e) => InterpreterFacts {
                error: Some(format!("{} cannot run: {e}", req.python)),
                ..InterpreterFacts::default()
            },
        }
    }

    /// Total memory of `gpus`, MiB, from `nvidia-smi` on the host; empty when it cannot tell.
    fn gpu_memory_total(&self, gpus: &[String]) -> BTreeMap<String, u64> {
        match self.cmd(&[
            &self.tools.nvidia_smi,
            "--query-gpu=pci.bus_id,memory.total",
            "--format=csv,noheader,nounits",
        ]) {
            Ok(o) if o.ok() => preflight::parse_gpu_memory(&o.stdout, gpus),
            _ => BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests;
