//! The disruption gate of a pass: one decision, made by the converge itself (its first plan is
//! the look ahead; nothing plans a second time to peek), through a port the door provides.
//!
//! A pool member's pass converges holding disruptions first. When that run's plan would
//! disrupt the host's users, it stops before doing anything (`Stop::WaitingForSlot`); the pool
//! is then asked once, for that step, and with a slot the pass converges again. A disruption
//! that only shows after some writes stops the run there, and is asked for the same way.
//!
//! Only the Kubernetes agent has a port (`reconcile/budget/`: the pool's status in the API
//! server), used alike by a partition's reconcile and by the restore on its deletion; the CLI
//! and the agent on manifest files converge one host and ask no pool.

use crate::converge::{Report, Slot};
use crate::pool::Answer;
use std::future::Future;

/// How a door converges its host and asks its pool for a slot.
pub trait SlotPort {
    type Error;
    /// The pool the pass's partition is a member of; `None`: no gate.
    fn pool(&self) -> Option<&str>;
    /// Converges the host; with `hold`, stops before any disruptive step.
    fn converge(
        &mut self,
        hold: Option<Slot>,
    ) -> impl Future<Output = Result<Report, Self::Error>> + Send;
    /// Asks the pool for a slot, saying why (`step: why`).
    fn ask(&mut self, reason: String) -> impl Future<Output = Result<Answer, Self::Error>> + Send;
}

/// How a pass went through its pool's gate.
pub enum Gated {
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

/// Converges through the gate of `port`; `reason` prefixes the step in the ask ("restore on
/// deletion: ").
pub async fn through<P: SlotPort + Send>(port: &mut P, reason: &str) -> Result<Gated, P::Error> {
    let Some(pool) = port.pool().map(str::to_string) else {
        return Ok(Gated::Passed(Box::new(port.converge(None).await?)));
    };
    let hold = Slot { pool: pool.clone() };
    let first = port.converge(Some(hold)).await?;
    let Some((step, why)) = first
        .slot_needed()
        .map(|(s, w)| (s.to_string(), w.to_string()))
    else {
        return Ok(Gated::Passed(Box::new(first)));
    };
    Ok(match port.ask(format!("{reason}{step}: {why}")).await? {
        Answer::Granted | Answer::Held => {
            let rest = port.converge(None).await?;
            Gated::Passed(Box::new(first.then(rest)))
        }
        Answer::Denied(why) => Gated::Denied { pool, step, why },
        Answer::Recorded => Gated::Passed(Box::new(first)),
    })
}

#[cfg(test)]
mod tests;
