//! One object cannot end the process: a panic while reconciling it (a bug reached by hostile
//! text, an unexpected host answer) becomes an error of that reconcile.
//!
//! kube-runtime's `Controller` polls every reconcile future inside its own stream, so without
//! this a panic unwinds through the controller and ends the agent for every object of the node.
//! Host I/O already runs on blocking threads whose panics come back as join errors, and the host
//! mutex is taken with poison recovery (`host_io.rs`).

use super::Error;
use futures::FutureExt;
use kube::runtime::controller::Action;
use std::future::Future;
use std::panic::AssertUnwindSafe;

/// Runs `fut`, the reconcile of `what`; a panic inside it is returned as [`Error::Panicked`].
///
/// # Guarantees
/// Never unwinds: the caller (the controller's stream) keeps running, and the error goes
/// through the error policy (counted, logged, retried with backoff) like any other.
///
/// # Caveats
/// State the future mutated before panicking is not rolled back; the reconcile is idempotent
/// (observe → plan → apply), so the retry starts from what is observed.
pub async fn catch_panic<F>(what: &str, fut: F) -> Result<Action, Error>
where
    F: Future<Output = Result<Action, Error>>,
{
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            let msg = crate::text::sanitize(&msg, 500);
            tracing::error!(object = %what, "reconcile panicked: {msg}");
            Err(Error::Panicked {
                what: what.to_string(),
                message: msg,
            })
        }
    }
}

#[cfg(test)]
mod tests;
