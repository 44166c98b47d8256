//! What the kernel tells of a device's health (issue 40), as observed, and the parsers of the
//! kernel's own formats. The judgment (healthy, suspect, unhealthy, lost) is `crate::health`'s;
//! this module only says what was read, so both backends (the real host and the simulated twin)
//! read the same text the same way.
//!
//! Formats (facts with their sources in `docs/health.md`):
//! - `aer_dev_{correctable,nonfatal,fatal}`: lines `<Name> <count>`, the name everything before
//!   the last space, the last line `TOTAL_ERR_COR|TOTAL_ERR_NONFATAL|TOTAL_ERR_FATAL <n>`
//!   (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats);
//! - `current_link_speed` / `max_link_speed`: `"16.0 GT/s PCIe"` (older kernels `"8 GT/s"`),
//!   `current_link_width` / `max_link_width`: a bare decimal;
//! - the NVIDIA driver's Xid line: `NVRM: Xid (PCI:0000:01:00): 79, pid=..., GPU has fallen off
//!   the bus.` — the address has no function; MIG adds ` GPU-I:05` inside the brackets
//!   (open-gpu-kernel-modules, kernel_rc.c); and the probe-time "fallen off the bus" text,
//!   whose first line is `NVRM: The NVIDIA GPU 0000:01:00.0` (osapi.c).
//!
//! Untrusted text: every count saturates, every kept line is cut to [`LINE_MAX`] bytes, and at
//! most [`EVENTS_MAX`] events are kept (the newest).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The longest kernel-log line kept as evidence, in bytes.
pub const LINE_MAX: usize = 240;
/// The most GPU events kept from one read of the kernel log (the newest win).
pub const EVENTS_MAX: usize = 256;
/// The most named AER counters kept per file (the kernel lists 8 to 18).
const AER_NAMES_MAX: usize = 32;

/// A device's health facts: its own, and its upstream port's (errors of a link may be counted
/// at either end, and a conventional PCI function behind a PCIe port has only the port's).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PcieHealth {
    /// The device's own AER counters and link, where the kernel shows them.
    #[serde(default, skip_serializing_if = "PcieCounters::is_empty")]
    pub device: PcieCounters,
    /// The port above it (its parent in the sysfs path), where that is a PCI device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortHealth>,
    /// Config space reads all ones (vendor `0xffff`): the device no longer answers, as a GPU
    /// that has fallen off the bus (sysfs's `vendor` file keeps the cached value).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_responding: bool,
    /// The NVIDIA driver's memory counters (`nvidia-smi`), for a GPU on `nvidia` whose driver
    /// answered; `None` elsewhere (a `vfio-pci` GPU has no driver on the host to ask).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc: Option<EccCounters>,
    /// The kernel offers no reset of this function (sysfs shows no `reset` file: no FLR, no PM
    /// reset, no bus reset it may use alone): a quarantine escalates instead of resetting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_reset: bool,
}

/// What `nvidia-smi --query-gpu=` [`ECC_QUERY`] says of one GPU's memory (`None`: `[N/A]`,
/// the board or mode has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EccCounters {
    /// `ecc.errors.uncorrected.volatile.total`: uncorrectable errors since the driver loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncorrected: Option<u64>,
    /// `ecc.errors.corrected.volatile.total`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrected: Option<u64>,
    /// `remapped_rows.correctable` / `remapped_rows.uncorrectable`: rows remapped for
    /// correctable / uncorrectable errors (a repair that worked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_correctable: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_uncorrectable: Option<u64>,
    /// `remapped_rows.pending`: a remap waits for a GPU reset to take effect.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remap_pending: bool,
    /// `remapped_rows.failure`: a row could not be remapped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remap_failure: bool,
}

/// The fields the agent asks `nvidia-smi --query-gpu=... --format=csv,noheader` for, in order
/// (each one listed by `nvidia-smi --help-query-gpu` of driver 580, `testdata/h100`).
pub const ECC_QUERY: &str = "pci.bus_id,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure";

