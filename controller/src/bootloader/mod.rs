//! The kernel command line where the bootloader reads it, as Proxmox documents it ("Editing the
//! Kernel Commandline"): `/etc/kernel/cmdline` on hosts whose boot is managed by
//! `proxmox-boot-tool` (systemd-boot, and GRUB on ZFS/UEFI set-ups), refreshed with
//! `proxmox-boot-tool refresh`; otherwise `GRUB_CMDLINE_LINUX_DEFAULT` in `/etc/default/grub`,
//! refreshed with `update-grub`. Pure: texts in, texts out.
//!
//! # Guarantees
//! - An edit changes only the words it was asked to add or remove; every other byte of the file
//!   is kept (other lines, comments, spacing, line endings, the quoting of the value where the
//!   value allows it).
//! - Input is bounded ([`MAX_FILE_BYTES`]) and never panics; what cannot be parsed with
//!   certainty (a shell expansion in the GRUB value, an unterminated quote) is refused with a
//!   message, never guessed at.
//! - Arguments are words without whitespace, quotes or shell metacharacters ([`check_word`]), so
//!   writing one into a double-quoted shell value or the kernel's command line needs no escaping;
//!   which arguments the agent may write at all is an allow-list ([`check_arg`], `policy.rs`).
//! - Words the agent adds go before a lone `--` when the line has one (the words after it are
//!   init's, not the kernel's); words after it are neither read as the kernel's nor removed.

pub mod cmdline;
pub mod grub;
pub mod policy;

use serde::{Deserialize, Serialize};

/// The largest bootloader config file read or edited.
pub const MAX_FILE_BYTES: usize = 64 * 1024;

pub use policy::Side;

/// Which bootloader reads the kernel command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Bootloader {
    /// `/etc/kernel/cmdline`, refreshed with `proxmox-boot-tool refresh`.
    ProxmoxBootTool,
    /// `GRUB_CMDLINE_LINUX_DEFAULT` in `/etc/default/grub`, refreshed with `update-grub`.
    Grub,
}

impl Bootloader {
    /// The order Proxmox's documentation gives: `/etc/kernel/cmdline` first.
    pub const ALL: [Bootloader; 2] = [Bootloader::ProxmoxBootTool, Bootloader::Grub];

    /// The file that holds the command line.
    pub fn config_path(self) -> &'static str {
        match self {
            Bootloader::ProxmoxBootTool => "/etc/kernel/cmdline",
            Bootloader::Grub => "/etc/default/grub",
        }
    }

    /// The command that makes the bootloader read the file again (argv).
    pub fn refresh_command(self) -> &'static [&'static str] {
        match self {
            Bootloader::ProxmoxBootTool => &["proxmox-boot-tool", "refresh"],
            Bootloader::Grub => &["update-grub"],
        }
    }

    /// The kernel arguments the file gives the kernel, in order: its words before a lone `--`
    /// (those after it go to init).
    pub fn args(self, text: &str) -> Result<Vec<String>, String> {
        Ok(kernel_part(self.words(text)?))
    }

    /// Every word of the command line the file gives the boot, init's after a `--` included.
    pub fn words(self, text: &str) -> Result<Vec<String>, String> {
        bounded(text)?;
        match self {
            Bootloader::ProxmoxBootTool => Ok(cmdline::words(text)?
                .into_iter()
                .map(|(s, e)| text[s..e].to_string())
                .collect()),
            Bootloader::Grub => grub::words(text),
        }
    }

    /// `text` with every word of `present` it lacks added and every word of `absent` removed;
    /// every other byte kept.
    pub fn edit(self, text: &str, present: &[String], absent: &[String]) -> Result<String, String> {
        bounded(text)?;
        for a in present.iter().chain(absent) {
            check_word(a)?;
        }
        match self {
            Bootloader::ProxmoxBootTool => {
                if cmdline::words(text)?.is_empty() {
                    return Err("/etc/kernel/cmdline holds no kernel arguments (not even root=): a host does not boot from it; fix it by hand first".into());
                }
                cmdline::edit(text, present, absent)
            }
            Bootloader::Grub => grub::edit(text, present, absent),
        }
    }
}

impl std::fmt::Display for Bootloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bootloader::ProxmoxBootTool => "proxmox-boot-tool",
            Bootloader::Grub => "GRUB",
        })
    }
}

