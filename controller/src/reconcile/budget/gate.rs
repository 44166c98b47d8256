//! The pool's gate in a pass: one decision, made by the converge itself (its first plan is the
//! look ahead; nothing plans a second time to peek), used alike by a partition's reconcile and
//! by the restore on its deletion.
//!
//! A pool member's pass converges without a slot first. When that run's plan would disrupt
//! the host's users, it stops before doing anything ([`Stop::WaitingForSlot`]); the pool is then
//! asked once, for that step, and with a slot the pass converges again. A disruption that only
//! shows after some writes stops the run there, and is asked for the same way.
//!
//! [`Stop::WaitingForSlot`]: crate::converge::Stop::WaitingForSlot

use super::super::host_io::run_converge;
use super::super::{Ctx, Error};
use crate::converge::{Report, Slot};
use crate::desired::Desired;
use crate::pool::{Answer, Ask};
use gpuplane_crds::GpuPartition;
use std::sync::Arc;

/// How a pass went through its pool's gate.
pub enum Gate {
    /// The run: with a slot where it needed one, or needing none, or not in a pool.
    Passed(Box<Report>),
    /// The pool gave no slot: nothing disruptive was done. The pool, the step that needs the
    /// slot and the pool's words (who holds the slots, what paused the pool).
    Denied {
        pool: String,
        step: String,
        why: String,
    },
}

/// Converges `desired` for partition `p`, a member of `pool` (or of none), through the gate;
/// `reason` prefixes the step in the ask ("restore on deletion: ").
pub async fn converge(
    ctx: &Arc<Ctx>,
    p: &GpuPartition,
    pool: Option<&str>,
    desired: Desired,
    block: bool,
    reason: &str,
) -> Result<Gate, Error> {
    let Some(pool) = pool else {
        return Ok(Gate::Passed(Box::new(
            run_converge(ctx, desired, block, None).await?,
        )));
    };
    let slot = Slot {
        pool: pool.to_string(),
    };
    let first = run_converge(ctx, desired.clone(), block, Some(slot)).await?;
    let Some((step, why)) = first
        .slot_needed()
        .map(|(s, w)| (s.to_string(), w.to_string()))
    else {
        return Ok(Gate::Passed(Box::new(first)));
    };
    let ask = Ask::Slot {
        reason: format!("{reason}{step}: {why}"),
    };
    Ok(match super::ask(ctx, pool, p, ask).await? {
        Answer::Granted | Answer::Held => {
            let rest = run_converge(ctx, desired, block, None).await?;
            Gate::Passed(Box::new(first.then(rest)))
        }
        Answer::Denied(why) => Gate::Denied {
            pool: pool.to_string(),
            step,
            why,
        },
        Answer::Recorded => Gate::Passed(Box::new(first)),
    })
}
