//! A GPU's health judged from what the kernel shows of it (issue 40). Pure: the facts come from
//! the host model (`host/health.rs` reads them, on the real host and on the twin alike).
//!
//! The rule, from worst to best (the worst finding decides; every finding is evidence):
//! - **Lost**: config space reads all ones, the driver logged that it fell off the bus (the
//!   probe-time text or Xid 79), or the ledger remembers it and the bus does not show it.
//! - **Unhealthy**: a fatal PCIe error counted at the GPU or its upstream port; an Xid whose
//!   catalogue action is a reset, a reboot or NVIDIA's support; on `nvidia`, an uncorrectable
//!   ECC error since the driver loaded, a row remap pending or failed (`nvidia-smi`).
//! - **Suspect**: non-fatal PCIe errors; [`CORRECTABLE_SUSPECT`] or more correctable ones; the
//!   GPU's own link narrower than both ends can train (its maximum and its port's); an Xid not in
//!   the table.
//! - **Healthy** otherwise. An application's Xid (13, 31, 43, 45, …), an informational one (63,
//!   92) and a link running below its top speed are shown as evidence but judge nothing: a GPU
//!   lowers its link speed when idle (nvidia-smi's help says so), and an application's fault is
//!   the application's.
//!
//! Counters are the kernel's since boot: a GPU repaired without a reboot keeps its count until
//! a person accepts it (the quarantine part of issue 40).

pub mod quarantine;
pub mod xid;

use crate::host::health::{AerCounts, EccCounters, GpuEvent, LinkState};
use crate::host::model::PciDevice;
use gpuplane_crds::{GpuHealthState, GpuRepair};

/// Correctable PCIe errors since boot at which a GPU becomes Suspect (a link that needs replays
/// now and then is normal; a steady stream is not).
pub const CORRECTABLE_SUSPECT: u64 = 100;
/// The most evidence lines kept per GPU (the worst first).
pub const EVIDENCE_MAX: usize = 8;

/// The judgment of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Judgment {
    pub state: GpuHealthState,
    /// The worst repair any finding calls for.
    pub repair: Option<GpuRepair>,
    /// One line per finding, the worst first.
    pub evidence: Vec<String>,
}

/// One thing seen, with what it means.
struct Finding {
    state: GpuHealthState,
    repair: Option<GpuRepair>,
    what: String,
}

impl Finding {
    fn new(state: GpuHealthState, repair: Option<GpuRepair>, what: String) -> Finding {
        Finding {
            state,
            repair,
            what,
        }
    }
}

/// Judges the GPU `dev` (on the bus) with the kernel-log events `events` (every GPU's; those
/// of `dev` are picked by address).
pub fn judge(dev: &PciDevice, events: &[GpuEvent]) -> Judgment {
    let mut found = Vec::new();
    if dev.health.not_responding {
        found.push(Finding::new(
            GpuHealthState::Lost,
            Some(GpuRepair::RebootNode),
            "config space reads all ones: the device does not answer".into(),
        ));
    }
    let port = dev.health.port.as_ref();
    if let Some(a) = &dev.health.device.aer {
        aer(&mut found, a, "");
    }
    if let Some(p) = port {
        if let Some(a) = &p.counters.aer {
            aer(&mut found, a, &format!(" at its port {}", p.address));
        }
    }
    if let Some(l) = &dev.health.device.link {
        link(&mut found, l, port.and_then(|p| p.counters.link.as_ref()));
    }
    if let Some(c) = &dev.health.ecc {
        ecc(&mut found, c);
    }
    // One finding per Xid (or fall off the bus), with how often and its newest line.
    let mut seen: Vec<(Option<u32>, usize, &GpuEvent)> = Vec::new();
    for e in events.iter().filter(|e| e.address == dev.address) {
        match seen.iter_mut().find(|(x, _, _)| *x == e.xid) {
            Some(s) => (s.1, s.2) = (s.1 + 1, e),
            None => seen.push((e.xid, 1, e)),
        }
    }
    for (_, n, e) in seen {
        let mut f = event(e);
        if n > 1 {
            f.what = format!("{} ({n} times, the last shown)", f.what);
        }
        found.push(f);
    }
    summarize(found)
}

/// A GPU the ledger remembers and the bus does not show.
pub fn missing() -> Judgment {
    summarize(vec![Finding::new(
        GpuHealthState::Lost,
        Some(GpuRepair::RebootNode),
        "gone from the bus (the ledger remembers it)".into(),
    )])
}

fn summarize(mut found: Vec<Finding>) -> Judgment {
    found.sort_by_key(|f| std::cmp::Reverse(f.state));
    Judgment {
        state: found.first().map(|f| f.state).unwrap_or_default(),
        repair: found.iter().filter_map(|f| f.repair).max(),
        evidence: found
            .into_iter()
            .take(EVIDENCE_MAX)
            .map(|f| f.what)
            .collect(),
    }
}

