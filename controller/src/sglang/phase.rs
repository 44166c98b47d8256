//! SGLang's startup phases: what its log says a starting server is doing.
//!
//! Owned here, beside the log parser that recognises them; the host model and the readiness
//! wait only carry the value.

use serde::{Deserialize, Serialize};

/// Startup phases of SGLang, in order, as its log shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum StartupPhase {
    Launching,
    LoadingWeights,
    AllocatingKvCache,
    CapturingCudaGraphs,
    WarmingUp,
    Ready,
}

impl StartupPhase {
    /// The `Progressing` condition reason for this phase.
    pub fn reason(self) -> &'static str {
        match self {
            StartupPhase::Launching => "Launching",
            StartupPhase::LoadingWeights => "LoadingWeights",
            StartupPhase::AllocatingKvCache => "AllocatingKvCache",
            StartupPhase::CapturingCudaGraphs => "CapturingCudaGraphs",
            StartupPhase::WarmingUp => "WarmingUp",
            StartupPhase::Ready => "Ready",
        }
    }
}
