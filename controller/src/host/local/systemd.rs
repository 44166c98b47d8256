//! systemd units on the host or inside an LXC container, through `systemctl`.
//!
//! The `systemctl` command line is used rather than systemd's D-Bus API because the same calls
//! work unchanged inside a container through `pct exec <vmid> -- systemctl ...` (the container
//! has its own systemd and bus), and because their output is what an operator would check by
//! hand. Unit files are replaced atomically (temp file + rename).

use super::error::LocalError;
use super::LocalHost;
use crate::host::model::{Location, Unit, UnitRef};

const UNIT_DIR: &str = "/etc/systemd/system";
const STATE_DIR: &str = "/var/lib/gpuplane/units";
/// Mode of the unit files the agent writes: not world-readable.
const UNIT_MODE: u32 = 0o640;
/// Longest journal line kept from a server's log (bytes); the rest is cut on a character boundary.
pub const LOG_LINE_MAX: usize = 512;

impl LocalHost {
    /// Runs a command at a location: directly on the host, or through `pct exec`.
    pub(super) fn at(
        &self,
        loc: Location,
        argv: &[&str],
    ) -> Result<super::exec::CmdOutput, LocalError> {
        match loc {
            Location::Host => self.cmd(argv),
            Location::Container(v) => {
                let vmid = v.to_string();
                let mut a: Vec<&str> = vec![&self.tools.pct, "exec", &vmid, "--"];
                a.extend_from_slice(argv);
                self.cmd(&a)
            }
        }
    }

    /// Runs a command at a location like [`LocalHost::at`]; a failure is an error named `what`.
    fn at_ok(
        &self,
        loc: Location,
        argv: &[&str],
        what: String,
    ) -> Result<super::exec::CmdOutput, LocalError> {
        let o = self.at(loc, argv)?;
        if !o.ok() {
            return Err(LocalError::failed(what, &o.stderr));
        }
        Ok(o)
    }

    fn systemctl(&self, loc: Location, args: &[&str]) -> Result<String, LocalError> {
        let mut a = vec![self.tools.systemctl.as_str()];
        a.extend_from_slice(args);
        let o = self.at_ok(loc, &a, format!("systemctl {}", args.join(" ")))?;
        Ok(o.stdout)
    }

    /// Observes one unit. A unit in a stopped container reads as inactive with no file.
    pub(super) fn observe_unit(&self, r: &UnitRef) -> Unit {
        let mut u = Unit {
            active_state: "inactive".into(),
            sub_state: "dead".into(),
            ..Unit::default()
        };
        let path = format!("{UNIT_DIR}/{}", r.name);
        u.file = self.read_at(r.location, &path);
        let props = self.systemctl(
            r.location,
            &[
                "show",
                "--timestamp=unix",
                "-p",
                "ActiveState,SubState,NeedDaemonReload,ExecMainStatus,ExecMainStartTimestamp,Result",
                "--",
                &r.name,
            ],
        );
        let Ok(props) = props else { return u };
        let get = |k: &str| {
            props
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or("")
                .to_string()
        };
        u.active_state = get("ActiveState");
        u.sub_state = get("SubState");
        u.needs_reload = get("NeedDaemonReload") == "yes";
        if u.active_state == "failed" {
            u.exit_status = get("ExecMainStatus").parse().ok();
        }
        let started: Option<i64> = get("ExecMainStartTimestamp")
            .trim_start_matches('@')
            .parse()
            .ok();
        let mtime = self.mtime_at(r.location, &path);
        u.running_stale = matches!((started, mtime), (Some(s), Some(m)) if s > 0 && s < m);
        u.last_ready = self.read_state(r, "ready");
        u.failed_hash = self.read_state(r, "failed").map(|h| h.trim().to_string());
        (u.log_tail, u.log_times) = self.journal_tail(r);
        u.started_at = started.filter(|s| *s > 0).map(|s| s as u64);
        u
    }

