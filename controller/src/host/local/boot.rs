//! The kernel command line on a real host: `/proc/cmdline` and the boot id read, the
//! bootloader's config found as Proxmox documents it (`/etc/kernel/cmdline` first, then
//! `/etc/default/grub`), and the two writes: the config edited (`Step::SetKernelArgs`) and the
//! bootloader refreshed (`Step::RefreshBootloader`).
//!
//! # Crash safety
//! The agent's record (`/var/lib/gpuplane/kernel-args.json`) is written *before* the config is
//! renamed into place, naming the SHA-256 of the new content (`written`), and completed *after*
//! the refresh command succeeded (`refreshed`, the boot id). A kill after the rename and before
//! the refresh leaves the file's hash equal to `written` and not to `refreshed`: the next plan
//! runs the refresh (`plan/kernel_args.rs`). A person's later edit of the file (another hash)
//! is never refreshed by the agent. Both files are written temp + rename, fsynced.
//!
//! # Guarantees
//! - Only the words the step names change in the config; every other byte is kept
//!   (`bootloader/`).
//! - Every read is bounded ([`crate::bootloader::MAX_FILE_BYTES`]); the refresh command runs
//!   under the command deadline, with fixed arguments (no spec text reaches it).

use super::error::LocalError;
use super::{LocalHost, Root};
use crate::bootloader::{self, Bootloader};
use crate::host::model::{BootConfig, BootFacts, KernelArgsRecord};
use std::io::Read;
use std::path::Path;

/// The record's file name under the agent's state directory.
pub const RECORD: &str = "kernel-args.json";

/// Reads at most [`bootloader::MAX_FILE_BYTES`] + 1 bytes of `path`; `None` when missing.
fn read_bounded(path: &Path) -> Option<Result<String, String>> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(Err(format!("cannot read {}: {e}", path.display()))),
    };
    let mut buf = Vec::new();
    if let Err(e) = f
        .take(bootloader::MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut buf)
    {
        return Some(Err(format!("cannot read {}: {e}", path.display())));
    }
    if buf.len() > bootloader::MAX_FILE_BYTES {
        return Some(Err(format!(
            "{} is larger than {} bytes; not read",
            path.display(),
            bootloader::MAX_FILE_BYTES
        )));
    }
    Some(String::from_utf8(buf).map_err(|_| format!("{} is not UTF-8 text", path.display())))
}

/// The bootloader whose config exists, in Proxmox's order.
fn find(root: &Root) -> Option<Bootloader> {
    Bootloader::ALL
        .into_iter()
        .find(|b| root.path(b.config_path()).is_file())
}

/// GRUB's drop-ins (`/etc/default/grub.d/*.cfg`, by name as the shell's glob sorts them in the
/// C locale), each read bounded; more than [`bootloader::grub::MAX_DROP_INS`] is a problem.
fn grub_drop_ins(root: &Root) -> Result<Vec<(String, String)>, String> {
    let dir = bootloader::grub::DROP_IN_DIR;
    let mut names: Vec<String> = root
        .list(dir)
        .into_iter()
        .filter(|n| n.ends_with(".cfg"))
        .collect();
    names.sort();
    if names.len() > bootloader::grub::MAX_DROP_INS {
        return Err(format!(
            "{dir} holds {} drop-ins, more than the {} the agent reads",
            names.len(),
            bootloader::grub::MAX_DROP_INS
        ));
    }
    names
        .into_iter()
        .map(|n| {
            let path = format!("{dir}/{n}");
            let text = read_bounded(&root.path(&path))
                .unwrap_or_else(|| Err(format!("{path} vanished while it was read")))?;
            Ok((path, text))
        })
        .collect()
}

/// Everything about the kernel command line this host shows.
pub fn observe(root: &Root, state_dir: &Path) -> BootFacts {
    let running = root
        .read("/proc/cmdline")
        .map(|t| bootloader::running_args(&t));
    let boot_id = root
        .read("/proc/sys/kernel/random/boot_id")
        .map(|t| crate::text::sanitize(t.trim(), 64))
        .filter(|t| !t.is_empty());
    let config = find(root).map(|b| {
        let path = b.config_path().to_string();
        let read = read_bounded(&root.path(&path))
            .unwrap_or_else(|| Err(format!("{path} vanished while it was read")));
        match read {
            Ok(text) => {
                let read = match b {
                    Bootloader::Grub => grub_drop_ins(root).and_then(|d| {
                        bootloader::bounded(&text)?;
                        bootloader::grub::args_with_drop_ins(&text, &d)
                    }),
                    _ => b.args(&text).map(|a| (a, vec![])),
                };
                let (args, drop_ins, problem) = match read {
                    Ok((a, d)) => (a, d, None),
                    Err(e) => (vec![], vec![], Some(crate::text::sanitize(&e, 300))),
                };
                BootConfig {
                    bootloader: b,
                    path,
                    args,
                    drop_ins,
                    sha256: crate::digest::sha256(&text),
                    problem,
                }
            }
            Err(e) => BootConfig {
                bootloader: b,
                path,
                args: vec![],
                drop_ins: vec![],
                sha256: String::new(),
                problem: Some(crate::text::sanitize(&e, 300)),
            },
        }
    });
    BootFacts {
        running,
        boot_id,
        config,
        record: load_record(state_dir),
    }
}

