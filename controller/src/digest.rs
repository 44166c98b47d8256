//! The hash by which the planner and the backends compare a file's content (a unit file, the
//! bootloader's command line file): both sides compute it here, so they cannot disagree on it.

/// SHA-256 of a text, lower-case hex.
pub fn sha256(text: &str) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(text.as_bytes()))
}
