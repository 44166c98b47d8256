//! Byte-preserving editor for Proxmox container configs (`/etc/pve/lxc/<vmid>.conf`).
//!
//! Why: the agent must add/remove NVIDIA device passthrough lines in a file that humans and
//! PVE also edit. We therefore keep every original line with its exact bytes (including its
//! line ending) and only insert/remove the lines the agent owns.
//!
//! Line classification follows `PVE::LXC::Config::parse_pct_config` exactly (rule order,
//! `\s` semantics, `\r` handling; see facts/proxmox/lxc-conf.txt section 1), so that what we
//! consider "a GPU line" is what PVE would see too.
//!
//! Owned lines (main section only, i.e. before the first `[...]` header):
//! - `lxc.mount.entry` (`:` or `=` separator) whose source is `/dev/nvidia<N>`,
//!   `/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools` or `/dev/nvidia-caps`;
//! - `lxc.cgroup2.devices.allow: c 195:* rwm` and `c <uvm_major>:* rwm` (exactly those three
//!   tokens, any whitespace);
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

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use super::lines::{content, first_line_ending, is_blank, is_ws, split_lines, terminate};

/// Character device major of `/dev/nvidia<N>` and `/dev/nvidiactl` (fixed by the driver).
pub const NVIDIA_MAJOR: u32 = 195;

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
    /// `lxc.cgroup2.devices.allow: c 195:* rwm` (legacy raw LXC method).
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
    /// Majors of `lxc.cgroup2.devices.allow: c M:* rwm` lines in the main section (any major).
    pub cgroup_allow_majors: BTreeSet<u32>,
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

/// A GPU device node we manage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum GpuDev {
    Minor(u32),
    Control(ControlDevice),
}

impl GpuDev {
    fn from_path(path: &str) -> Option<GpuDev> {
        for c in ControlDevice::ALL {
            if path == c.path() {
                return Some(GpuDev::Control(c));
            }
        }
        let digits = path.strip_prefix("/dev/nvidia")?;
        parse_canonical_u32(digits).map(GpuDev::Minor)
    }

    fn path(self) -> String {
        match self {
            GpuDev::Minor(n) => format!("/dev/nvidia{n}"),
            GpuDev::Control(c) => c.path().to_string(),
        }
    }
}

/// One GPU-related line of the main section.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GpuLine {
    /// A device line in either style. `options` is the non-path part of a `devN` value.
    Device {
        dev: GpuDev,
        style: MountStyle,
        options: Option<String>,
    },
    /// `lxc.cgroup2.devices.allow: c M:* rwm` with any major.
    Allow(u32),
}

impl LxcConfig {
    /// Parses a config. Never fails: every line is kept verbatim, classification happens on
    /// demand. Guarantee: `LxcConfig::parse(x).render() == x` for any `x`.
    pub fn parse(text: &str) -> LxcConfig {
        LxcConfig {
            lines: split_lines(text),
        }
    }

    /// Renders the file; byte-identical to the input when nothing was changed.
    pub fn render(&self) -> String {
        self.lines.concat()
    }

    /// GPU state of the main section (lines before the first `[...]` header).
    ///
    /// `style` is `MountEntry` if any GPU `lxc.mount.entry` line exists, else `DevN` if any GPU
    /// `devN` line exists, else `None`. This rule (rather than "first line wins") keeps
    /// [`LxcConfig::set_gpu_mounts`] idempotent on mixed files.
    pub fn gpu_mounts(&self) -> GpuMounts {
        let mut out = GpuMounts::default();
        let mut any_entry = false;
        let mut any_devn = false;
        for (_, line) in self.main_gpu_lines() {
            match line {
                GpuLine::Device { dev, style, .. } => {
                    match dev {
                        GpuDev::Minor(n) => {
                            out.minors.insert(n);
                        }
                        GpuDev::Control(c) => {
                            out.control.insert(c);
                        }
                    }
                    match style {
                        MountStyle::MountEntry => any_entry = true,
                        MountStyle::DevN => any_devn = true,
                    }
                }
                GpuLine::Allow(m) => {
                    out.cgroup_allow_majors.insert(m);
                }
            }
        }
        out.style = if any_entry {
            Some(MountStyle::MountEntry)
        } else if any_devn {
            Some(MountStyle::DevN)
        } else {
            None
        };
        out
    }

