//! What the host backend watches during a pass, and when the door's own observation may start
//! the converge loop (the seed rule).
//!
//! A backend reads a unit's state, and a server's preflight facts, only for what it was asked
//! to watch (`Host::watch_units`, `Host::watch_preflight`). An observation is therefore complete
//! for a converge only when it was made watching exactly what that converge needs.

use crate::desired::Desired;
use crate::host::model::{HostState, PreflightRequest, UnitRef};
use crate::host::Host;

/// The units and preflight requests one desired state needs watched.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchSet {
    /// The servers' units, then the removed servers' units (to see them stopped and gone).
    pub units: Vec<UnitRef>,
    pub preflight: Vec<PreflightRequest>,
}

impl WatchSet {
    /// What `desired` needs watched.
    pub fn of(desired: &Desired) -> WatchSet {
        WatchSet {
            units: desired
                .servers
                .iter()
                .map(|s| s.unit.clone())
                .chain(desired.removed_units.iter().cloned())
                .collect(),
            preflight: crate::desired::preflight::requests(desired),
        }
    }

    /// Asks `host` to watch this set (replacing what it watched).
    pub fn install(&self, host: &mut dyn Host) {
        host.watch_units(&self.units);
        host.watch_preflight(&self.preflight);
    }
}

/// What a door's host was last asked to watch: the seed rule's memory across passes.
#[derive(Debug, Clone, Default)]
pub struct Watching {
    last: WatchSet,
}

impl Watching {
    /// Installs `next` on `host` and returns `observed` — the observation the door made just
    /// before, under what was watched then — when it is complete for a converge of `next` (the
    /// sets are equal), so the loop's first full observation is saved. A fresh door watched
    /// nothing: its observation seeds only a desired state that needs nothing watched.
    pub fn seed(
        &mut self,
        host: &mut dyn Host,
        next: WatchSet,
        observed: HostState,
    ) -> Option<HostState> {
        let seed = (self.last == next).then_some(observed);
        next.install(host);
        self.last = next;
        seed
    }
}

#[cfg(test)]
mod tests;
