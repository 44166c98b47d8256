//! The GPU ledger's file under the agent's state directory (`host/ledger.rs` says what it
//! holds and why): read on every look, written only by `Step::WriteLedger`, atomically (a
//! temporary file renamed over it, as every host write), so a kill leaves the old ledger or the
//! new one, never half of one.

use super::error::LocalError;
use crate::host::ledger::{Ledger, FILE};
use std::io::Read;
use std::path::Path;

/// The most the file may hold (a ledger of 256 GPUs is some 100 KiB).
const MAX_BYTES: u64 = 1024 * 1024;

/// The stored ledger; `Err` with a note for a person when the file is there but unreadable (the
/// guard then sees no ledger, and the next write replaces it).
pub fn load(state_dir: &Path) -> Result<Option<Ledger>, String> {
    let p = state_dir.join(FILE);
    let f = match std::fs::File::open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read the GPU ledger {}: {e}", p.display())),
    };
    let mut text = String::new();
    f.take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the GPU ledger {}: {e}", p.display()))?;
    if text.len() as u64 > MAX_BYTES {
        return Err(format!(
            "the GPU ledger {} is larger than {MAX_BYTES} bytes; ignored",
            p.display()
        ));
    }
    Ledger::parse(&text).map(Some).ok_or_else(|| {
        format!(
            "the GPU ledger {} is not a ledger; ignored (the agent writes a new one)",
            p.display()
        )
    })
}

/// Writes `ledger` over the stored one.
pub fn store(state_dir: &Path, ledger: &Ledger) -> Result<Vec<super::files::Leftover>, LocalError> {
    std::fs::create_dir_all(state_dir)
        .map_err(|e| LocalError::io("cannot create", state_dir, e))?;
    super::files::write_atomic(&state_dir.join(FILE), &ledger.render())
}
