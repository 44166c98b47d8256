//! Crash points for the crash-recovery harness: this process kills itself with SIGKILL at a
//! named instant, so a test can prove that the next run heals whatever that instant leaves.
//!
//! Two kinds, both armed only by `gpuplane converge` from the environment:
//! - `GPUPLANE_KILL_AFTER_WRITE=N`: right after the N-th host write (the apply door);
//! - `GPUPLANE_KILL_IN_LOCK=POINT:N`: inside the N-th locked edit of a Proxmox file (a cfs lock
//!   on `/etc/pve/priv/lock/...` or a guest config's flock), at `POINT`:
//!   `held` (the lock taken, nothing written), `temp` (the temporary file written and synced,
//!   not renamed) or `renamed` (the new file in place, the lock not yet released).
//!
//! A leaf: it uses nothing of the crate. Unarmed, every hook is one atomic load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable of the in-lock crash points.
pub const KILL_IN_LOCK_ENV: &str = "GPUPLANE_KILL_IN_LOCK";

/// An instant inside a locked edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockPoint {
    /// The lock is held; nothing is written yet.
    Held,
    /// The temporary file is written and synced; the rename has not happened.
    Temp,
    /// The new file is in place; the lock is still held.
    Renamed,
}

static ARMED: OnceLock<(LockPoint, u64)> = OnceLock::new();
static LOCKS_TAKEN: AtomicU64 = AtomicU64::new(0);
static IN_LOCK: AtomicBool = AtomicBool::new(false);

/// Parses `POINT:N` (`held:1`, `temp:2`, `renamed:1`).
pub fn parse(v: &str) -> Result<(LockPoint, u64), String> {
    let (p, n) = v
        .trim()
        .split_once(':')
        .ok_or_else(|| format!("{KILL_IN_LOCK_ENV}={v:?}: expected POINT:N, e.g. temp:1"))?;
    let point = match p {
        "held" => LockPoint::Held,
        "temp" => LockPoint::Temp,
        "renamed" => LockPoint::Renamed,
        _ => {
            return Err(format!(
                "{KILL_IN_LOCK_ENV}={v:?}: POINT is one of held, temp, renamed"
            ))
        }
    };
    let n: u64 = n
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{KILL_IN_LOCK_ENV}={v:?}: N counts locked edits from 1"))?;
    Ok((point, n))
}

/// Arms the in-lock crash point from the environment (a no-op when the variable is unset).
pub fn arm_from_env() -> Result<(), String> {
    match std::env::var(KILL_IN_LOCK_ENV) {
        Err(_) => Ok(()),
        Ok(v) => {
            let _ = ARMED.set(parse(&v)?);
            Ok(())
        }
    }
}

/// A lock was taken: counts it, and kills the process here when armed for [`LockPoint::Held`].
pub fn lock_taken() {
    LOCKS_TAKEN.fetch_add(1, Ordering::SeqCst);
    IN_LOCK.store(true, Ordering::SeqCst);
    at(LockPoint::Held);
}

/// The lock is about to be released: kills here when armed for [`LockPoint::Renamed`].
pub fn lock_releasing() {
    at(LockPoint::Renamed);
    IN_LOCK.store(false, Ordering::SeqCst);
}

/// A temporary file is ready to be renamed: kills here when armed for [`LockPoint::Temp`] and
/// the write is inside a lock.
pub fn temp_written() {
    if IN_LOCK.load(Ordering::SeqCst) {
        at(LockPoint::Temp);
    }
}

fn at(point: LockPoint) {
    if let Some((p, n)) = ARMED.get() {
        if *p == point && LOCKS_TAKEN.load(Ordering::SeqCst) == *n {
            kill_self();
        }
    }
}

/// Sends SIGKILL to this process (through `kill(1)`: no unsafe code); aborts should that fail.
/// No destructor, no flush, no later write runs, as when the machine or the agent is killed.
pub fn kill_self() -> ! {
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-s", "KILL", &pid])
        .status();
    std::process::abort()
}

#[cfg(test)]
mod tests;