    /// Rewrites only the lines the agent owns in the main section so that `gpu_mounts()`
    /// afterwards has exactly `desired.minors`, the control devices when minors is non-empty
    /// (none when empty), and (MountEntry style) allow lines for major 195 and `uvm_major`.
    /// Returns true if anything changed.
    ///
    /// Behaviour:
    /// - Style: the existing style (see [`LxcConfig::gpu_mounts`]) or `default_style` when the
    ///   file has no GPU device line. Existing wanted lines are kept byte-for-byte whatever
    ///   their style; only missing devices are added, in the chosen style.
    /// - Control devices: Ctl, Uvm, UvmTools always; Caps only in MountEntry style, because
    ///   `/dev/nvidia-caps` is a directory and PVE refuses a `devN` that is not a device node
    ///   (the container would fail to start). A `devN` line for `/dev/nvidia-caps` is removed.
    /// - Allow lines (`c 195:* rwm`, `c <uvm_major>:* rwm`) are wanted iff the result still
    ///   has a GPU `lxc.mount.entry` line; otherwise they are removed (stale broad grants).
    ///   Allow lines for other majors are foreign and kept.
    /// - Unwanted owned lines are removed (all of them, e.g. a removed GPU's lines); duplicate
    ///   wanted lines are kept.
    /// - New lines go right after the last owned line of the main section (at its position if
    ///   it was removed), else after the last non-blank line of the main section (never at EOF
    ///   of a file with sections, which would land in the last section). Order: allow lines,
    ///   then minors ascending, then ctl, uvm, uvm-tools, caps.
    /// - New `devN` lines use the lowest index 0..=255 not used in the main section nor in
    ///   `[pve:pending]` (keys or `delete:`), so a pending change can't clobber them. Options
    ///   are copied from an existing GPU `devN` line (same kind - GPU or control - preferred),
    ///   else [`DEFAULT_DEVN_OPTIONS`]. If all 256 indices are taken the device is not added
    ///   (visible through `gpu_mounts()`).
    /// - Line endings follow the line before the insertion point (else the file's first
    ///   line ending, else `\n`); if that line was the unterminated last line it gets one.
    pub fn set_gpu_mounts(&mut self, desired: &DesiredGpuMounts) -> bool {
        let gpu_lines = self.main_gpu_lines();
        let owned_majors: BTreeSet<u32> = [NVIDIA_MAJOR, desired.uvm_major].into();
        let is_owned = |l: &GpuLine| match l {
            GpuLine::Device { .. } => true,
            GpuLine::Allow(m) => owned_majors.contains(m),
        };

        let current = self.gpu_mounts();
        let style = current.style.unwrap_or(desired.default_style);

        let mut wanted_devs: BTreeSet<GpuDev> = BTreeSet::new();
        if !desired.minors.is_empty() {
            wanted_devs.extend(desired.minors.iter().map(|&n| GpuDev::Minor(n)));
            wanted_devs.extend(
                [
                    ControlDevice::Ctl,
                    ControlDevice::Uvm,
                    ControlDevice::UvmTools,
                ]
                .map(GpuDev::Control),
            );
            if style == MountStyle::MountEntry {
                wanted_devs.insert(GpuDev::Control(ControlDevice::Caps));
            }
        }

        let mut remove: BTreeSet<usize> = BTreeSet::new();
        let mut present: BTreeSet<GpuDev> = BTreeSet::new();
        let mut kept_entry_line = false;
        for (idx, line) in &gpu_lines {
            if let GpuLine::Device { dev, style, .. } = line {
                let devn_caps =
                    *dev == GpuDev::Control(ControlDevice::Caps) && *style == MountStyle::DevN;
                if wanted_devs.contains(dev) && !devn_caps {
                    present.insert(*dev);
                    if *style == MountStyle::MountEntry {
                        kept_entry_line = true;
                    }
                } else {
                    remove.insert(*idx);
                }
            }
        }

        let mut new_lines: Vec<String> = Vec::new();
        let missing: Vec<GpuDev> = wanted_devs.difference(&present).copied().collect();
        let mut new_devs: Vec<String> = Vec::new();
        let mut adds_entry_line = false;
        if style == MountStyle::MountEntry {
            for dev in &missing {
                new_devs.push(mount_entry_line(*dev));
                adds_entry_line = true;
            }
        } else {
            let mut used = self.used_dev_indices();
            for dev in &missing {
                let Some(index) = (0..=MAX_DEV_INDEX).find(|i| !used.contains(i)) else {
                    break;
                };
                used.insert(index);
                let options = devn_template(&gpu_lines, *dev);
                new_devs.push(devn_line(index, *dev, options.as_deref()));
            }
        }

        let want_allow = kept_entry_line || adds_entry_line;
        let mut present_majors: BTreeSet<u32> = BTreeSet::new();
        for (idx, line) in &gpu_lines {
            if let GpuLine::Allow(m) = line {
                if !owned_majors.contains(m) {
                    continue;
                }
                if want_allow {
                    present_majors.insert(*m);
                } else {
                    remove.insert(*idx);
                }
            }
        }
        if want_allow {
            for m in owned_majors.difference(&present_majors) {
                new_lines.push(format!("lxc.cgroup2.devices.allow: c {m}:* rwm"));
            }
        }
        new_lines.extend(new_devs);

        if remove.is_empty() && new_lines.is_empty() {
            return false;
        }

        let main_end = self.main_end();
        let insert_at = match gpu_lines.iter().rfind(|(_, l)| is_owned(l)) {
            Some((idx, _)) => idx + 1,
            None => (0..main_end)
                .rev()
                .find(|&i| !is_blank(content(&self.lines[i])))
                .map_or(0, |i| i + 1),
        };
        let eol = self.eol_for_insert(insert_at);

        let mut out: Vec<String> = Vec::with_capacity(self.lines.len() + new_lines.len());
        for (idx, line) in self.lines.iter().enumerate() {
            if idx == insert_at {
                push_new_lines(&mut out, &new_lines, &eol);
            }
            if !remove.contains(&idx) {
                out.push(line.clone());
            }
        }
        if insert_at >= self.lines.len() {
            push_new_lines(&mut out, &new_lines, &eol);
        }
        self.lines = out;
        true
    }

    /// Index of the first section header (end of the main section), or the line count.
    fn main_end(&self) -> usize {
        self.lines
            .iter()
            .position(|l| {
                matches!(
                    parse_pve_line(content(l)),
                    PveLine::PendingHeader | PveLine::SnapshotHeader(_)
                )
            })
            .unwrap_or(self.lines.len())
    }

    /// GPU lines of the main section with their line index.
    fn main_gpu_lines(&self) -> Vec<(usize, GpuLine)> {
        let end = self.main_end();
        self.lines[..end]
            .iter()
            .enumerate()
            .filter_map(|(i, l)| classify_gpu_line(content(l)).map(|g| (i, g)))
            .collect()
    }

    /// `devN` indices that a new GPU line must not use: all in the main section plus those
    /// named in `[pve:pending]` (as keys or in `delete:`).
    fn used_dev_indices(&self) -> BTreeSet<u32> {
        let mut used = BTreeSet::new();
        let mut section = Section::Main;
        for l in &self.lines {
            match parse_pve_line(content(l)) {
                PveLine::PendingHeader => section = Section::Pending,
                PveLine::SnapshotHeader(_) => section = Section::Snapshot,
                PveLine::Normal { key, .. } if section != Section::Snapshot => {
                    if let Some(i) = dev_index(key) {
                        used.insert(i);
                    }
                }
                PveLine::Delete(list) if section == Section::Pending => {
                    for item in list.split(|c: char| c == ',' || c == ';' || is_ws(c)) {
                        if let Some(i) = dev_index(item.trim_start_matches('!')) {
                            used.insert(i);
                        }
                    }
                }
                _ => {}
            }
        }
        used
    }

    /// Line ending for lines inserted before index `at`; also fixes a missing final newline.
    fn eol_for_insert(&mut self, at: usize) -> String {
        let first = first_line_ending(&self.lines).to_string();
        if at == 0 {
            return first;
        }
        terminate(&mut self.lines[at - 1], &first)
    }
}