/// The answer to [`ECC_QUERY`], by PCI address as sysfs spells it (`0000:01:00.0`); lines that
/// do not have the seven fields are skipped, at most 1024 lines read.
pub fn parse_ecc(out: &str) -> BTreeMap<String, EccCounters> {
    let mut m = BTreeMap::new();
    for line in out.lines().take(1024) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let [bus, unc, cor, rc, ru, pending, failure] = f[..] else {
            continue;
        };
        let Some(addr) = nvidia_bus_id(bus) else {
            continue;
        };
        let n = |s: &str| s.parse::<u64>().ok();
        let yes = |s: &str| s.eq_ignore_ascii_case("yes");
        m.insert(
            addr,
            EccCounters {
                uncorrected: n(unc),
                corrected: n(cor),
                remapped_correctable: n(rc),
                remapped_uncorrectable: n(ru),
                remap_pending: yes(pending),
                remap_failure: yes(failure),
            },
        );
    }
    m
}

/// `00000000:01:00.0` (NVML's spelling) → `0000:01:00.0`; `None` for anything that is no PCI
/// address then (the identity and the ECC answers of `nvidia-smi` both go through it).
pub fn nvidia_bus_id(bus: &str) -> Option<String> {
    let bus = bus.to_ascii_lowercase();
    let (dom, rest) = bus.split_once(':')?;
    let dom = dom.get(4..).filter(|_| dom.len() == 8).unwrap_or(dom);
    let addr = format!("{dom}:{rest}");
    function_zero(&addr).filter(|a| *a == addr)
}

impl PcieHealth {
    pub fn is_empty(&self) -> bool {
        self == &PcieHealth::default()
    }
}

/// The upstream port's address and counters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortHealth {
    pub address: String,
    #[serde(flatten)]
    pub counters: PcieCounters,
}

/// AER counters and link state of one PCI function.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PcieCounters {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aer: Option<AerCounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkState>,
}

impl PcieCounters {
    pub fn is_empty(&self) -> bool {
        self.aer.is_none() && self.link.is_none()
    }
}

/// The three `aer_dev_*` files: each file's total, and the counters that are not zero by name
/// (`"fatal: Surprise Down Error"` → 1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AerCounts {
    #[serde(default)]
    pub correctable: u64,
    #[serde(default)]
    pub nonfatal: u64,
    #[serde(default)]
    pub fatal: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub named: BTreeMap<String, u64>,
}

/// The link as trained now against what both ends can do, speeds in MT/s (`16.0 GT/s` = 16000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkState {
    pub speed: u32,
    pub max_speed: u32,
    pub width: u32,
    pub max_width: u32,
}

/// One GPU event from the kernel log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuEvent {
    /// The function's address (`0000:01:00.0`; the driver's Xid line names no function: `.0`).
    pub address: String,
    /// The Xid number; `None` for the probe-time "fallen off the bus" text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
    /// The line as the kernel logged it, cut to [`LINE_MAX`] bytes.
    pub line: String,
}

/// Parses one `aer_dev_*` file: its total and its non-zero named counters, each name prefixed
/// with `prefix` (`"fatal: "`). `None` when no line parses.
pub fn parse_aer_file(text: &str, prefix: &str) -> Option<(u64, BTreeMap<String, u64>)> {
    let mut total = None;
    let mut named = BTreeMap::new();
    for line in text.lines().take(64) {
        let Some((name, n)) = line.trim().rsplit_once(' ') else {
            continue;
        };
        let Ok(n) = n.trim().parse::<u64>() else {
            continue;
        };
        let name = name.trim();
        if name.starts_with("TOTAL_ERR_") {
            total = Some(n);
        } else if n > 0 && named.len() < AER_NAMES_MAX {
            named.insert(format!("{prefix}{}", crate::text::sanitize(name, 48)), n);
        }
    }
    // A kernel without the TOTAL line: the sum of what it lists.
    let total = total.or_else(|| {
        (!named.is_empty()).then(|| named.values().fold(0u64, |a, n| a.saturating_add(*n)))
    });
    total.map(|t| (t, named))
}

/// The three files' counts; `None` when none of them could be read.
pub fn aer_counts(
    correctable: Option<&str>,
    nonfatal: Option<&str>,
    fatal: Option<&str>,
) -> Option<AerCounts> {
    let c = correctable.and_then(|t| parse_aer_file(t, "correctable: "));
    let n = nonfatal.and_then(|t| parse_aer_file(t, "nonfatal: "));
    let f = fatal.and_then(|t| parse_aer_file(t, "fatal: "));
    if c.is_none() && n.is_none() && f.is_none() {
        return None;
    }
    let mut out = AerCounts::default();
    for (slot, got) in [
        (&mut out.correctable, c),
        (&mut out.nonfatal, n),
        (&mut out.fatal, f),
    ] {
        if let Some((t, named)) = got {
            *slot = t;
            out.named.extend(named);
        }
    }
    Some(out)
}

