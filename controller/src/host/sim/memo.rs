//! The twin's parsed texts, kept by text: the twin shows its whole state on every `observe`
//! (and before some steps), and its unit files, container configs and `pci.cfg` change far less
//! often than they are read. A text is parsed the first time it is seen; its result is shared
//! until the text changes (the text itself is the key, so no write can leave a stale result).
//!
//! Why here and not in the parsers: the real backend reads its files from disk on every
//! observation and parses what it read; the twin's reading stands in for the host's work,
//! which the agent's own figures should not be made of (docs/BENCHMARKS.md §2).
//!
//! Bounded: a memo that reaches `MAX` texts starts afresh.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const MAX: usize = 64;

/// Parsed results of one kind, by the text they were parsed from.
pub(super) struct Memo<T>(Mutex<HashMap<String, Arc<T>>>);

impl<T> Memo<T> {
    /// The result of `parse(text)`, parsed once per distinct text.
    pub(super) fn get(&self, text: &str, parse: impl FnOnce(&str) -> T) -> Arc<T> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = m.get(text) {
            return v.clone();
        }
        if m.len() >= MAX {
            m.clear();
        }
        let v = Arc::new(parse(text));
        m.insert(text.to_string(), v.clone());
        v
    }
}

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Memo(Mutex::new(HashMap::new()))
    }
}

/// A copy starts empty (it fills again on its first reads).
impl<T> Clone for Memo<T> {
    fn clone(&self) -> Self {
        Memo::default()
    }
}

impl<T> std::fmt::Debug for Memo<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

/// The twin's memos.
#[derive(Debug, Clone, Default)]
pub(super) struct Memos {
    /// Unit files: parsed, or why not.
    pub units: Memo<Result<crate::systemd::unit::ParsedUnit, String>>,
    /// Container configs: their GPU lines and whether the container is unprivileged.
    pub containers: Memo<(crate::proxmox::lxc_conf::GpuMounts, bool)>,
    /// `pci.cfg`: every mapping's entries.
    pub pci_cfg: Memo<std::collections::BTreeMap<String, Vec<crate::proxmox::pci_cfg::MapEntry>>>,
}

impl Memos {
    /// The unit file `text` parsed, or why it does not parse.
    pub fn unit(&self, text: &str) -> Arc<Result<crate::systemd::unit::ParsedUnit, String>> {
        self.units.get(text, |t| {
            crate::systemd::unit::parse(t).map_err(|e| e.to_string())
        })
    }
}

#[cfg(test)]
mod tests;
