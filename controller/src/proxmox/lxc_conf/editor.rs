//! The editor: [`LxcConfig`]'s parse, render, read and edit methods, and the text of the lines
//! it adds. Every original line is kept byte for byte; only the agent's lines (see
//! `classify.rs`) are inserted or removed.

use std::collections::BTreeSet;

use super::classify::{classify_gpu_line, dev_index, GpuDev, GpuLine};
use super::pve_line::{parse_pve_line, PveLine};
use super::{
    ControlDevice, DesiredGpuMounts, GpuMounts, LxcConfig, MountStyle, DEFAULT_DEVN_OPTIONS,
    MAX_DEV_INDEX, NVIDIACTL_MINOR, NVIDIA_MAJOR,
};
use crate::proxmox::lines::{content, first_line_ending, is_blank, is_ws, split_lines, terminate};

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
                GpuLine::Allow { major, minor } => {
                    out.cgroup_allow_majors.insert(major);
                    if minor.is_none() {
                        out.cgroup_allow_any_minor.insert(major);
                    }
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
    /// - Allow lines are wanted iff the result still has a GPU `lxc.mount.entry` line; otherwise
    ///   they are removed (stale grants). The wanted ones: `c 195:N rwm` for each wanted minor,
    ///   `c 195:255 rwm` (nvidiactl) and `c <uvm_major>:* rwm` (nvidia-uvm and -tools: one
    ///   device for all GPUs). Any other allow line for those two majors (`c 195:* rwm`, a
    ///   removed GPU's minor) is removed. Allow lines for other majors are foreign and kept.
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
        let style = self.gpu_mounts().style.unwrap_or(desired.default_style);
        let wanted = wanted_devices(desired, style);
        let mut remove: BTreeSet<usize> = BTreeSet::new();
        let (present, kept_entry_line) = keep_wanted_devices(&gpu_lines, &wanted, &mut remove);
        let missing: Vec<GpuDev> = wanted.difference(&present).copied().collect();
        let new_devs = self.new_device_lines(style, &missing, &gpu_lines);
        // A GPU mount entry (kept or added) needs its allow lines; devN lines need none.
        let adds_entry_line = style == MountStyle::MountEntry && !missing.is_empty();
        let wanted_allow = wanted_allows(desired, kept_entry_line || adds_entry_line);
        let mut new_lines =
            keep_wanted_allows(&gpu_lines, &owned_majors, &wanted_allow, &mut remove);
        new_lines.extend(new_devs);
        if remove.is_empty() && new_lines.is_empty() {
            return false;
        }
        let is_owned = |l: &GpuLine| match l {
            GpuLine::Device { .. } => true,
            GpuLine::Allow { major, .. } => owned_majors.contains(major),
        };
        let insert_at = match gpu_lines.iter().rfind(|(_, l)| is_owned(l)) {
            Some((idx, _)) => idx + 1,
            None => (0..self.main_end())
                .rev()
                .find(|&i| !is_blank(content(&self.lines[i])))
                .map_or(0, |i| i + 1),
        };
        self.splice(insert_at, &remove, &new_lines);
        true
    }

    /// The lines for the `missing` devices in `style`; a `devN` line takes the lowest index
    /// free in the main section and `[pve:pending]` (none left: the device is not added).
    fn new_device_lines(
        &self,
        style: MountStyle,
        missing: &[GpuDev],
        gpu_lines: &[(usize, GpuLine)],
    ) -> Vec<String> {
        if style == MountStyle::MountEntry {
            return missing.iter().map(|d| mount_entry_line(*d)).collect();
        }
        let mut used = self.used_dev_indices();
        let mut out = vec![];
        for dev in missing {
            let Some(index) = (0..=MAX_DEV_INDEX).find(|i| !used.contains(i)) else {
                break;
            };
            used.insert(index);
            let options = devn_template(gpu_lines, *dev);
            out.push(devn_line(index, *dev, options.as_deref()));
        }
        out
    }

    /// Removes the lines at `remove` and puts `new_lines` at `insert_at` (an index of the lines
    /// as they were), ending them as the line before it does.
    fn splice(&mut self, insert_at: usize, remove: &BTreeSet<usize>, new_lines: &[String]) {
        let eol = self.eol_for_insert(insert_at);
        let mut out: Vec<String> = Vec::with_capacity(self.lines.len() + new_lines.len());
        for (idx, line) in self.lines.iter().enumerate() {
            if idx == insert_at {
                push_new_lines(&mut out, new_lines, &eol);
            }
            if !remove.contains(&idx) {
                out.push(line.clone());
            }
        }
        if insert_at >= self.lines.len() {
            push_new_lines(&mut out, new_lines, &eol);
        }
        self.lines = out;
    }

    /// Whether the container is unprivileged: `unprivileged: 1` in the main section (PVE's
    /// `unprivileged` option is a boolean that defaults to 0, so a config without the key is a
    /// privileged container, whose root is the host's root).
    pub fn unprivileged(&self) -> bool {
        self.lines[..self.main_end()].iter().any(|l| {
            matches!(parse_pve_line(content(l)), PveLine::Normal { key: "unprivileged", value }
                if ["1", "yes", "on", "true"].iter().any(|t| value.eq_ignore_ascii_case(t)))
        })
    }

    /// Index of the first section header (end of the main section), or the line count.
    pub(super) fn main_end(&self) -> usize {
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

/// The devices a container with `desired.minors` needs in `style`: the GPUs and the control
/// devices (`nvidia-caps` only as a mount entry: a `devN` of a directory stops the container);
/// none without GPUs.
fn wanted_devices(desired: &DesiredGpuMounts, style: MountStyle) -> BTreeSet<GpuDev> {
    let mut wanted: BTreeSet<GpuDev> = BTreeSet::new();
    if desired.minors.is_empty() {
        return wanted;
    }
    wanted.extend(desired.minors.iter().map(|&n| GpuDev::Minor(n)));
    let control = [
        ControlDevice::Ctl,
        ControlDevice::Uvm,
        ControlDevice::UvmTools,
    ];
    wanted.extend(control.map(GpuDev::Control));
    if style == MountStyle::MountEntry {
        wanted.insert(GpuDev::Control(ControlDevice::Caps));
    }
    wanted
}

/// Marks every device line that is not wanted for removal; returns the wanted devices already
/// there and whether a kept one is a mount entry.
fn keep_wanted_devices(
    gpu_lines: &[(usize, GpuLine)],
    wanted: &BTreeSet<GpuDev>,
    remove: &mut BTreeSet<usize>,
) -> (BTreeSet<GpuDev>, bool) {
    let mut present = BTreeSet::new();
    let mut kept_entry_line = false;
    for (idx, line) in gpu_lines {
        if let GpuLine::Device { dev, style, .. } = line {
            let devn_caps =
                *dev == GpuDev::Control(ControlDevice::Caps) && *style == MountStyle::DevN;
            if wanted.contains(dev) && !devn_caps {
                present.insert(*dev);
                kept_entry_line |= *style == MountStyle::MountEntry;
            } else {
                remove.insert(*idx);
            }
        }
    }
    (present, kept_entry_line)
}

/// The allow lines wanted (`(major, minor)`, `None` = every minor), when any are: the GPUs'
/// minors ascending, nvidiactl, then the uvm major.
fn wanted_allows(desired: &DesiredGpuMounts, any: bool) -> Vec<(u32, Option<u32>)> {
    if !any {
        return vec![];
    }
    desired
        .minors
        .iter()
        .map(|&n| (NVIDIA_MAJOR, Some(n)))
        .chain([
            (NVIDIA_MAJOR, Some(NVIDIACTL_MINOR)),
            (desired.uvm_major, None),
        ])
        .collect()
}

/// Marks the allow lines of our majors that are not wanted for removal (another major's are
/// foreign and kept); returns the wanted ones missing, as lines, in the wanted order.
fn keep_wanted_allows(
    gpu_lines: &[(usize, GpuLine)],
    owned_majors: &BTreeSet<u32>,
    wanted: &[(u32, Option<u32>)],
    remove: &mut BTreeSet<usize>,
) -> Vec<String> {
    let mut present: BTreeSet<(u32, Option<u32>)> = BTreeSet::new();
    for (idx, line) in gpu_lines {
        if let GpuLine::Allow { major, minor } = line {
            if !owned_majors.contains(major) {
                continue;
            }
            if wanted.contains(&(*major, *minor)) {
                present.insert((*major, *minor));
            } else {
                remove.insert(*idx);
            }
        }
    }
    wanted
        .iter()
        .filter(|a| !present.contains(a))
        .map(|(major, minor)| {
            let minor = minor.map_or("*".to_string(), |n| n.to_string());
            format!("lxc.cgroup2.devices.allow: c {major}:{minor} rwm")
        })
        .collect()
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
