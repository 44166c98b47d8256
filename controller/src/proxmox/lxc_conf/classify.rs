//! Which lines of the main section are the agent's: GPU device lines in either style
//! ([`GpuLine::Device`]) and `lxc.cgroup2.devices.allow` lines ([`GpuLine::Allow`]), recognised
//! on top of PVE's own line grammar so that what counts as "a GPU line" is what PVE sees too.

use super::pve_line::{parse_pve_line, PveLine};
use super::{ControlDevice, MountStyle, MAX_DEV_INDEX};
use crate::proxmox::lines::is_ws;

/// A GPU device node we manage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum GpuDev {
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

    pub(super) fn path(self) -> String {
        match self {
            GpuDev::Minor(n) => format!("/dev/nvidia{n}"),
            GpuDev::Control(c) => c.path().to_string(),
        }
    }
}

/// One GPU-related line of the main section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GpuLine {
    /// A device line in either style. `options` is the non-path part of a `devN` value.
    Device {
        dev: GpuDev,
        style: MountStyle,
        options: Option<String>,
    },
    /// `lxc.cgroup2.devices.allow: c M:* rwm` (`minor: None`) or `c M:N rwm`, any major.
    Allow { major: u32, minor: Option<u32> },
}

/// Classifies one main-section line (without its `\n`) as a GPU line, following PVE's rule
/// order so that e.g. a `snapstate:`-suffixed line is not mistaken for a `devN` line.
pub(super) fn classify_gpu_line(line: &str) -> Option<GpuLine> {
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
                    let (major, minor) = majmin.split_once(':')?;
                    let minor = match minor {
                        "*" => None,
                        n => Some(parse_canonical_u32(n)?),
                    };
                    parse_canonical_u32(major).map(|major| GpuLine::Allow { major, minor })
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
pub(super) fn dev_index(key: &str) -> Option<u32> {
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
