//! One agent pass for one host, shared by every front door: the CLI's `converge`, the
//! Kubernetes agent (`reconcile/`) and the agent on manifest files (`standalone/`).
//!
//! A pass is, in order:
//!
//! 1. [`Pass::begin`]: the wall clock read once; every decision of the pass takes this time
//!    (the reboot gate's maintenance window, the conditions' `lastTransitionTime`);
//! 2. the door's medium: the desired state from manifests ([`select::from_manifests`], CLI and
//!    file agent) or from the API server's objects (`reconcile/`), and the host observed;
//! 3. [`Pass::reboot_gate`]: whether a reboot may start now;
//! 4. [`watch::WatchSet`]: what the host backend is asked to watch (the servers' units, removed
//!    units, preflight requests), and the seed rule (the observation of step 2 starts the
//!    converge loop when it was made watching the same);
//! 5. the converge through the one door (`converge/`), behind the door's disruption gate
//!    ([`gate`]: a pool's slot asked through a [`gate::SlotPort`] the door provides; the doors
//!    without the API server ask none);
//! 6. [`Pass::outcome`]: the conditions computed from the report, the discovery targets and the
//!    GPU rows ([`Outcome`]), which the door then publishes where its medium keeps them
//!    (status subresources and events, or status files and the journal) and records
//!    ([`Outcome::record`]: host writes by kind, GPUs by slice and driver).
//!
//! A capability that touches every door lands here once; a door keeps only where its input
//! comes from, how a slot is asked, and where statuses, events and targets go.

pub mod gate;
pub mod outcome;
pub mod select;
pub mod watch;

pub use outcome::{GpuRow, Outcome};

use crate::desired::reboot::RebootGate;
use gpuplane_crds::condition::Time;
use gpuplane_crds::GpuPartition;

/// One pass, begun at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// The pass's time: the one wall-clock read of the pass.
    pub now: jiff::Timestamp,
}

impl Pass {
    /// Begins a pass now (the one clock read; `clock.rs`).
    pub fn begin() -> Pass {
        Pass {
            now: crate::clock::timestamp(),
        }
    }

    /// The pass's time as a condition's `lastTransitionTime` takes it.
    pub fn time(&self) -> Time {
        Time(self.now)
    }

    /// Whether partition `p` may reboot its host in this pass (`desired/reboot.rs`); `api`: the
    /// door can ask the partition's pool for a slot (only the Kubernetes agent can).
    pub fn reboot_gate(&self, p: &GpuPartition, api: bool) -> RebootGate {
        RebootGate::for_partition(p, api, self.now)
    }

    /// Gives the resolved partition `dp` of `p` the pass's decisions: the reboot gate
    /// ([`Pass::reboot_gate`]) and the time the planner stamps its records with (a quarantine's
    /// `since`), so every door's plan sees the same.
    pub fn stamp(&self, p: &GpuPartition, api: bool, dp: &mut crate::desired::DesiredPartition) {
        dp.reboot = self.reboot_gate(p, api);
        if let Some(t) = &mut dp.layout {
            t.now = Some(self.now.to_string());
        }
    }
}
