//! Reading and saving the host description: from YAML text or a file; a host opened from a file
//! writes every step (and every tick of its clock) back to it at once, as a real host keeps its
//! state; in live mode the file is also re-read before each observation.

use super::{SimHost, SimHostFile};
use crate::host::HostError;
use std::collections::BTreeSet;

/// A simulated host kept in a file that others may edit while the agent runs (`gpuplane run`):
/// every observation re-reads it, every step writes it back, and the clock follows wall time.
#[derive(Debug, Clone)]
pub(super) struct Live {
    path: std::path::PathBuf,
    pub(super) speed: u64,
    anchor: std::time::Instant,
    anchor_clock: u64,
    last_saved: String,
}

impl Live {
    /// The host's clock now: the clock read at the anchor, plus wall time since, `speed` times.
    pub(super) fn clock(&self) -> u64 {
        self.anchor_clock + self.anchor.elapsed().as_secs() * self.speed
    }
}

/// Reads a description file's text.
fn read(path: &str) -> Result<String, HostError> {
    std::fs::read_to_string(path).map_err(|e| HostError::Read {
        path: path.into(),
        source: e,
    })
}

/// Parses a description; `origin` names it in errors.
fn parse(text: &str, origin: &str) -> Result<SimHostFile, HostError> {
    serde_yaml::from_str(text).map_err(|e| HostError::Parse {
        path: origin.into(),
        message: e.to_string(),
    })
}

impl SimHost {
    /// Loads a description from YAML text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<SimHost, HostError> {
        let file = parse(text, origin)?;
        let mut seen = BTreeSet::new();
        for d in &file.pci_devices {
            if !seen.insert(d.address.clone()) {
                return Err(HostError::Parse {
                    path: origin.into(),
                    message: format!("device {} is listed twice", d.address),
                });
            }
        }
        Ok(SimHost::new(file))
    }

    /// A host from an already parsed description.
    pub fn new(file: SimHostFile) -> SimHost {
        SimHost {
            file,
            live: None,
            backing: None,
            preflight: vec![],
            memo: Default::default(),
        }
    }

    /// Loads a description file (kept in memory: the file is never written).
    pub fn load(path: &str) -> Result<SimHost, HostError> {
        Self::from_yaml(&read(path)?, path)
    }

    /// Opens a description file as the host itself (`--host sim:FILE`): every step is written
    /// back to the file as soon as it is applied, atomically (temporary file + rename), and so
    /// is the clock after each sleep. A process killed at any moment leaves the file exactly as
    /// the host was after its last completed step, as a real host would be.
    pub fn open(path: &str) -> Result<SimHost, HostError> {
        let mut h = Self::load(path)?;
        h.backing = Some(path.into());
        Ok(h)
    }

    /// Opens `path` as a live host: re-read before each observation, written after each step,
    /// its clock running `speed` times faster than wall time.
    pub fn live(path: &str, speed: u64) -> Result<SimHost, HostError> {
        let text = read(path)?;
        let mut h = Self::from_yaml(&text, path)?;
        h.backing = Some(path.into());
        h.live = Some(Live {
            path: path.into(),
            speed: speed.max(1),
            anchor: std::time::Instant::now(),
            anchor_clock: h.file.clock,
            last_saved: text,
        });
        Ok(h)
    }

    /// Live mode: pick up edits made by others and advance the clock.
    pub(super) fn refresh(&mut self) -> Result<(), HostError> {
        let Some(live) = self.live.as_mut() else {
            return Ok(());
        };
        let path = live.path.to_string_lossy().into_owned();
        let text = read(&path)?;
        if text != live.last_saved {
            let file = parse(&text, &path)?;
            live.anchor_clock = file.clock.max(self.file.clock);
            live.anchor = std::time::Instant::now();
            live.last_saved = text;
            self.file = file;
        }
        self.file.clock = live.clock();
        Ok(())
    }

    /// A host opened from a file: write the state back to it, atomically. Nothing to do for a
    /// host kept in memory.
    pub(super) fn persist(&mut self) -> Result<(), HostError> {
        let Some(path) = self.backing.as_ref() else {
            return Ok(());
        };
        let text =
            serde_yaml::to_string(&self.file).map_err(|e| HostError::Other(e.to_string()))?;
        write_atomically(path, &text)
            .map_err(|e| HostError::Other(format!("cannot write {}: {e}", path.display())))?;
        if let Some(live) = self.live.as_mut() {
            live.last_saved = text;
        }
        Ok(())
    }
}

/// Writes `text` to `path` through the one atomic writer (`crate::atomic_file`): a reader (or a
/// process killed mid-write) sees the old file or the new one, never a mix; at most
/// [`crate::atomic_file::MAX_LEN`], as every file the agent writes.
fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    crate::atomic_file::write(path, text.as_bytes(), 0o644)
        .map(|_| ())
        .map_err(std::io::Error::other)
}