fn aer(found: &mut Vec<Finding>, a: &AerCounts, at: &str) {
    let named = |kind: &str| {
        let v: Vec<String> = a
            .named
            .iter()
            .filter(|(k, _)| k.starts_with(kind))
            .map(|(k, n)| format!("{} {n}", &k[kind.len() + 2..]))
            .collect();
        if v.is_empty() {
            String::new()
        } else {
            format!(" ({})", v.join(", "))
        }
    };
    use GpuHealthState::*;
    if a.fatal > 0 {
        let what = format!("{} fatal PCIe error(s){at}{}", a.fatal, named("fatal"));
        found.push(Finding::new(Unhealthy, Some(GpuRepair::ResetGpu), what));
    }
    if a.nonfatal > 0 {
        let what = format!(
            "{} non-fatal PCIe error(s){at}{}",
            a.nonfatal,
            named("nonfatal")
        );
        found.push(Finding::new(Suspect, None, what));
    }
    if a.correctable >= CORRECTABLE_SUSPECT {
        let what = format!(
            "{} correctable PCIe errors{at} (Suspect from {CORRECTABLE_SUSPECT}){}",
            a.correctable,
            named("correctable")
        );
        found.push(Finding::new(Suspect, None, what));
    } else if a.correctable > 0 {
        let what = format!(
            "{} correctable PCIe error(s){at}, below {CORRECTABLE_SUSPECT}: not judged",
            a.correctable
        );
        found.push(Finding::new(Healthy, None, what));
    }
}

/// The GPU's own link against what both ends can train (the lesser of its maximum and its
/// port's: an x16 board in an x8 slot runs as it should). A port's link alone is not judged: a
/// device without link files is no PCIe endpoint, and the port's width then says nothing of it.
fn link(found: &mut Vec<Finding>, l: &LinkState, port: Option<&LinkState>) {
    let max_width = port.map_or(l.max_width, |p| p.max_width.min(l.max_width));
    let max_speed = port.map_or(l.max_speed, |p| p.max_speed.min(l.max_speed));
    if l.width < max_width {
        let what = format!("link x{} of x{max_width}", l.width);
        found.push(Finding::new(GpuHealthState::Suspect, None, what));
    }
    if l.speed < max_speed {
        let gts = |m: u32| format!("{}.{} GT/s", m / 1000, m % 1000 / 100);
        let what = format!(
            "link at {} of {}: not judged (a GPU slows its link when idle)",
            gts(l.speed),
            gts(max_speed)
        );
        found.push(Finding::new(GpuHealthState::Healthy, None, what));
    }
}

/// The NVIDIA driver's memory counters: a row that could not be remapped needs NVIDIA's
/// support; a remap waiting for a reset, or an uncorrectable error since the driver loaded, a
/// reset (NVIDIA's catalogue for Xids 64, 63 and 48: the same events, counted). Corrected
/// errors and rows already remapped are a repair that worked: shown, not judged.
fn ecc(found: &mut Vec<Finding>, c: &EccCounters) {
    use GpuHealthState::*;
    if c.remap_failure {
        let what = "row remapping failed (nvidia-smi remapped_rows.failure)".to_string();
        found.push(Finding::new(
            Unhealthy,
            Some(GpuRepair::ContactSupport),
            what,
        ));
    }
    if c.remap_pending {
        let what = "a row remap is pending until a GPU reset (nvidia-smi remapped_rows.pending)";
        found.push(Finding::new(
            Unhealthy,
            Some(GpuRepair::ResetGpu),
            what.into(),
        ));
    }
    if let Some(n) = c.uncorrected.filter(|n| *n > 0) {
        let what = format!("{n} uncorrectable ECC error(s) since the driver loaded");
        found.push(Finding::new(Unhealthy, Some(GpuRepair::ResetGpu), what));
    }
    let remapped = c
        .remapped_correctable
        .unwrap_or(0)
        .saturating_add(c.remapped_uncorrectable.unwrap_or(0));
    if remapped > 0 {
        let what = format!("{remapped} memory row(s) remapped: not judged (a repair that worked)");
        found.push(Finding::new(Healthy, None, what));
    }
}

fn event(e: &GpuEvent) -> Finding {
    use xid::Class;
    let Some(n) = e.xid else {
        return Finding::new(
            GpuHealthState::Lost,
            Some(GpuRepair::RebootNode),
            format!("fell off the bus: {}", e.line),
        );
    };
    let (class, name) = xid::classify(n, &e.line);
    let (state, repair, says) = match class {
        Class::Informational => (GpuHealthState::Healthy, None, "informational"),
        Class::Application => (GpuHealthState::Healthy, None, "the application's"),
        Class::ResetGpu => (
            GpuHealthState::Unhealthy,
            Some(GpuRepair::ResetGpu),
            "needs a GPU reset",
        ),
        Class::RebootNode if n == 79 => (
            GpuHealthState::Lost,
            Some(GpuRepair::RebootNode),
            "fell off the bus",
        ),
        Class::RebootNode => (
            GpuHealthState::Unhealthy,
            Some(GpuRepair::RebootNode),
            "needs a reboot",
        ),
        Class::ContactSupport => (
            GpuHealthState::Unhealthy,
            Some(GpuRepair::ContactSupport),
            "needs NVIDIA's support",
        ),
        Class::Unknown => (
            GpuHealthState::Suspect,
            None,
            "unknown to gpuplane: look it up",
        ),
    };
    Finding::new(
        state,
        repair,
        format!("Xid {n} {name} ({says}): {}", e.line),
    )
}

#[cfg(test)]
mod tests;