/// `"16.0 GT/s PCIe"`, `"8 GT/s"`, `"2.5 GT/s"` → MT/s; `None` for `"Unknown"` and the rest.
pub fn parse_link_speed(text: &str) -> Option<u32> {
    let num = text.split_whitespace().next()?;
    let (whole, frac) = num.split_once('.').unwrap_or((num, "0"));
    let whole: u32 = whole.parse().ok()?;
    let tenth: u32 = frac.chars().next()?.to_digit(10)?;
    whole.checked_mul(1000)?.checked_add(tenth * 100)
}

/// The four link files; `None` unless all four parse (a conventional PCI device has none).
pub fn link_state(
    speed: Option<&str>,
    max_speed: Option<&str>,
    width: Option<&str>,
    max_width: Option<&str>,
) -> Option<LinkState> {
    Some(LinkState {
        speed: parse_link_speed(speed?)?,
        max_speed: parse_link_speed(max_speed?)?,
        width: width?.trim().parse().ok()?,
        max_width: max_width?.trim().parse().ok()?,
    })
}

/// Whether config space's first bytes read all ones (vendor and device `0xffff`).
pub fn config_all_ones(config: &[u8]) -> bool {
    config.len() >= 4 && config[..4] == [0xff; 4]
}

/// The GPU events of kernel-log lines (newest last; at most [`EVENTS_MAX`], the newest kept).
pub fn parse_gpu_events(log: &str) -> Vec<GpuEvent> {
    let mut out: std::collections::VecDeque<GpuEvent> = Default::default();
    for line in log.lines() {
        if let Some(e) = parse_xid(line).or_else(|| parse_fallen(line)) {
            if out.len() == EVENTS_MAX {
                out.pop_front();
            }
            out.push_back(e);
        }
    }
    out.into()
}

/// `NVRM: Xid (PCI:0000:01:00[ GPU-I:05[ GPU-CI:01]]): 79, ...`.
fn parse_xid(line: &str) -> Option<GpuEvent> {
    let rest = line.split_once("NVRM: Xid (PCI:")?.1;
    let (inside, after) = rest.split_once("):")?;
    let addr = inside.split_whitespace().next()?;
    let xid: u32 = after
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some(GpuEvent {
        address: function_zero(addr)?,
        xid: Some(xid),
        line: crate::text::sanitize(line.trim(), LINE_MAX),
    })
}

/// `NVRM: The NVIDIA GPU 0000:01:00.0` — the first line of the driver's probe-time "has fallen
/// off the bus and is not responding to commands" text; and the runtime `NVRM: GPU
/// 0000:01:00.0: GPU has fallen off the bus.` that follows an Xid 79.
fn parse_fallen(line: &str) -> Option<GpuEvent> {
    let addr = if let Some(rest) = line.split_once("NVRM: The NVIDIA GPU ") {
        rest.1.split_whitespace().next()?
    } else if line.contains("GPU has fallen off the bus") {
        line.split_once("NVRM: GPU ")?.1.split(": ").next()?
    } else {
        return None;
    };
    Some(GpuEvent {
        address: function_zero(addr)?,
        xid: None,
        line: crate::text::sanitize(line.trim(), LINE_MAX),
    })
}

/// `0000:01:00` or `0000:01:00.0` (any case) → `0000:01:00.0`; `None` for anything else.
fn function_zero(addr: &str) -> Option<String> {
    let a = addr.trim().to_ascii_lowercase();
    let base = a.split('.').next()?;
    let parts: Vec<&str> = base.split(':').collect();
    let ok = parts.len() == 3
        && [4, 2, 2]
            .iter()
            .zip(&parts)
            .all(|(n, p)| p.len() == *n && p.chars().all(|c| c.is_ascii_hexdigit()));
    ok.then(|| format!("{base}.{}", a.split('.').nth(1).unwrap_or("0")))
        .filter(|f| f.len() == 12)
}

#[cfg(test)]
mod tests;