    /// The modification time of `path` where `loc` is (seconds since the epoch).
    fn mtime_at(&self, loc: Location, path: &str) -> Option<i64> {
        match loc {
            Location::Host => std::fs::metadata(self.root.path(path))
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs() as i64),
            Location::Container(_) => self
                .at(loc, &["stat", "-c", "%Y", "--", path])
                .ok()
                .and_then(|o| o.stdout.trim().parse().ok()),
        }
    }

    /// The unit's last 30 journal lines (its processes' own), each with its time.
    fn journal_tail(&self, r: &UnitRef) -> (Vec<String>, Vec<Option<u64>>) {
        let Ok(o) = self.at(
            r.location,
            &[
                &self.tools.journalctl,
                // The unit's processes only: `--unit=` adds systemd's own lines about the unit
                // ("Main process exited", "Consumed 4 s CPU time"), which pushed the server's
                // last words out of the Crashed message (found by e2e/tests/vm_host/faults.rs). A
                // match, not an option: it never starts with '-'.
                &format!("_SYSTEMD_UNIT={}", r.name),
                "-n",
                "30",
                // Each line with its time (the stall clock starts at the line that began the
                // phase, not when the agent happened to look); MESSAGE alone besides the
                // journal's own fields.
                "-o",
                "json",
                "--output-fields=MESSAGE",
                "--no-pager",
            ],
        ) else {
            return Default::default();
        };
        // The server's own output: one line each, capped, at most 30 lines.
        let lines: Vec<&str> = o.stdout.lines().collect();
        lines[lines.len().saturating_sub(30)..]
            .iter()
            .map(|l| journal_line(l))
            .map(|(m, t)| (crate::text::sanitize(&m, LOG_LINE_MAX), t))
            .unzip()
    }

    /// The agent's records about a unit (`ready`: last unit that reached Ready; `failed`: hash of a
    /// unit that failed), in `/var/lib/gpuplane/units/` where the unit lives.
    pub(super) fn read_state(&self, r: &UnitRef, kind: &str) -> Option<String> {
        self.read_at(r.location, &format!("{STATE_DIR}/{}.{kind}", r.name))
    }

    /// A file's content at a location (`cat` inside a container); `None` when it cannot be read.
    fn read_at(&self, loc: Location, path: &str) -> Option<String> {
        match loc {
            Location::Host => self.root.read(path),
            Location::Container(_) => self
                .at(loc, &["cat", "--", path])
                .ok()
                .filter(|o| o.ok())
                .map(|o| o.stdout),
        }
    }

    pub(super) fn write_state(
        &self,
        r: &UnitRef,
        kind: &str,
        content: &str,
    ) -> Result<Vec<super::files::Leftover>, LocalError> {
        let path = format!("{STATE_DIR}/{}.{kind}", r.name);
        match r.location {
            Location::Host => {
                let p = self.root.path(&path);
                if let Some(d) = p.parent() {
                    std::fs::create_dir_all(d)
                        .map_err(|e| LocalError::io("cannot create", d, e))?;
                }
                super::files::write_atomic(&p, content)
            }
            Location::Container(v) => {
                self.at_ok(
                    r.location,
                    &["mkdir", "-p", STATE_DIR],
                    format!("mkdir in container {v}"),
                )?;
                self.push_atomic(v, content, &path, None)?;
                Ok(vec![])
            }
        }
    }

    /// Puts `content` at `path` inside container `vmid` so that a kill at any instant leaves
    /// the old file or the new one: `pct push` to `<path>.gpuplane-new` (a kill mid-push leaves
    /// only that name, which the next write pushes over), then `mv -f` inside the container (a
    /// rename). The host side is a private staging file, removed when done.
    fn push_atomic(
        &self,
        vmid: u32,
        content: &str,
        path: &str,
        perms: Option<&str>,
    ) -> Result<(), LocalError> {
        let tmp = super::staging::Staging::open(&self.state_dir)?.file(content.as_bytes())?;
        let staged = format!("{path}.gpuplane-new");
        let id = vmid.to_string();
        let tmp_s = tmp.to_string_lossy().into_owned();
        let mut argv = vec![self.tools.pct.as_str(), "push", &id, &tmp_s, &staged];
        if let Some(p) = perms {
            argv.extend(["--perms", p]);
        }
        let pushed = self.cmd(&argv);
        drop(tmp);
        let o = pushed?;
        if !o.ok() || !o.stderr.trim().is_empty() {
            return Err(LocalError::failed("pct push", &o.stderr));
        }
        self.at_ok(
            Location::Container(vmid),
            &["mv", "-f", "--", &staged, path],
            format!("mv in container {vmid}"),
        )
        .map(|_| ())
    }

    pub(super) fn write_unit(
        &self,
        r: &UnitRef,
        content: &str,
    ) -> Result<Vec<super::files::Leftover>, LocalError> {
        let path = format!("{UNIT_DIR}/{}", r.name);
        // 0640: the unit carries the admin's environment; systemd reads it as root. (systemd
        // still shows Environment= to any local user through `systemctl show`: a secret belongs
        // in a file only the server's user can read, named by the admin.)
        match r.location {
            Location::Host => {
                super::files::write_atomic_mode(&self.root.path(&path), content, Some(UNIT_MODE))
            }
            Location::Container(v) => {
                self.push_atomic(v, content, &path, Some("0640"))?;
                Ok(vec![])
            }
        }
    }

    /// Refuses to change unit `r` when its file exists and was not written by gpuplane (no
    /// [`HEADER`](crate::systemd::unit::HEADER)) and the agent has no record of it: the planner
    /// never asks for that; this holds even if a caller does.
    fn ours_or_absent(&self, r: &UnitRef) -> Result<(), LocalError> {
        let path = format!("{UNIT_DIR}/{}", r.name);
        match self.read_at(r.location, &path) {
            Some(text) if !crate::systemd::unit::is_managed(&text) => Err(LocalError::failed(
                format!("removing {r}"),
                "the unit file was not written by gpuplane (no managed header); it is left as it is",
            )),
            _ => Ok(()),
        }
    }

    /// Removes the unit file and the agent's records of it, then reloads systemd; never a unit
    /// file the agent did not write.
    /// Removes a unit the agent wrote: stopped first (a no-op when it is not running), then its
    /// file and the agent's state about it, then a daemon-reload.
    pub(super) fn remove_unit(&self, r: &UnitRef) -> Result<(), LocalError> {
        self.ours_or_absent(r)?;
        if self
            .read_at(r.location, &format!("{UNIT_DIR}/{}", r.name))
            .is_some()
        {
            self.unit_action(r, "stop")?;
        }
        let paths = [
            format!("{UNIT_DIR}/{}", r.name),
            format!("{STATE_DIR}/{}.ready", r.name),
            format!("{STATE_DIR}/{}.failed", r.name),
        ];
        for p in &paths {
            match r.location {
                Location::Host => match std::fs::remove_file(self.root.path(p)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(LocalError::io("cannot remove", p, e))
                    }
                    _ => {}
                },
                Location::Container(v) => {
                    self.at_ok(
                        r.location,
                        &["rm", "-f", "--", p],
                        format!("rm {p} in container {v}"),
                    )?;
                }
            }
        }
        self.daemon_reload(r.location)
    }

    pub(super) fn unit_action(&self, r: &UnitRef, action: &str) -> Result<(), LocalError> {
        self.systemctl(r.location, &[action, "--", &r.name])
            .map(|_| ())
    }

    pub(super) fn daemon_reload(&self, loc: Location) -> Result<(), LocalError> {
        self.systemctl(loc, &["daemon-reload"]).map(|_| ())
    }
}

/// One line of `journalctl -o json`: its message and its time (seconds since the epoch,
/// rounded up). A
/// line that is not such an object (another journalctl, a test's stand-in) is the message
/// itself, without a time. A MESSAGE that is not UTF-8 comes as an array of bytes.
pub(super) fn journal_line(line: &str) -> (String, Option<u64>) {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(line) else {
        return (line.to_string(), None);
    };
    let msg = match m.get("MESSAGE") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(b)) => String::from_utf8_lossy(
            &b.iter()
                .filter_map(|x| x.as_u64().and_then(|x| u8::try_from(x).ok()))
                .collect::<Vec<u8>>(),
        )
        .into_owned(),
        _ => String::new(),
    };
    let at = m
        .get("__REALTIME_TIMESTAMP")
        .and_then(|t| t.as_str())
        .and_then(|t| t.parse::<u64>().ok())
        // Rounded up: a stall counted from this second is never reported early.
        .map(|us| us.div_ceil(1_000_000));
    (msg, at)
}
