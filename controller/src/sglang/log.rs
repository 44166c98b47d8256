//! Startup phase from SGLang's log, tolerant of old and new (0.5.23) line formats.

use crate::sglang::StartupPhase;

/// The latest startup phase the log lines show, if any line is recognised.
pub fn phase(lines: &[String]) -> Option<StartupPhase> {
    phase_since(lines, &[], None).0
}

/// [`phase`], and when it began: the time (`times[i]` of line `i`, where known) of the first
/// line that reached it. Lines logged before `not_before` (an earlier run of the unit, still in
/// the journal's tail) are left out when their time is known.
pub fn phase_since(
    lines: &[String],
    times: &[Option<u64>],
    not_before: Option<u64>,
) -> (Option<StartupPhase>, Option<u64>) {
    let mut phase = None;
    let mut since = None;
    for (i, l) in lines.iter().enumerate() {
        let at = times.get(i).copied().flatten();
        if let (Some(at), Some(nb)) = (at, not_before) {
            if at < nb {
                continue;
            }
        }
        let p = if l.contains("The server is fired up and ready to roll!") {
            Some(StartupPhase::Ready)
        } else if l.contains("Uvicorn running on") || l.contains("Application startup complete") {
            Some(StartupPhase::WarmingUp)
        } else if l.contains("] Capture ") && l.contains(" begin.") {
            Some(StartupPhase::CapturingCudaGraphs)
        } else if l.contains("KV Cache is allocated") || l.contains("] Load weight end.") {
            Some(StartupPhase::AllocatingKvCache)
        } else if l.contains("] Load weight begin.") {
            Some(StartupPhase::LoadingWeights)
        } else if l.contains("Init torch distributed begin.") || l.contains("Init parallel begin.")
        {
            Some(StartupPhase::Launching)
        } else {
            None
        };
        if let Some(p) = p {
            if phase.is_none_or(|cur| p > cur) {
                phase = Some(p);
                since = at;
            }
        }
    }
    (phase, since)
}

#[cfg(test)]
mod tests;
