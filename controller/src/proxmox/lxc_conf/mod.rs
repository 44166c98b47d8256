//! Byte-preserving editor for Proxmox container configs (`/etc/pve/lxc/<vmid>.conf`).
//!
//! Why: the agent must add/remove NVIDIA device passthrough lines in a file that humans and
//! PVE also edit. We therefore keep every original line with its exact bytes (including its
//! line ending) and only insert/remove the lines the agent owns.
//!
//! Line classification follows `PVE::LXC::Config::parse_pct_config` (pve-container,
//! `src/PVE/LXC/Config.pm`) exactly (rule order, Perl `\s` semantics, and `\r` handling: PVE
//! splits the file on `\n` only, so a CRLF line keeps its `\r`), so that what we consider
//! "a GPU line" is what PVE would see too.
//!
//! Owned lines (main section only, i.e. before the first `[...]` header):
//! - `lxc.mount.entry` (`:` or `=` separator) whose source is `/dev/nvidia<N>`,
//!   `/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools` or `/dev/nvidia-caps`;
//! - `lxc.cgroup2.devices.allow: c 195:<N or *> rwm` and `c <uvm_major>:<N or *> rwm`
//!   (exactly those three tokens, any whitespace). The agent writes one `c 195:N rwm` per GPU
//!   of the container plus `c 195:255 rwm` (nvidiactl), and `c <uvm_major>:* rwm`: a broad
//!   `c 195:* rwm` (the common recipe) would let the container open every GPU of the host
//!   through a node it makes itself (LXC's common.conf allows mknod of any device), so it is
//!   replaced; the qemu test (`e2e/tests/vm_lxc.rs`) shows the refusal from inside;
//! - `devN:` lines whose path (bare first value or `path=`) is one of those device nodes.
//!
//! Everything else (cgroup v1 `lxc.cgroup.devices.allow`, other `devN`, all lines of
//! `[pve:pending]` and snapshot sections, comments, unparseable lines) is foreign and kept.
//!
//! Caveats:
//! - `/dev/nvidia<N>` is recognised only with a canonical decimal `N` (no leading zeros);
//!   `devN` only with a canonical index 0..=255. Other spellings are foreign.
//! - Duplicate `devN` keys: PVE keeps only the last one; we classify each line on its own.
//! - The module does no I/O; the caller writes the result (ideally with the digest check).
//!
//! Layout: this file holds the public types; `editor.rs` the edits ([`LxcConfig`]'s methods),
//! `classify.rs` which lines are the agent's, `pve_line.rs` PVE's own line grammar that both
//! build on, `pve_rewrite.rs` (tests only) a model of PVE rewriting the file, and `tests.rs`
//! the tests.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

mod classify;
mod editor;
mod pve_line;
#[cfg(test)]
mod pve_rewrite;
#[cfg(test)]
mod tests;

/// Character device major of `/dev/nvidia<N>` and `/dev/nvidiactl` (fixed by the driver).
pub const NVIDIA_MAJOR: u32 = 195;
/// Minor of `/dev/nvidiactl` (major [`NVIDIA_MAJOR`]).
pub const NVIDIACTL_MINOR: u32 = 255;

/// Highest `devN` index PVE accepts (`$MAX_DEVICES` = 256).
const MAX_DEV_INDEX: u32 = 255;

/// Options written on new `devN` GPU lines when the file has no GPU `devN` line to copy from.
///
/// Why 0666: PVE's default is 0660 owned by container root, which makes the nodes unusable for
/// non-root CUDA processes in the container; the NVIDIA driver itself creates its host nodes
/// with 0666, and this matches the documented `pct set --dev0 /dev/nvidia0,mode=0666` usage.
pub const DEFAULT_DEVN_OPTIONS: &str = "mode=0666";

/// NVIDIA control device nodes that accompany the per-GPU `/dev/nvidia<N>` nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControlDevice {
    /// `/dev/nvidiactl`
    Ctl,
    /// `/dev/nvidia-uvm`
    Uvm,
    /// `/dev/nvidia-uvm-tools`
    UvmTools,
    /// `/dev/nvidia-caps` (a directory; only usable with [`MountStyle::MountEntry`])
    Caps,
}

impl ControlDevice {
    /// All control devices, in canonical order.
    pub const ALL: [ControlDevice; 4] = [
        ControlDevice::Ctl,
        ControlDevice::Uvm,
        ControlDevice::UvmTools,
        ControlDevice::Caps,
    ];

    /// Host path of the node.
    pub fn path(self) -> &'static str {
        match self {
            ControlDevice::Ctl => "/dev/nvidiactl",
            ControlDevice::Uvm => "/dev/nvidia-uvm",
            ControlDevice::UvmTools => "/dev/nvidia-uvm-tools",
            ControlDevice::Caps => "/dev/nvidia-caps",
        }
    }
}

/// How GPU device nodes are given to the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MountStyle {
    /// `devN: /dev/nvidia0,...` (PVE >= 8.1 device passthrough; PVE creates the node and the
    /// exact-minor cgroup rule itself, so no `lxc.cgroup2.devices.allow` lines are needed).
    DevN,
    /// `lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file` plus
    /// `lxc.cgroup2.devices.allow: c 195:0 rwm` per GPU (legacy raw LXC method).
    MountEntry,
}

/// The GPU-related state of the main section of a container config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuMounts {
    /// `/dev/nvidiaN` nodes mounted/passed in the main section.
    pub minors: BTreeSet<u32>,
    /// Control devices mounted/passed in the main section.
    pub control: BTreeSet<ControlDevice>,
    /// Style of the existing GPU device lines (`None` when there are none). A file that mixes
    /// both styles reports `MountEntry` (see [`LxcConfig::gpu_mounts`]).
    pub style: Option<MountStyle>,
    /// Majors of `lxc.cgroup2.devices.allow: c M:* rwm` and `c M:N rwm` lines in the main
    /// section (any major).
    pub cgroup_allow_majors: BTreeSet<u32>,
    /// Majors of those lines that allow every minor (`c M:* rwm`): for the NVIDIA major, every
    /// GPU of the host, not only the container's.
    #[serde(default)]
    pub cgroup_allow_any_minor: BTreeSet<u32>,
}

/// What the agent wants the container to have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredGpuMounts {
    /// `/dev/nvidiaN` minors to pass; empty means "no GPU at all" (all owned lines removed).
    pub minors: BTreeSet<u32>,
    /// Major of `/dev/nvidia-uvm` on this host (varies per host; read it from the host).
    pub uvm_major: u32,
    /// Style for new lines, used only when the file has no GPU device line yet.
    pub default_style: MountStyle,
}

/// A parsed container config that remembers every original line byte-for-byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LxcConfig {
    /// Original lines, each including its terminator (`\n` / `\r\n`); only the last line may
    /// lack one. Concatenation gives back the file.
    lines: Vec<String>,
}
