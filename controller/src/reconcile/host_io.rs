//! The reconcilers' calls into the host: observe and converge, on a blocking thread under the
//! host mutex (a host backend is synchronous; one converge at a time per node).

use super::{Ctx, Error};
use crate::converge::{converge_with, Options, Report};
use crate::desired::Desired;
use crate::door::Door;
use crate::host::model::HostState;
use crate::pass::watch::WatchSet;
use std::sync::Arc;

/// Reads the host (no writes).
pub(super) async fn observe(ctx: &Arc<Ctx>) -> Result<HostState, Error> {
    let host = ctx.host.clone();
    tokio::task::spawn_blocking(move || host.lock().unwrap_or_else(|e| e.into_inner()).observe())
        .await?
        .map_err(Error::Host)
}

/// Converges the host to `desired` through the one door. With `block`, waits until servers are
/// Ready; without, returns while they start (the reconciler looks again after the poll interval).
/// With `hold` (a pool member without a disruption slot: the slot it lacks) the run stops
/// before any disruptive step (`converge::Stop::WaitingForSlot`; `budget/gate.rs` asks for it).
pub(super) async fn run_converge(
    ctx: &Arc<Ctx>,
    desired: Desired,
    block: bool,
    hold: Option<crate::converge::Slot>,
) -> Result<Report, Error> {
    let c = ctx.clone();
    tokio::task::spawn_blocking(move || {
        let mut host = c.host.lock().unwrap_or_else(|e| e.into_inner());
        // Observed afresh by the converge: no seed (`pass::watch`).
        WatchSet::of(&desired).install(host.as_mut());
        let mut progress = c.progress.lock().unwrap_or_else(|e| e.into_inner());
        let opts = Options {
            poll_seconds: c.opts.poll_interval.as_secs().max(1),
            block_on_ready: block,
            hold_disruptions: hold,
            ..Options::default()
        };
        let mut door = Door::new(host.as_mut());
        converge_with(&desired, &mut door, &opts, &mut progress)
    })
    .await
    .map_err(Error::Task)
}