fn push_new_lines(out: &mut Vec<String>, new_lines: &[String], eol: &str) {
    for l in new_lines {
        out.push(format!("{l}{eol}"));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Main,
    Pending,
    Snapshot,
}

fn mount_entry_line(dev: GpuDev) -> String {
    let path = dev.path();
    let target = path.trim_start_matches('/');
    let create = if dev == GpuDev::Control(ControlDevice::Caps) {
        "dir"
    } else {
        "file"
    };
    format!("lxc.mount.entry: {path} {target} none bind,optional,create={create}")
}

fn devn_line(index: u32, dev: GpuDev, options: Option<&str>) -> String {
    let path = dev.path();
    match options {
        Some(o) if !o.is_empty() => format!("dev{index}: {path},{o}"),
        Some(_) => format!("dev{index}: {path}"),
        None => format!("dev{index}: {path},{DEFAULT_DEVN_OPTIONS}"),
    }
}

/// Options of an existing GPU `devN` line to copy onto a new line for `dev`: a line of the
/// same kind (GPU vs control) first, else any GPU `devN` line. `None` = no template.
fn devn_template(lines: &[(usize, GpuLine)], dev: GpuDev) -> Option<String> {
    let is_minor = matches!(dev, GpuDev::Minor(_));
    let mut any = None;
    for (_, l) in lines {
        if let GpuLine::Device {
            dev: d,
            style: MountStyle::DevN,
            options: Some(o),
        } = l
        {
            if *d == GpuDev::Control(ControlDevice::Caps) {
                continue;
            }
            if matches!(d, GpuDev::Minor(_)) == is_minor {
                return Some(o.clone());
            }
            if any.is_none() {
                any = Some(o.clone());
            }
        }
    }
    any
}

/// Classifies one main-section line (without its `\n`) as a GPU line, following PVE's rule
/// order so that e.g. a `snapstate:`-suffixed line is not mistaken for a `devN` line.
fn classify_gpu_line(line: &str) -> Option<GpuLine> {
    match parse_pve_line(line) {
        PveLine::Lxc {
            key: "lxc.mount.entry",
            value,
        } => {
            let source = value.split(is_ws).find(|t| !t.is_empty())?;
            let dev = GpuDev::from_path(source)?;
            Some(GpuLine::Device {
                dev,
                style: MountStyle::MountEntry,
                options: None,
            })
        }
        PveLine::Lxc {
            key: "lxc.cgroup2.devices.allow",
            value,
        } => {
            let toks: Vec<&str> = value.split(is_ws).filter(|t| !t.is_empty()).collect();
            match toks.as_slice() {
                ["c", majmin, "rwm"] => {
                    let major = majmin.strip_suffix(":*")?;
                    parse_canonical_u32(major).map(GpuLine::Allow)
                }
                _ => None,
            }
        }
        PveLine::Normal { key, value } => {
            dev_index(key)?;
            let (path, options) = split_devn_value(value)?;
            let dev = GpuDev::from_path(path)?;
            Some(GpuLine::Device {
                dev,
                style: MountStyle::DevN,
                options: Some(options),
            })
        }
        _ => None,
    }
}

/// Splits a `devN` property string into its path and the remaining parts (joined by ',').
/// `None` when there is not exactly one path.
fn split_devn_value(value: &str) -> Option<(&str, String)> {
    let mut path = None;
    let mut rest: Vec<&str> = Vec::new();
    for part in value.split(',') {
        if part.chars().all(is_ws) {
            continue;
        }
        let p = match part.split_once('=') {
            Some(("path", v)) => v,
            Some(_) => {
                rest.push(part);
                continue;
            }
            None => part,
        };
        if path.replace(p).is_some() {
            return None;
        }
    }
    path.map(|p| (p, rest.join(",")))
}

/// `dev<N>` with canonical N in 0..=255.
fn dev_index(key: &str) -> Option<u32> {
    let n = parse_canonical_u32(key.strip_prefix("dev")?)?;
    (n <= MAX_DEV_INDEX).then_some(n)
}

/// Decimal without sign or leading zeros ("0" allowed).
fn parse_canonical_u32(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// Line-level grammar of parse_pct_config
// ---------------------------------------------------------------------------------------------

/// One line as classified by `parse_pct_config` (rules 0-9 of the facts file, in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PveLine<'a> {
    Blank,
    PendingHeader,
    SnapshotHeader(&'a str),
    Comment(&'a str),
    Lxc { key: &'a str, value: &'a str },
    Description(&'a str),
    Snapstate(&'a str),
    Delete(&'a str),
    Normal { key: &'a str, value: &'a str },
    Unparseable,
}

fn parse_pve_line(line: &str) -> PveLine<'_> {
    if is_blank(line) {
        return PveLine::Blank;
    }
    const PENDING: &[u8] = b"[pve:pending]";
    let b = line.as_bytes();
    if b.len() >= PENDING.len()
        && b[..PENDING.len()].eq_ignore_ascii_case(PENDING)
        && is_blank(&line[PENDING.len()..])
    {
        return PveLine::PendingHeader;
    }
    if let Some(name) = snapshot_header(line) {
        return PveLine::SnapshotHeader(name);
    }
    if let Some(rest) = line.strip_prefix('#') {
        return PveLine::Comment(rest);
    }
    if let Some(l) = lxc_line(line) {
        return l;
    }
    if let Some(rest) = line.strip_prefix("description:") {
        let v = rest.trim_matches(is_ws);
        if !v.is_empty() {
            return PveLine::Description(v);
        }
    }
    if let Some(state) = snapstate(line) {
        return PveLine::Snapstate(state);
    }
    if let Some(rest) = line.strip_prefix("delete:") {
        let v = rest.trim_matches(is_ws);
        if !v.is_empty() {
            return PveLine::Delete(v);
        }
    }
    if let Some(l) = normal_line(line) {
        return l;
    }
    PveLine::Unparseable
}

/// `^\[([a-z][a-z0-9_\-]+)\]\s*$` (case-insensitive).
fn snapshot_header(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('[')?;
    let close = rest.find(']')?;
    let name = &rest[..close];
    let mut chars = name.chars();
    let first = chars.next()?;
    let ok = first.is_ascii_alphabetic()
        && name.len() >= 2
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && is_blank(&rest[close + 1..]);
    ok.then_some(name)
}

/// `^(lxc\.[a-z0-9_\-\.]+)(:|\s*=)\s*(.*?)\s*$`
fn lxc_line(line: &str) -> Option<PveLine<'_>> {
    let rest = line.strip_prefix("lxc.")?;
    let key_len = 4 + rest
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.".contains(c)))
        .unwrap_or(rest.len());
    if key_len == 4 {
        return None;
    }
    let key = &line[..key_len];
    let after = &line[key_len..];
    let value = if let Some(v) = after.strip_prefix(':') {
        v
    } else {
        after.trim_start_matches(is_ws).strip_prefix('=')?
    };
    Some(PveLine::Lxc {
        key,
        value: value.trim_matches(is_ws),
    })
}

/// Unanchored `snapstate:\s*(prepare|delete)\s*$`.
fn snapstate(line: &str) -> Option<&str> {
    line.match_indices("snapstate:").find_map(|(i, m)| {
        let rest = line[i + m.len()..].trim_start_matches(is_ws);
        ["prepare", "delete"].into_iter().find_map(|s| {
            let tail = rest.strip_prefix(s)?;
            is_blank(tail).then_some(&rest[..s.len()])
        })
    })
}

/// `^([a-z][a-z_]*\d*):\s*(.+?)\s*$`
fn normal_line(line: &str) -> Option<PveLine<'_>> {
    let b = line.as_bytes();
    if !b.first()?.is_ascii_lowercase() {
        return None;
    }
    let mut i = 1;
    while i < b.len() && (b[i].is_ascii_lowercase() || b[i] == b'_') {
        i += 1;
    }
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if b.get(i) != Some(&b':') {
        return None;
    }
    let key = &line[..i];
    let raw = &line[i + 1..];
    let trimmed = raw.trim_matches(is_ws);
    let value = if !trimmed.is_empty() {
        trimmed
    } else {
        // `\s*(.+?)\s*$` on an all-whitespace rest backtracks to capture its last character.
        let last = raw.chars().next_back()?;
        &raw[raw.len() - last.len_utf8()..]
    };
    Some(PveLine::Normal { key, value })
}

// ---------------------------------------------------------------------------------------------
// Model of write_pct_config
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct PveSection {
    description: String,
    keys: BTreeMap<String, String>,
    env: Option<String>,
    lxc: Vec<(String, String)>,
}

impl PveSection {
    fn is_empty(&self) -> bool {
        self.description.is_empty()
            && self.keys.is_empty()
            && self.env.is_none()
            && self.lxc.is_empty()
    }

    fn write(&self, out: &mut String) {
        for line in perl_split(&self.description, '\n', false) {
            out.push('#');
            out.push_str(&encode_text(line));
            out.push('\n');
        }
        const SKIP: [&str; 7] = [
            "digest",
            "description",
            "pending",
            "snapshots",
            "snapname",
            "env",
            "lxc",
        ];
        for (k, v) in &self.keys {
            if !SKIP.contains(&k.as_str()) {
                out.push_str(&format!("{k}: {v}\n"));
            }
        }
        if let Some(env) = &self.env {
            for v in perl_split(env, '\0', true) {
                out.push_str(&format!("lxc.environment.runtime: {v}\n"));
            }
        }
        for (k, v) in &self.lxc {
            out.push_str(&format!("{k}: {v}\n"));
        }
    }
}

/// A model of what PVE's `parse_pct_config` + `write_pct_config` do to a file, i.e. what the
/// file looks like after any PVE tool (`pct set`, snapshot, backup lock, ...) rewrites it.
/// Used by tests to prove that the agent's lines survive a Proxmox rewrite.
///
/// Modelled: per section, `#` lines (wherever they are) become the description and are written
/// first, percent-encoded per `encode_text` (trailing empty comment lines are lost);
/// `description:` lines are appended to it without newline; normal keys are sorted (byte
/// order) with the last duplicate winning, booleans/integers of common keys normalised;
/// `lxc.*` lines are written as `key: value` after the normal keys in file order, with
/// `lxc.environment.runtime` first; invalid `lxc.*` keys and unparseable lines are dropped;
/// `delete:` outside `[pve:pending]` and a top-level `snapstate` are dropped; sections are
/// written main, `[pve:pending]` (if non-empty), snapshots sorted by name, each header
/// preceded by one blank line; output uses `\n` only.
///
/// Not modelled (approximations): type checks of keys beyond a small table, the exact list of
/// deprecated lxc2-era keys, removal of referenced `unusedN`, non-UTF-8 comment bytes.
pub fn pve_rewrite(text: &str) -> String {
    #[derive(PartialEq)]
    enum Cur {
        Main,
        Pending,
        Snap(String),
    }
    let mut main = PveSection::default();
    let mut pending = PveSection::default();
    let mut snaps: BTreeMap<String, PveSection> = BTreeMap::new();
    let mut cur = Cur::Main;
    let mut descr = String::new();

    fn section<'a>(
        cur: &Cur,
        main: &'a mut PveSection,
        pending: &'a mut PveSection,
        snaps: &'a mut BTreeMap<String, PveSection>,
    ) -> &'a mut PveSection {
        match cur {
            Cur::Main => main,
            Cur::Pending => pending,
            Cur::Snap(name) => snaps.entry(name.clone()).or_default(),
        }
    }

    for line in text.split('\n') {
        let parsed = parse_pve_line(line);
        if let PveLine::PendingHeader | PveLine::SnapshotHeader(_) = parsed {
            section(&cur, &mut main, &mut pending, &mut snaps).description =
                std::mem::take(&mut descr);
        }
        match parsed {
            PveLine::Blank | PveLine::Unparseable => {}
            PveLine::PendingHeader => {
                cur = Cur::Pending;
                pending = PveSection::default();
            }
            PveLine::SnapshotHeader(name) => {
                cur = Cur::Snap(name.to_string());
                snaps.insert(name.to_string(), PveSection::default());
            }
            PveLine::Comment(t) => {
                descr.push_str(&decode_text(t));
                descr.push('\n');
            }
            PveLine::Description(t) => descr.push_str(&decode_text(t)),
            PveLine::Lxc { key, value } => {
                if !is_valid_lxc_key(key) {
                    continue;
                }
                let sec = section(&cur, &mut main, &mut pending, &mut snaps);
                if key == "lxc.environment.runtime" {
                    match &mut sec.env {
                        Some(e) => {
                            e.push('\0');
                            e.push_str(value);
                        }
                        None => sec.env = Some(value.to_string()),
                    }
                } else {
                    sec.lxc.push((key.to_string(), value.to_string()));
                }
            }
            PveLine::Snapstate(s) => {
                section(&cur, &mut main, &mut pending, &mut snaps)
                    .keys
                    .insert("snapstate".to_string(), s.to_string());
            }
            PveLine::Delete(v) => {
                if cur == Cur::Pending {
                    pending.keys.insert("delete".to_string(), v.to_string());
                }
            }
            PveLine::Normal { key, value } => {
                let sec = section(&cur, &mut main, &mut pending, &mut snaps);
                if key == "env" {
                    sec.env = Some(value.to_string());
                } else {
                    sec.keys.insert(key.to_string(), check_type(key, value));
                }
            }
        }
    }
    section(&cur, &mut main, &mut pending, &mut snaps).description = descr;
    main.keys.remove("snapstate");

    let mut out = String::new();
    main.write(&mut out);
    if !pending.is_empty() {
        out.push_str("\n[pve:pending]\n");
        pending.write(&mut out);
    }
    for (name, sec) in &snaps {
        out.push_str(&format!("\n[{name}]\n"));
        sec.write(&mut out);
    }
    out
}

/// Perl `split(/SEP/, s)` (or `/SEP+/` when `collapse`): a leading empty field is kept,
/// trailing empty fields are dropped, and with `collapse` runs of separators count as one.
fn perl_split(s: &str, sep: char, collapse: bool) -> Vec<&str> {
    let mut fields: Vec<&str> = s
        .split(sep)
        .enumerate()
        .filter(|(i, f)| !collapse || *i == 0 || !f.is_empty())
        .map(|(_, f)| f)
        .collect();
    while fields.last().is_some_and(|f| f.is_empty()) {
        fields.pop();
    }
    fields
}

/// Boolean/integer normalisation done by `check_type` for common keys.
fn check_type(key: &str, value: &str) -> String {
    const BOOLEANS: [&str; 6] = [
        "onboot",
        "template",
        "protection",
        "unprivileged",
        "console",
        "debug",
    ];
    const INTEGERS: [&str; 5] = ["memory", "swap", "cores", "tty", "cpuunits"];
    if BOOLEANS.contains(&key) {
        let l = value.to_ascii_lowercase();
        if ["1", "on", "yes", "true"].contains(&l.as_str()) {
            return "1".to_string();
        }
        if ["0", "off", "no", "false"].contains(&l.as_str()) {
            return "0".to_string();
        }
    }
    if INTEGERS.contains(&key) && !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let t = value.trim_start_matches('0');
        return if t.is_empty() {
            "0".to_string()
        } else {
            t.to_string()
        };
    }
    value.to_string()
}

