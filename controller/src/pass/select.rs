//! The desired state of the doors that read manifests (the CLI and the agent on manifest
//! files): this host's share of the manifests (`desired::select`), validated against the host
//! as observed, with the pass's reboot gate decided and its watch set installed.

use super::watch::{WatchSet, Watching};
use super::Pass;
use crate::desired::select::{for_host, SelectError};
use crate::desired::Desired;
use crate::host::model::HostState;
use crate::host::{Host, HostError};
use crate::manifests::Manifests;

/// A desired state selected for a pass, and the observation that may start its converge.
pub struct Selected {
    pub desired: Desired,
    /// The observation the GPUs were chosen on, when complete for the converge (`watch.rs`).
    pub seed: Option<HostState>,
}

/// Why a door that reads manifests has nothing to converge to.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Observe(#[from] HostError),
    #[error(transparent)]
    Select(#[from] SelectError),
}

/// Observes `host`, selects its partition and servers from `manifests`, decides the reboot gate
/// (no pool can be asked from these doors), lets the door `add` what only it knows (the file
/// agent: the units of servers gone from the manifests), and installs the watch set.
/// `watching` is the door's memory of what it watched (a fresh one for a one-shot command).
pub fn from_manifests(
    pass: &Pass,
    manifests: &Manifests,
    host: &mut dyn Host,
    watching: &mut Watching,
    gpu: (&str, &str),
    add: impl FnOnce(&mut Desired),
) -> Result<Selected, Refused> {
    let observed = host.observe()?;
    let mut desired = for_host(manifests, &observed, gpu.0, gpu.1)?;
    if let Some(p) = manifests.partition(&desired.partition.name) {
        pass.stamp(p, false, &mut desired.partition);
    }
    add(&mut desired);
    let seed = watching.seed(host, WatchSet::of(&desired), observed);
    Ok(Selected { desired, seed })
}