/// The agent's record; `None` when missing or not a record (then nothing is taken as written).
fn load_record(state_dir: &Path) -> Option<KernelArgsRecord> {
    let text = read_bounded(&state_dir.join(RECORD))?.ok()?;
    serde_json::from_str(&text).ok()
}

fn store_record(
    state_dir: &Path,
    r: &KernelArgsRecord,
) -> Result<Vec<super::files::Leftover>, LocalError> {
    std::fs::create_dir_all(state_dir)
        .map_err(|e| LocalError::io("cannot create", state_dir, e))?;
    let text = serde_json::to_string_pretty(r).unwrap_or_default() + "\n";
    super::files::write_atomic_mode(&state_dir.join(RECORD), &text, Some(0o600))
}

impl LocalHost {
    /// `Step::SetKernelArgs`: the record first (what is about to be written), then the config.
    pub(super) fn set_kernel_args(
        &self,
        b: Bootloader,
        present: &[String],
        absent: &[String],
    ) -> Result<Vec<super::files::Leftover>, LocalError> {
        let path = self.root.path(b.config_path());
        let text = read_config(&path)?;
        let new = b
            .edit(&text, present, absent)
            .map_err(|e| LocalError::Edit(format!("{}: {e}", path.display())))?;
        let old = load_record(&self.state_dir);
        let record = KernelArgsRecord {
            path: b.config_path().into(),
            written: crate::digest::sha256(&new),
            // Still true of the old content, and harmless for the new one (another hash).
            refreshed: old.as_ref().and_then(|r| r.refreshed.clone()),
            boot_id: old.as_ref().and_then(|r| r.boot_id.clone()),
            reboot_from: old.and_then(|r| r.reboot_from),
        };
        let mut left = store_record(&self.state_dir, &record)?;
        if new != text {
            left.extend(super::files::write_atomic(&path, &new)?);
        }
        Ok(left)
    }

    /// `Step::RefreshBootloader`: the refresh command, then the record completed with the hash
    /// of the config it read and this boot's id.
    pub(super) fn refresh_bootloader(
        &self,
        b: Bootloader,
    ) -> Result<Vec<super::files::Leftover>, LocalError> {
        let path = self.root.path(b.config_path());
        let text = read_config(&path)?;
        let hash = crate::digest::sha256(&text);
        let program = match b {
            Bootloader::ProxmoxBootTool => &self.tools.proxmox_boot_tool,
            Bootloader::Grub => &self.tools.update_grub,
        };
        let mut argv: Vec<&str> = vec![program];
        argv.extend(&b.refresh_command()[1..]);
        let o = self.cmd(&argv)?;
        if !o.ok() {
            return Err(LocalError::failed(
                argv.join(" "),
                &crate::text::sanitize(&o.stderr, 1000),
            ));
        }
        let old = load_record(&self.state_dir).unwrap_or_default();
        let record = KernelArgsRecord {
            path: b.config_path().into(),
            written: if old.path == b.config_path() {
                old.written
            } else {
                String::new()
            },
            refreshed: Some(hash),
            boot_id: self.boot_id(),
            reboot_from: old.reboot_from,
        };
        store_record(&self.state_dir, &record)
    }

    /// This boot's id, as observing reads it.
    fn boot_id(&self) -> Option<String> {
        self.root
            .read("/proc/sys/kernel/random/boot_id")
            .map(|t| crate::text::sanitize(t.trim(), 64))
    }

    /// `Step::Reboot`: only from the boot the plan was made in; `systemctl reboot`, then the
    /// record says the reboot was asked from this boot (so the agent does not ask twice while
    /// the shutdown runs). A kill between the two leaves no record: the host is shutting down
    /// anyway, and a failed `systemctl reboot` leaves none either, so the next run asks again.
    pub(super) fn reboot(&self, boot_id: &str) -> Result<Vec<super::files::Leftover>, LocalError> {
        let now = self.boot_id();
        if now.as_deref() != Some(boot_id) {
            return Err(LocalError::Edit(format!(
                "the reboot was planned in boot {boot_id}, this is boot {}: not rebooting",
                now.as_deref().unwrap_or("(unknown)")
            )));
        }
        let argv = [self.tools.systemctl.as_str(), "reboot"];
        let o = self.cmd(&argv)?;
        if !o.ok() {
            return Err(LocalError::failed(
                argv.join(" "),
                &crate::text::sanitize(&o.stderr, 1000),
            ));
        }
        let mut record = load_record(&self.state_dir).unwrap_or_default();
        record.reboot_from = Some(boot_id.into());
        store_record(&self.state_dir, &record)
    }
}

/// The bootloader's config at `path`, read bounded; its absence is an error of the edit.
fn read_config(path: &std::path::Path) -> Result<String, LocalError> {
    match read_bounded(path) {
        Some(Ok(t)) => Ok(t),
        Some(Err(e)) => Err(LocalError::Edit(e)),
        None => Err(LocalError::Edit(format!(
            "{} does not exist (any more)",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests;