/// Approximation of `is_valid_lxc_conf_key` (facts 3.4); invalid keys are dropped by PVE.
fn is_valid_lxc_key(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "lxc.apparmor.profile",
        "lxc.apparmor.allow_incomplete",
        "lxc.apparmor.allow_nesting",
        "lxc.apparmor.raw",
        "lxc.selinux.context",
        "lxc.include",
        "lxc.arch",
        "lxc.uts.name",
        "lxc.signal.halt",
        "lxc.signal.reboot",
        "lxc.signal.stop",
        "lxc.init.cmd",
        "lxc.init.cwd",
        "lxc.init.uid",
        "lxc.init.gid",
        "lxc.init.groups",
        "lxc.pty.max",
        "lxc.console.logfile",
        "lxc.console.path",
        "lxc.tty.max",
        "lxc.devtty.dir",
        "lxc.hook.autodev",
        "lxc.autodev",
        "lxc.kmsg",
        "lxc.mount.fstab",
        "lxc.mount.entry",
        "lxc.mount.auto",
        "lxc.rootfs.mount",
        "lxc.cap.drop",
        "lxc.cap.keep",
        "lxc.seccomp.profile",
        "lxc.seccomp.notify.proxy",
        "lxc.seccomp.notify.cookie",
        "lxc.idmap",
        "lxc.hook.pre-start",
        "lxc.hook.pre-mount",
        "lxc.hook.mount",
        "lxc.hook.start",
        "lxc.hook.stop",
        "lxc.hook.post-stop",
        "lxc.hook.clone",
        "lxc.hook.destroy",
        "lxc.hook.version",
        "lxc.log.level",
        "lxc.log.file",
        "lxc.start.auto",
        "lxc.start.delay",
        "lxc.start.order",
        "lxc.group",
        "lxc.environment",
        "lxc.environment.runtime",
        "lxc.environment.hooks",
        "lxc.sysctl.fs.mqueue",
        "lxc.sysctl.kernel.msgmax",
        "lxc.sysctl.kernel.msgmnb",
        "lxc.sysctl.kernel.msgmni",
        "lxc.sysctl.kernel.sem",
        "lxc.sysctl.kernel.shmall",
        "lxc.sysctl.kernel.shmmax",
        "lxc.sysctl.kernel.shmmni",
        "lxc.sysctl.kernel.shm_rmid_forced",
    ];
    // lxc2-era names PVE warns about but keeps (subset).
    const DEPRECATED: &[&str] = &[
        "lxc.aa_profile",
        "lxc.aa_allow_incomplete",
        "lxc.se_context",
        "lxc.id_map",
        "lxc.init_cmd",
        "lxc.init_uid",
        "lxc.init_gid",
        "lxc.tty",
        "lxc.pts",
        "lxc.utsname",
        "lxc.devttydir",
        "lxc.loglevel",
    ];
    const PREFIXES: [&str; 5] = [
        "lxc.cgroup2.",
        "lxc.prlimit.",
        "lxc.net.",
        "lxc.limit.",
        "lxc.cgroup.",
    ];
    EXACT.contains(&key)
        || DEPRECATED.contains(&key)
        || key.starts_with("lxc.network.")
        || PREFIXES.iter().any(|p| key.starts_with(p))
}

