//! Preflight on the real host: model files read on the host (under `--host-root`) or inside
//! the server's container (`pct exec`, argv only: no shell, spec text is never interpreted),
//! the interpreter's import check where the server runs, GPU memory from `nvidia-smi`.

use super::{run_as, LocalHost, Root};
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
        // The path comes resolved (`Confined`): a link in its last place now is a swap since.
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.0.path(path))
            .map_err(|e| e.to_string())?;
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
                "iflag=skip_bytes,count_bytes,nofollow",
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

/// A target whose `exists` is answered with the unit's user's rights (`test -e` through
/// `runuser`): the environment paths a tenant names are looked up as the server would look them
/// up, so preflight tells the tenant nothing its own server could not find out (as root, it was
/// an oracle for any path on the host). Reads of model files go to `inner` (confined to the
/// model roots by `host::preflight`).
struct AsUser<'a> {
    inner: &'a dyn Target,
    host: &'a LocalHost,
    location: Location,
    user: &'a str,
}

impl Target for AsUser<'_> {
    fn list(&self, dir: &str) -> Result<Vec<Entry>, String> {
        self.inner.list(dir)
    }
    fn read(&self, path: &str, offset: u64, max: u64) -> Result<Vec<u8>, String> {
        self.inner.read(path, offset, max)
    }
    fn exists(&self, path: &str) -> bool {
        let test = vec!["test".to_string(), "-e".to_string(), path.to_string()];
        let argv = run_as::argv(Some(self.user), &self.host.tools.runuser, test);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        self.host.at(self.location, &argv).is_ok_and(|o| o.ok())
    }
    fn resolve(&self, path: &str) -> Result<String, String> {
        self.inner.resolve(path)
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
        self.smoke.retain(|k| {
            requests
                .iter()
                .any(|r| k.starts_with(&format!("{}|", r.unit.key())))
        });
        let mut out = BTreeMap::new();
        for req in &requests {
            if !running(req.location) {
                continue;
            }
            let interp = || self.import_check(req);
            let mem = || self.gpu_memory_total(&req.gpus);
            let (host_files, container_files);
            let files: &dyn Target = match req.location {
                Location::Host => {
                    host_files = HostFiles(&self.root);
                    &host_files
                }
                Location::Container(vmid) => {
                    container_files = ContainerFiles { host: self, vmid };
                    &container_files
                }
            };
            let as_user;
            let t: &dyn Target = match req.user.as_deref() {
                None | Some("root") | Some("0") => files,
                Some(user) => {
                    as_user = AsUser {
                        inner: files,
                        host: self,
                        location: req.location,
                        user,
                    };
                    &as_user
                }
            };
            // One budget for this server's preflight, all its commands together.
            let until = std::time::Instant::now() + self.preflight_budget;
            self.preflight_until.set(Some(until));
            let f = cache.facts(t, req, &interp, &mem);
            if self.preflight_spent() {
                // Facts read against a spent budget are not kept: the next look reads again.
                cache.forget(&req.server);
            }
            self.preflight_until.set(None);
            out.insert(req.server.clone(), f);
        }
        self.preflight_cache = cache;
        out
    }

    /// `python -I -s -c IMPORT_CHECK` where the server runs, as the unit's user, once the
    /// interpreter's tree is known to be root's (and the user's) alone.
    fn import_check(&self, req: &PreflightRequest) -> InterpreterFacts {
        let failed = |why: String| InterpreterFacts {
            error: Some(why),
            ..InterpreterFacts::default()
        };
        if let Err(why) =
            self.interpreter_is_trusted(req.location, &req.python, req.user.as_deref())
        {
            return failed(why);
        }
        let mut py = vec![req.python.clone()];
        py.extend(run_as::ISOLATED.map(String::from));
        py.extend(["-c".to_string(), preflight::IMPORT_CHECK.to_string()]);
        let argv = run_as::argv(req.user.as_deref(), &self.tools.runuser, py);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        match self.at(req.location, &argv) {
            Ok(o) => preflight::interpreter_facts(&req.python, o.ok(), &o.stdout, &o.stderr),
            Err(e) => failed(format!("{} cannot run: {e}", req.python)),
        }
    }

    /// `Ok` when no one but root and the unit's user can change what `python` runs (see
    /// [`run_as::tree_problem`]), read where it runs; `Err` says which path and why, or that the
    /// user does not exist there.
    pub(super) fn interpreter_is_trusted(
        &self,
        loc: Location,
        python: &str,
        user: Option<&str>,
    ) -> Result<(), String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let mut trusted = vec![unsafe { libc::geteuid() }];
        match user {
            None | Some("root") | Some("0") => {}
            Some(u) if u.bytes().all(|b| b.is_ascii_digit()) => {
                trusted.extend(u.parse::<u32>().ok())
            }
            Some(u) => trusted.push(self.uid_of(loc, u).ok_or_else(|| {
                format!(
                    "the unit's user {u:?} does not exist on {loc}; the unit could not start as it"
                )
            })?),
        }
        let venv = std::path::Path::new(python)
            .parent()
            .and_then(|b| b.parent())
            .map(|v| v.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stats = match loc {
            Location::Host => self.host_tree_stats(python, &venv),
            Location::Container(vmid) => self.container_tree_stats(vmid, python, &venv)?,
        };
        match run_as::tree_problem(python, &stats, &trusted) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    /// Owner and mode of the interpreter, its venv and site-packages on the host.
    fn host_tree_stats(&self, python: &str, venv: &str) -> Vec<run_as::Stat> {
        let files = HostFiles(&self.root);
        let real = files.resolve(python).ok();
        let site: Vec<String> = self
            .root
            .list(&format!("{venv}/lib"))
            .iter()
            .map(|d| format!("{venv}/lib/{d}/site-packages"))
            .filter(|p| self.root.path(p).is_dir())
            .collect();
        run_as::paths_to_check(python, real.as_deref(), &site)
            .into_iter()
            .filter_map(|p| {
                use std::os::unix::fs::MetadataExt;
                let md = std::fs::metadata(self.root.path(&p)).ok()?;
                Some(run_as::Stat {
                    uid: md.uid(),
                    mode: md.mode() & 0o7777,
                    path: p,
                })
            })
            .collect()
    }

    /// Owner and mode of the interpreter, its venv and site-packages in container `vmid`.
    fn container_tree_stats(
        &self,
        vmid: u32,
        python: &str,
        venv: &str,
    ) -> Result<Vec<run_as::Stat>, String> {
        let c = ContainerFiles { host: self, vmid };
        let real = c.resolve(python).ok();
        let site: Vec<String> = c
            .run(&[
                "find",
                &format!("{venv}/lib"),
                "-mindepth",
                "2",
                "-maxdepth",
                "2",
                "-type",
                "d",
                "-name",
                "site-packages",
            ])
            .map(|o| o.lines().take(8).map(str::to_string).collect())
            .unwrap_or_default();
        let paths = run_as::paths_to_check(python, real.as_deref(), &site);
        let mut argv = vec!["stat", "-L", "-c", "%u %a %n", "--"];
        argv.extend(paths.iter().map(String::as_str));
        // Missing paths make stat fail; the ones it could read are still printed.
        match self.at(Location::Container(vmid), &argv) {
            Ok(o) => Ok(run_as::parse_stat(&o.stdout)),
            Err(e) => Err(format!("{python}: cannot check who owns it: {e}")),
        }
    }

    /// The UID of `user` where `loc` is: the host's `/etc/passwd`, or `id -u` in the container.
    fn uid_of(&self, loc: Location, user: &str) -> Option<u32> {
        match loc {
            Location::Host => self.root.read("/etc/passwd")?.lines().find_map(|l| {
                let mut f = l.split(':');
                (f.next()? == user).then_some(())?;
                f.nth(1)?.parse().ok()
            }),
            Location::Container(_) => {
                let o = self.at(loc, &["id", "-u", "--", user]).ok()?;
                o.ok().then(|| o.stdout.trim().parse().ok()).flatten()
            }
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
