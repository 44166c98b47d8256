//! SIGTERM and SIGINT: the agent on manifest files stops between passes, never inside one.
//!
//! systemd stops `gpuplane.service` with SIGTERM (at shutdown, `systemctl stop`, a package
//! upgrade's restart), and that includes the shutdown the agent itself asked for with
//! `reboot: Auto`: the pass that ran `systemctl reboot` is still writing the status that says
//! `Rebooting`. With the signal's default action that status was lost with the process. Here
//! the first signal lets the pass in progress finish — its host writes and its status files —
//! and the loop end (exit 0); a second signal ends the process at once (exit 128 + signal), as
//! systemd's SIGKILL after `TimeoutStopSec` would. Every host write is crash-safe anyway
//! (`door`, `host/local/files.rs`): this is about the truth the status tells, not safety.

use super::watch::Stopper;
use tokio::signal::unix::{signal, SignalKind};

/// Waits for SIGTERM or SIGINT (on the runtime it is spawned on) and stops the loop; a second
/// one exits the process.
pub async fn stop_on_signal(stopper: Stopper) {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot handle SIGTERM/SIGINT: a stop ends the agent inside its pass");
        return;
    };
    let first = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    tracing::info!("{first}: stopping once the pass in progress is done (its host writes and status); a second signal stops at once");
    stopper.stop();
    let (second, code) = tokio::select! {
        _ = term.recv() => ("SIGTERM", 128 + libc::SIGTERM),
        _ = int.recv() => ("SIGINT", 128 + libc::SIGINT),
    };
    tracing::warn!("{second} again: stopping now, inside the pass");
    std::process::exit(code);
}