/// `PVE::ParseUtils::decode_text`: `%XX` unescape (any hex case), then lossy UTF-8 decode.
fn decode_text(s: &str) -> String {
    let b = s.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex_val(b[i + 1]), hex_val(b[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_val(c: u8) -> Option<u8> {
    (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// `PVE::ParseUtils::encode_text`: UTF-8 bytes outside 0x20-0x24, 0x26-0x39, 0x3b-0x7e become
/// `%XX` with upper-case hex.
fn encode_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        let safe = matches!(b, 0x20..=0x24 | 0x26..=0x39 | 0x3b..=0x7e);
        if safe {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxmox::lines::testing::{is_subsequence, lines};
    use proptest::prelude::*;

    const F8A: &str = include_str!("testdata/lxc-8a.conf");
    const F8A_CANON: &str = include_str!("testdata/lxc-8a-canonical.conf");
    const F8B: &str = include_str!("testdata/lxc-8b.conf");
    const F8C: &str = include_str!("testdata/lxc-8c.conf");
    const FIXTURES: [&str; 4] = [F8A, F8A_CANON, F8B, F8C];

    fn desired(minors: &[u32], uvm_major: u32, default_style: MountStyle) -> DesiredGpuMounts {
        DesiredGpuMounts {
            minors: minors.iter().copied().collect(),
            uvm_major,
            default_style,
        }
    }

    fn set(text: &str, d: &DesiredGpuMounts) -> (String, bool) {
        let mut c = LxcConfig::parse(text);
        let changed = c.set_gpu_mounts(d);
        (c.render(), changed)
    }

    /// Lines of `text` that the agent does not own for `uvm_major`.
    fn foreign_lines(text: &str, uvm_major: u32) -> Vec<&str> {
        let c = LxcConfig::parse(text);
        let end = c.main_end();
        lines(text)
            .into_iter()
            .enumerate()
            .filter(|(i, l)| {
                *i >= end
                    || match classify_gpu_line(l) {
                        None => true,
                        Some(GpuLine::Device { .. }) => false,
                        Some(GpuLine::Allow(m)) => m != NVIDIA_MAJOR && m != uvm_major,
                    }
            })
            .map(|(_, l)| l)
            .collect()
    }

    fn assert_only_owned_changed(before: &str, after: &str, uvm_major: u32) {
        assert_eq!(
            foreign_lines(before, uvm_major),
            foreign_lines(after, uvm_major),
            "foreign lines changed:\n--- before\n{before}\n--- after\n{after}"
        );
    }

    fn all_controls() -> BTreeSet<ControlDevice> {
        ControlDevice::ALL.into_iter().collect()
    }

    fn devn_controls() -> BTreeSet<ControlDevice> {
        [
            ControlDevice::Ctl,
            ControlDevice::Uvm,
            ControlDevice::UvmTools,
        ]
        .into()
    }

    #[test]
    fn round_trip_fixtures_and_oddities() {
        let crlf = F8A.replace('\n', "\r\n");
        let no_nl = F8B.trim_end_matches('\n').to_string();
        let weird =
            "#  a: b %41 100%\n#\n\n   \n # indented\nFoo: bar\nonboot:\nlxc.Mount.entry: x\n\
                     lxc.foo : bar\n[bad name!]\n\u{fc}nic\u{f6}de: \u{1f600}\n\t\r\n\r\r\n";
        for text in FIXTURES.iter().copied().chain([
            crlf.as_str(),
            no_nl.as_str(),
            weird,
            "",
            "\n",
            "\r",
            "x",
        ]) {
            assert_eq!(LxcConfig::parse(text).render(), text);
        }
    }

    #[test]
    fn gpu_mounts_of_fixtures() {
        let a = LxcConfig::parse(F8A).gpu_mounts();
        assert_eq!(a.minors, [0, 1, 2, 3].into());
        assert_eq!(a.control, all_controls());
        assert_eq!(a.style, Some(MountStyle::MountEntry));
        assert_eq!(a.cgroup_allow_majors, [195, 509].into());
        assert_eq!(LxcConfig::parse(F8A_CANON).gpu_mounts(), a);

        let b = LxcConfig::parse(F8B).gpu_mounts();
        assert_eq!(b.minors, [0, 1].into());
        assert_eq!(b.control, devn_controls());
        assert_eq!(b.style, Some(MountStyle::DevN));
        assert!(b.cgroup_allow_majors.is_empty());

        let c = LxcConfig::parse(F8C).gpu_mounts();
        assert_eq!(c.minors, [0].into());
        assert_eq!(c.control, [ControlDevice::Ctl, ControlDevice::Uvm].into());
        assert_eq!(c.style, Some(MountStyle::DevN));
    }

    #[test]
    fn no_change_when_already_satisfied() {
        assert_eq!(
            set(F8A, &desired(&[0, 1, 2, 3], 509, MountStyle::DevN)),
            (F8A.to_string(), false)
        );
        assert_eq!(
            set(F8B, &desired(&[0, 1], 511, MountStyle::MountEntry)),
            (F8B.to_string(), false)
        );
    }

    #[test]
    fn mount_entry_remove_and_add_gpus() {
        let d = desired(&[0, 2], 509, MountStyle::DevN);
        let (out, changed) = set(F8A, &d);
        assert!(changed);
        let expected = F8A
            .replace(
                "lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n",
                "",
            )
            .replace(
                "lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file\n",
                "",
            );
        assert_eq!(out, expected);
        assert_eq!(set(&out, &d), (out.clone(), false));

        let d = desired(&[0, 1, 2, 3, 4], 509, MountStyle::DevN);
        let (out2, changed) = set(&out, &d);
        assert!(changed);
        let expected = format!(
            "{F8A}lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n\
             lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file\n\
             lxc.mount.entry: /dev/nvidia4 dev/nvidia4 none bind,optional,create=file\n"
        )
        .replace("lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\nlxc.mount.entry: /dev/nvidia2", "lxc.mount.entry: /dev/nvidia2")
        .replace("lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file\nlxc.mount.entry: /dev/nvidiactl", "lxc.mount.entry: /dev/nvidiactl");
        assert_eq!(out2, expected);
        assert_only_owned_changed(F8A, &out2, 509);
        let g = LxcConfig::parse(&out2).gpu_mounts();
        assert_eq!(g.minors, [0, 1, 2, 3, 4].into());
        assert_eq!(set(&out2, &d), (out2.clone(), false));
    }

    #[test]
    fn mount_entry_new_uvm_major_and_removal_of_everything() {
        // uvm major changed (container moved to another host): a 511 allow line is added,
        // the 509 one is no longer owned and stays.
        let (out, changed) = set(F8A, &desired(&[0, 1, 2, 3], 511, MountStyle::DevN));
        assert!(changed);
        assert!(out.ends_with("create=dir 0 0\nlxc.cgroup2.devices.allow: c 511:* rwm\n"));
        assert_eq!(
            out.replace("lxc.cgroup2.devices.allow: c 511:* rwm\n", ""),
            F8A
        );

        let (out, changed) = set(F8A, &desired(&[], 509, MountStyle::DevN));
        assert!(changed);
        let g = LxcConfig::parse(&out).gpu_mounts();
        assert_eq!(g, GpuMounts::default());
        assert!(out.contains("# NVIDIA passthrough"));
        assert!(out.contains("lxc.cgroup.devices.allow: c 195:* rwm\n"));
        assert_eq!(lines(&out).len(), lines(F8A).len() - 10);
        assert_only_owned_changed(F8A, &out, 509);
        assert!(!set(&out, &desired(&[], 509, MountStyle::DevN)).1);
    }

    #[test]
    fn devn_add_gpu_copies_options_and_picks_free_index() {
        let d = desired(&[0, 1, 2], 511, MountStyle::MountEntry);
        let (out, changed) = set(F8B, &d);
        assert!(changed);
        let expected = F8B.replace(
            "dev4: /dev/nvidia-uvm-tools,mode=0666\n",
            "dev4: /dev/nvidia-uvm-tools,mode=0666\ndev7: /dev/nvidia2,gid=44,mode=0666\n",
        );
        assert_eq!(out, expected);
        assert_eq!(set(&out, &d), (out.clone(), false));

        // Remove GPU 0: exactly its line goes.
        let d = desired(&[1, 2], 511, MountStyle::MountEntry);
        let (out2, _) = set(&out, &d);
        assert_eq!(
            out2,
            out.replace("dev0: /dev/nvidia0,gid=44,mode=0666\n", "")
        );
        // Add it back: lowest free index is 0 again.
        let (out3, _) = set(&out2, &desired(&[0, 1, 2], 511, MountStyle::MountEntry));
        assert!(out3.contains(
            "dev7: /dev/nvidia2,gid=44,mode=0666\ndev0: /dev/nvidia0,gid=44,mode=0666\n"
        ));
        assert_only_owned_changed(F8B, &out3, 511);
    }

    #[test]
    fn snapshot_and_pending_sections_untouched() {
        let d = desired(&[0, 1], 511, MountStyle::MountEntry);
        let (out, changed) = set(F8C, &d);
        assert!(changed);
        // dev0 is used in [pve:pending], dev1/dev2 in main: new lines get dev3, dev4.
        let expected = F8C.replacen(
            "dev2: /dev/nvidia-uvm,mode=0666\nhostname",
            "dev2: /dev/nvidia-uvm,mode=0666\ndev3: /dev/nvidia1,mode=0666\n\
             dev4: /dev/nvidia-uvm-tools,mode=0666\nhostname",
            1,
        );
        assert_eq!(out, expected);
        let main_end = out.find("\n[pve:pending]").unwrap_or(0);
        assert_eq!(
            out[main_end..],
            F8C[F8C.find("\n[pve:pending]").unwrap_or(0)..]
        );
        assert_eq!(set(&out, &d), (out.clone(), false));

        let (out, _) = set(F8C, &desired(&[], 511, MountStyle::MountEntry));
        assert!(!out[..out.find("[pve:pending]").unwrap_or(0)].contains("nvidia"));
        assert_eq!(out.matches("/dev/nvidia").count(), 4); // pending dev0 + snapshot's 3
    }

    #[test]
    fn new_lines_go_to_end_of_main_section() {
        let text =
            "arch: amd64\nhostname: a\nlxc.apparmor.profile: unconfined\n\n[snap]\narch: amd64\n";
        let d = desired(&[0], 510, MountStyle::MountEntry);
        let (out, _) = set(text, &d);
        assert_eq!(
            out,
            "arch: amd64\nhostname: a\nlxc.apparmor.profile: unconfined\n\
             lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.allow: c 510:* rwm\n\
             lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n\
             lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file\n\
             lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n\
             lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file\n\
             lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir\n\
             \n[snap]\narch: amd64\n"
        );
        let g = LxcConfig::parse(&out).gpu_mounts();
        assert_eq!(g.minors, [0].into());
        assert_eq!(g.control, all_controls());
        assert_eq!(g.cgroup_allow_majors, [195, 510].into());

        let (out, _) = set(text, &desired(&[3], 510, MountStyle::DevN));
        assert_eq!(
            out,
            "arch: amd64\nhostname: a\nlxc.apparmor.profile: unconfined\n\
             dev0: /dev/nvidia3,mode=0666\ndev1: /dev/nvidiactl,mode=0666\n\
             dev2: /dev/nvidia-uvm,mode=0666\ndev3: /dev/nvidia-uvm-tools,mode=0666\n\
             \n[snap]\narch: amd64\n"
        );
        // Empty file and a file whose main section is empty.
        let (out, _) = set("", &desired(&[1], 510, MountStyle::DevN));
        assert!(out.starts_with("dev0: /dev/nvidia1,mode=0666\n"));
        let (out, _) = set(
            "[snap]\narch: amd64\n",
            &desired(&[1], 510, MountStyle::DevN),
        );
        assert!(out.ends_with("dev3: /dev/nvidia-uvm-tools,mode=0666\n[snap]\narch: amd64\n"));
    }

    #[test]
    fn crlf_and_missing_final_newline() {
        let crlf = F8B.replace('\n', "\r\n");
        let d = desired(&[0, 1, 5], 511, MountStyle::MountEntry);
        let (out, _) = set(&crlf, &d);
        assert!(out.contains(
            "dev4: /dev/nvidia-uvm-tools,mode=0666\r\ndev7: /dev/nvidia5,gid=44,mode=0666\r\n"
        ));
        assert!(!out.replace("\r\n", "").contains('\n'));
        assert_eq!(set(&out, &d), (out.clone(), false));

        let text = "arch: amd64\nlxc.cgroup2.devices.allow: c 195:* rwm";
        let (out, _) = set(text, &desired(&[0], 195, MountStyle::MountEntry));
        assert!(out.starts_with(
            "arch: amd64\nlxc.cgroup2.devices.allow: c 195:* rwm\nlxc.mount.entry: /dev/nvidia0 "
        ));
        assert!(out.ends_with("create=dir\n"));
        let (out, _) = set(&out, &desired(&[], 195, MountStyle::MountEntry));
        assert_eq!(out, "arch: amd64\n");
    }

    #[test]
    fn separators_and_spacing_variants_are_owned() {
        let text = "lxc.mount.entry=/dev/nvidia0 dev/nvidia0 none bind 0 0\n\
                    lxc.mount.entry   =   /dev/nvidiactl dev/nvidiactl none bind\n\
                    lxc.mount.entry:/dev/nvidia-uvm   dev/nvidia-uvm none bind  \n\
                    lxc.cgroup2.devices.allow =  c   195:*   rwm\n\
                    lxc.cgroup2.devices.allow: c 195:0 rw\n\
                    dev9: path=/dev/nvidia-uvm-tools ,uid=0\n\
                    dev11: mode=0666,path=/dev/nvidia-uvm-tools,uid=0\n\
                    dev10:   /dev/nvidia7\n\
                    dev01: /dev/nvidia8\n\
                    lxc.mount.entry: /dev/nvidia01 dev/nvidia1 none bind\n\
                    dev2: /dev/nvidia9snapstate: prepare\n";
        let g = LxcConfig::parse(text).gpu_mounts();
        assert_eq!(g.minors, [0, 7].into());
        assert_eq!(g.control, devn_controls());
        assert_eq!(g.style, Some(MountStyle::MountEntry));
        assert_eq!(g.cgroup_allow_majors, [195].into());
    }

    #[test]
    fn mixed_styles_converge() {
        let text = "dev0: /dev/nvidia5,mode=0666\n\
                    lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n\
                    dev1: /dev/nvidia-caps,mode=0666\n";
        let d = desired(&[0], 500, MountStyle::DevN);
        let (out, changed) = set(text, &d);
        assert!(changed);
        let g = LxcConfig::parse(&out).gpu_mounts();
        assert_eq!(g.minors, [0].into());
        assert_eq!(g.control, all_controls());
        assert_eq!(g.style, Some(MountStyle::MountEntry));
        assert_eq!(g.cgroup_allow_majors, [195, 500].into());
        assert!(!out.contains("dev1:"));
        assert_eq!(set(&out, &d), (out.clone(), false));
    }

    #[test]
    fn pending_delete_and_keys_block_dev_indices() {
        let text = "dev1: /dev/dri/card0\n\n[pve:pending]\ndelete: dev0,!dev2;dev4\ndev3: /dev/null\n\n[s1]\ndev5: /dev/x\n";
        let (out, _) = set(text, &desired(&[0], 500, MountStyle::DevN));
        assert!(
            out.starts_with(
                "dev1: /dev/dri/card0\ndev5: /dev/nvidia0,mode=0666\ndev6: /dev/nvidiactl,mode=0666\n"
            ),
            "{out}"
        );
    }

    #[test]
    fn pve_rewrite_matches_canonical_examples() {
        assert_eq!(pve_rewrite(F8A), F8A_CANON);
        assert_eq!(pve_rewrite(F8A_CANON), F8A_CANON);
        assert_eq!(pve_rewrite(F8B), F8B);
        assert_eq!(
            pve_rewrite(F8C),
            F8C.replace("#Training box: see runbook", "#Training box%3A see runbook")
        );
        assert_eq!(
            pve_rewrite("onboot: yes\nmemory: 0512\n# a: b\n#%3a 100%\n#\n\n[z1]\n#x\r\nlxc.foo: 1\nlxc.rootfs.path: x\ndelete: mp0\nsnapstate: prepare\n[a1]\nlxc.environment.runtime: A=1\nlxc.mount.entry = x y\nlxc.environment.runtime: B=2\ndescription: hi\n"),
            "# a%3A b\n#%3A 100%25\nmemory: 512\nonboot: 1\n\n[a1]\n#hi\nlxc.environment.runtime: A=1\nlxc.environment.runtime: B=2\nlxc.mount.entry: x y\n\n[z1]\n#x%0D\nsnapstate: prepare\n"
        );
    }

    #[test]
    fn edited_files_survive_pve_rewrite() {
        let cases = [
            (F8A, desired(&[1, 6], 509, MountStyle::DevN)),
            (F8A, desired(&[0, 1, 2, 3], 511, MountStyle::DevN)),
            (F8B, desired(&[0, 3], 511, MountStyle::MountEntry)),
            (F8C, desired(&[0, 1, 2], 511, MountStyle::MountEntry)),
            (
                "arch: amd64\n\n[s]\narch: amd64\n",
                desired(&[2], 235, MountStyle::MountEntry),
            ),
            (
                "arch: amd64\n\n[s]\narch: amd64\n",
                desired(&[2], 235, MountStyle::DevN),
            ),
        ];
        for (text, d) in cases {
            let (out, _) = set(text, &d);
            let before = LxcConfig::parse(&out).gpu_mounts();
            let rewritten = pve_rewrite(&out);
            assert_eq!(
                LxcConfig::parse(&rewritten).gpu_mounts(),
                before,
                "{rewritten}"
            );
            assert!(!set(&rewritten, &d).1, "{rewritten}");
        }
    }

    /// A generated line: its text and whether the agent owns it (for the test's uvm major).
    #[derive(Debug, Clone)]
    struct GenLine {
        text: String,
        owned: bool,
    }

    const UVM: u32 = 509;

    fn foreign_line() -> impl Strategy<Value = GenLine> {
        let fixed = prop::sample::select(vec![
            "arch: amd64",
            "hostname: gpu-01",
            "# NVIDIA: passthrough %41",
            "#",
            "",
            "   ",
            " # indented comment",
            "Foo: bar",
            "onboot:",
            "description: legacy text",
            "unknown_key: 1",
            "lxc.cgroup.devices.allow: c 195:* rwm",
            "lxc.cgroup2.devices.allow: c 226:* rwm",
            "lxc.cgroup2.devices.allow: c 195:0 rw",
            "lxc.cgroup2.devices.allow: c 999:* rwm",
            "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir",
            "lxc.Mount.entry: /dev/nvidia0 dev/nvidia0 none bind",
            "lxc.mount.entry: /dev/nvidia01 dev/nvidia01 none bind",
            "lxc.mount.entry : /dev/nvidia0 dev/nvidia0 none bind",
            "lxc.apparmor.profile: unconfined",
            "dev0x: /dev/nvidia0",
            "devx: /dev/nvidia0",
            "mp0: /mnt/x,mp=/x",
            "\u{fc}ber: \u{1f600}",
        ])
        .prop_map(|t| GenLine {
            text: t.to_string(),
            owned: false,
        });
        let other_dev = (
            0u32..20,
            prop::sample::select(vec![
                "/dev/dri/renderD128",
                "/dev/nvidia-caps/nvidia-cap1",
                "/dev/fuse",
            ]),
        )
            .prop_map(|(i, p)| GenLine {
                text: format!("dev{i}: {p},mode=0660"),
                owned: false,
            });
        prop_oneof![4 => fixed, 1 => other_dev]
    }

    fn gpu_path() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u32..8).prop_map(|n| format!("/dev/nvidia{n}")),
            prop::sample::select(ControlDevice::ALL.to_vec()).prop_map(|c| c.path().to_string()),
        ]
    }

    fn owned_line() -> impl Strategy<Value = GenLine> {
        let sep = prop::sample::select(vec![": ", ":", " = ", "=", ":   "]);
        let entry = (
            gpu_path(),
            sep.clone(),
            prop::sample::select(vec!["create=file", "create=dir 0 0"]),
        )
            .prop_map(|(p, s, o)| GenLine {
                text: format!("lxc.mount.entry{s}{p} {} none bind,optional,{o}", &p[1..]),
                owned: true,
            });
        let allow =
            (prop::sample::select(vec![NVIDIA_MAJOR, UVM]), sep).prop_map(|(m, s)| GenLine {
                text: format!("lxc.cgroup2.devices.allow{s}c {m}:* rwm"),
                owned: true,
            });
        let devn = (
            0u32..20,
            gpu_path(),
            any::<bool>(),
            prop::sample::select(vec![
                "",
                ",mode=0666",
                ",gid=44,mode=0660",
                ",uid=0,deny-write=1",
            ]),
        )
            .prop_map(|(i, p, explicit, o)| GenLine {
                text: format!("dev{i}: {}{p}{o}", if explicit { "path=" } else { "" }),
                owned: true,
            });
        prop_oneof![entry, allow, devn]
    }

    fn gen_file() -> impl Strategy<Value = (Vec<GenLine>, bool, bool)> {
        let main = prop::collection::vec(prop_oneof![foreign_line(), owned_line()], 0..25);
        let section = (
            prop::sample::select(vec!["[pve:pending]", "[snap1]", "[before-upgrade]"]),
            prop::collection::vec(prop_oneof![foreign_line(), owned_line()], 0..8),
        )
            .prop_map(|(h, body)| {
                let mut v = vec![GenLine {
                    text: h.to_string(),
                    owned: false,
                }];
                // Everything outside the main section is foreign.
                v.extend(body.into_iter().map(|l| GenLine {
                    text: l.text,
                    owned: false,
                }));
                v
            });
        (
            main,
            prop::collection::vec(section, 0..3),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(mut main, sections, crlf, final_nl)| {
                for s in sections {
                    main.extend(s);
                }
                (main, crlf, final_nl)
            })
    }

    fn join(lines: &[GenLine], crlf: bool, final_nl: bool) -> String {
        let eol = if crlf { "\r\n" } else { "\n" };
        let mut s = lines
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join(eol);
        // An empty last line only exists if it is terminated.
        let last_empty = lines.last().is_some_and(|l| l.text.is_empty());
        if (final_nl || last_empty) && !lines.is_empty() {
            s.push_str(eol);
        }
        s
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn prop_round_trip_any_string(s in "(?s).{0,200}") {
            prop_assert_eq!(LxcConfig::parse(&s).render(), s);
        }

        #[test]
        fn prop_set_gpu_mounts(
            (gen, crlf, final_nl) in gen_file(),
            minors in prop::collection::btree_set(0u32..8, 0..5),
            devn_default in any::<bool>(),
        ) {
            let text = join(&gen, crlf, final_nl);
            prop_assert_eq!(LxcConfig::parse(&text).render(), text.clone());
            let default_style = if devn_default { MountStyle::DevN } else { MountStyle::MountEntry };
            let d = DesiredGpuMounts { minors: minors.clone(), uvm_major: UVM, default_style };
            let mut c = LxcConfig::parse(&text);
            let before = c.gpu_mounts();
            c.set_gpu_mounts(&d);
            let out = c.render();

            // Foreign lines are an identical subsequence, and nothing else but owned lines was added.
            let foreign: Vec<&str> = gen.iter().filter(|l| !l.owned).map(|l| l.text.as_str()).collect();
            prop_assert_eq!(foreign_lines(&out, UVM), foreign.clone());
            prop_assert!(is_subsequence(&foreign, &lines(&out)));
            if crlf && text.contains('\n') {
                prop_assert!(!out.replace("\r\n", "").contains('\n'));
            }

            let g = c.gpu_mounts();
            prop_assert_eq!(&g.minors, &minors);
            if minors.is_empty() {
                prop_assert!(g.control.is_empty());
                prop_assert_eq!(g.style, None);
                prop_assert!(!g.cgroup_allow_majors.contains(&NVIDIA_MAJOR));
                prop_assert!(!g.cgroup_allow_majors.contains(&UVM));
            } else {
                let style = before.style.unwrap_or(default_style);
                prop_assert_eq!(g.style, Some(style));
                let mut want = devn_controls();
                if style == MountStyle::MountEntry {
                    want.insert(ControlDevice::Caps);
                    prop_assert!(g.cgroup_allow_majors.contains(&NVIDIA_MAJOR));
                    prop_assert!(g.cgroup_allow_majors.contains(&UVM));
                } else {
                    prop_assert!(!g.cgroup_allow_majors.contains(&NVIDIA_MAJOR));
                    prop_assert!(!g.cgroup_allow_majors.contains(&UVM));
                }
                prop_assert_eq!(&g.control, &want);
            }

            // Idempotent.
            let mut again = c.clone();
            prop_assert!(!again.set_gpu_mounts(&d));
            prop_assert_eq!(again.render(), out);
        }
    }
}