/// A config file's text is at most [`MAX_FILE_BYTES`].
pub fn bounded(text: &str) -> Result<(), String> {
    if text.len() > MAX_FILE_BYTES {
        return Err(format!(
            "the file is larger than {MAX_FILE_BYTES} bytes; not a bootloader config the agent edits"
        ));
    }
    Ok(())
}

/// Whether `a` is a kernel argument the agent may write, listed on `side` of
/// `spec.host.kernelArgs`, with the admin's opt-in `allow_keys`: one word ([`check_word`]) whose
/// key is among the keys the agent manages with a value it writes, or a key the admin listed
/// (`policy.rs`: the allow-list, and the keys no opt-in opens).
pub fn check_arg(a: &str, side: Side, allow_keys: &[String]) -> Result<(), String> {
    check_word(a)?;
    policy::check(a, side, allow_keys)
}

/// Whether `a` is one word the agent can write without quoting and whose key no opt-in opens:
/// 1 to 256 characters of letters, digits and `_ . , : = / + @ % -`, not starting with `-` (so
/// no whitespace, quotes, `$`, backslashes or other shell metacharacters, and never `--`, which
/// ends the kernel's arguments), and not one [`policy::never`] refuses (what the host boots, a
/// shell, systemd's options, init's environment). The editors check every word with it.
pub fn check_word(a: &str) -> Result<(), String> {
    let shown = crate::text::sanitize(a, 80);
    if a.is_empty() {
        return Err(
            "an empty kernel argument; write one word such as vfio-pci.disable_idle_d3=1".into(),
        );
    }
    if a.len() > gpuplane_crds::KERNEL_ARG_MAX_LEN {
        return Err(format!(
            "kernel argument {shown:?} ({} characters) is longer than {} characters",
            a.chars().count(),
            gpuplane_crds::KERNEL_ARG_MAX_LEN
        ));
    }
    if let Some(c) = a.chars().find(|c| !allowed(*c)) {
        let what = if c.is_whitespace() {
            "whitespace".to_string()
        } else {
            format!("{c:?}")
        };
        return Err(format!(
            "kernel argument {shown:?} contains {what}: one argument is one word of letters, digits and _ . , : = / + @ % - (no whitespace, quotes or shell characters), e.g. vfio-pci.disable_idle_d3=1; list each word on its own"
        ));
    }
    if a.starts_with('-') {
        return Err(format!(
            "kernel argument {shown:?} starts with '-': arguments after \"--\" go to init, not the kernel; write the word without it, e.g. iommu=pt"
        ));
    }
    let (key, _) = policy::split(a);
    if let Some(why) = policy::never(key) {
        return Err(format!(
            "kernel argument {shown:?}: {why}; the agent never writes or removes it, not even with spec.host.kernelArgs.allowKeys"
        ));
    }
    Ok(())
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_.,:=/+@%-".contains(c)
}

/// The kernel's words of a command line's `words`: those before the first lone `--`.
pub fn kernel_part(mut words: Vec<String>) -> Vec<String> {
    if let Some(i) = words.iter().position(|w| cmdline::is_separator(w)) {
        words.truncate(i);
    }
    words
}

/// The kernel's own arguments in `/proc/cmdline` (bounded: the first [`MAX_FILE_BYTES`]):
/// whitespace-separated words, double quotes keeping spaces inside one word, everything after
/// a lone `--` left out (those go to init).
pub fn running_args(proc_cmdline: &str) -> Vec<String> {
    let mut t = crate::text::truncate(proc_cmdline, MAX_FILE_BYTES);
    let spans = match cmdline::words(&t) {
        Ok(s) => s,
        Err(_) => {
            // An unterminated quote runs to the end, as the kernel reads it.
            t.push('"');
            cmdline::words(&t).unwrap_or_default()
        }
    };
    kernel_part(
        spans
            .into_iter()
            .map(|(s, e)| t.get(s..e).unwrap_or_default().to_string())
            .collect(),
    )
}

/// What `have` lacks of `present` and holds of `absent`: (missing, unwanted), each in the
/// spec's order.
pub fn difference(
    have: &[String],
    present: &[String],
    absent: &[String],
) -> (Vec<String>, Vec<String>) {
    let missing = present
        .iter()
        .filter(|p| !have.contains(p))
        .cloned()
        .collect();
    let unwanted = absent
        .iter()
        .filter(|a| have.contains(a))
        .cloned()
        .collect();
    (missing, unwanted)
}

#[cfg(test)]
mod tests;
