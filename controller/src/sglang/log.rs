//! Startup phase from SGLang's log, tolerant of old and new (0.5.23) line formats.

use crate::sglang::StartupPhase;

/// The latest startup phase the log lines show, if any line is recognised.
pub fn phase(lines: &[String]) -> Option<StartupPhase> {
    let mut phase = None;
    for l in lines {
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
            }
        }
    }
    phase
}

#[cfg(test)]
mod tests;
