//! Waiting for something to do: the manifests changed, a starting server turned ready, or the
//! time to look again came.
//!
//! Changes are seen through inotify (`notify`) the moment a file in the directory is written,
//! and by a cheap fingerprint (names, sizes, modification times) polled every second, which
//! needs no inotify limits and works on every filesystem a `git pull` may write to (NFS, FUSE):
//! events only make the agent look sooner, the fingerprint decides whether anything changed.
//! After an event the agent waits until the directory is quiet for [`SETTLE`] (at most
//! [`SETTLE_MAX`]), so a `git pull` that writes several files is read once, whole.
//!
//! Before each read, [`Watch::until_quiet`] also waits until neither a file in the directory
//! nor the directory itself (a file removed, created, renamed) was modified in the last
//! [`QUIET`] (at most [`QUIET_MAX`]), by their own modification times: a file is written in
//! steps (`cat > f`: truncated, then filled; `git checkout`: removed, then created and filled),
//! and a read between the steps sees it empty or missing — a server's manifest read so is a
//! server removed, whose unit the agent stops. Events alone do not cover it: the writer may pause longer than
//! [`SETTLE`] between the steps (a busy host), and a change made during a pass is found by the
//! fingerprint, with no event to settle on. [`Watch::read_stable`] then reads again when the
//! directory changed during the read itself. The cost: a change is acted on [`QUIET`] after its
//! last write, not at once. Caveat: a writer that holds a file truncated for longer than
//! [`QUIET`] is still read half-written; write such files by rename.

use crate::host::PROBE_EVERY;
use notify::Watcher as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Quiet time after a change event before the directory is read.
pub const SETTLE: Duration = Duration::from_millis(20);
/// Longest wait for quiet after the first event.
pub const SETTLE_MAX: Duration = Duration::from_secs(1);
/// How long the directory's files must be unmodified before they are read.
pub const QUIET: Duration = Duration::from_millis(500);
/// Longest wait for [`QUIET`] (a file whose time is in the future, a writer that never stops).
pub const QUIET_MAX: Duration = Duration::from_secs(3);
/// Most reads of [`Watch::read_stable`] before it settles for the last.
pub const READS: u32 = 5;
/// How often the fingerprint is polled when no event comes.
const POLL: Duration = Duration::from_secs(1);

/// What the directory looked like.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fingerprint(Vec<(String, u64, Option<SystemTime>)>);

/// The fingerprint of `dir`'s manifests (the files `Manifests::load` reads: not `.git/`, not an
/// editor's swap file), or of the one file `dir` names, now.
pub fn fingerprint(dir: &Path) -> Fingerprint {
    let mut v = Vec::new();
    let entries: Vec<PathBuf> = if dir.is_dir() {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| crate::manifests::is_manifest_file(p))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        vec![dir.to_path_buf()]
    };
    for p in entries {
        if let Ok(m) = std::fs::metadata(&p) {
            v.push((p.display().to_string(), m.len(), m.modified().ok()));
        }
    }
    v.sort();
    Fingerprint(v)
}

/// What [`Watch::read_stable`] compares before and after a read: the manifests' fingerprint and
/// the directory's own modification time.
pub type Snapshot = (Fingerprint, Option<SystemTime>);

/// How long ago the most recent of `times` was (zero for a time in the future); `None` for none.
fn youngest_age(times: impl Iterator<Item = SystemTime>) -> Option<Duration> {
    let now = crate::clock::system_time();
    times
        .map(|t| now.duration_since(t).unwrap_or(Duration::ZERO))
        .min()
}

/// Why [`Watch::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The manifests differ from what was last read.
    Changed,
    /// A probe said yes: a starting server answers, or the GPUs' health facts changed.
    Ready,
    /// `wait` passed.
    Timeout,
    /// [`Stopper::stop`] was called.
    Stopped,
}

/// The manifests' directory, watched.
pub struct Watch {
    dir: PathBuf,
    /// The directory watched: `dir`, or the parent of the one file `dir` names.
    target: PathBuf,
    seen: Fingerprint,
    /// The inotify watcher, kept alive; `None` when inotify is not available (then the poll
    /// alone).
    _watcher: Option<notify::RecommendedWatcher>,
    /// Wake-ups: the watcher's change events and [`Stopper::stop`]'s.
    wakes: Receiver<()>,
    /// Kept so that `wakes` never disconnects.
    tx: Sender<()>,
    stop: Arc<AtomicBool>,
}

/// Asks a [`Watch`] (and the loop that waits on it) to stop; `Send`, for a signal handler.
#[derive(Clone)]
pub struct Stopper {
    stop: Arc<AtomicBool>,
    tx: Sender<()>,
}

impl Stopper {
    /// From now on [`Watch::stopped`] is true, and a [`Watch::wait`] in progress returns
    /// [`Wake::Stopped`] at once.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.tx.send(());
    }
}

impl Watch {
    /// Starts watching `dir` (a directory, or one file: then its parent is watched, since
    /// editors and `git` replace files by renaming). What is there now counts as seen.
    pub fn new(dir: &Path) -> Watch {
        let target = if dir.is_dir() {
            dir.to_path_buf()
        } else {
            dir.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()
        };
        let (tx, wakes) = channel();
        let events = tx.clone();
        let watcher = notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
            let _ = events.send(());
        })
        .and_then(|mut w| {
            w.watch(&target, notify::RecursiveMode::NonRecursive)?;
            Ok(w)
        });
        let watcher = match watcher {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(
                    "no change events for {} ({e}); polling it every second",
                    target.display()
                );
                None
            }
        };
        Watch {
            dir: dir.to_path_buf(),
            target,
            seen: fingerprint(dir),
            _watcher: watcher,
            wakes,
            tx,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// What stops this watch (from another thread: a signal handler).
    pub fn stopper(&self) -> Stopper {
        Stopper {
            stop: self.stop.clone(),
            tx: self.tx.clone(),
        }
    }

    /// Whether [`Stopper::stop`] was called.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Reads the manifests with `read` once they are quiet ([`Watch::until_quiet`]) and records
    /// what was read as seen (a change made while they are applied is seen afterwards). A read
    /// during which the directory changed (its fingerprint or its own time differ before and
    /// after) is done again, up to [`READS`] times: what is returned was read from files that
    /// did not change under the read, as far as sizes and times can tell.
    pub fn read_stable<T>(&mut self, mut read: impl FnMut() -> T) -> T {
        let mut tries = 1;
        loop {
            let before = self.until_quiet();
            let t = read();
            let after = self.snapshot();
            let stable = before == after;
            self.seen = before.0;
            if stable || tries >= READS {
                return t;
            }
            tracing::debug!("the manifests changed while they were read; reading them again");
            tries += 1;
        }
    }

    /// The manifests' fingerprint and the watched directory's own modification time (entries
    /// added, removed, renamed).
    fn snapshot(&self) -> Snapshot {
        let dir = std::fs::metadata(&self.target)
            .and_then(|m| m.modified())
            .ok();
        (fingerprint(&self.dir), dir)
    }

    /// Sleeps until neither a file of the manifests nor the directory was modified in the last
    /// [`QUIET`], at most [`QUIET_MAX`] (then it logs why and returns: the read goes ahead).
    /// Returns the snapshot it judged by.
    pub fn until_quiet(&self) -> Snapshot {
        let end = Instant::now() + QUIET_MAX;
        loop {
            // The directory's own time too: a file removed and created again (`git checkout`
            // replaces a changed file so) is missing meanwhile, and a missing file has no time.
            let snap = self.snapshot();
            let (files, dir) = &snap;
            let times = files.0.iter().filter_map(|(_, _, t)| *t).chain(*dir);
            let Some(age) = youngest_age(times) else {
                return snap;
            };
            if age >= QUIET {
                return snap;
            }
            let now = Instant::now();
            if now >= end {
                tracing::warn!(
                    "{} keeps changing (a file modified {}ms ago); reading it anyway",
                    self.dir.display(),
                    age.as_millis()
                );
                return snap;
            }
            std::thread::sleep((QUIET - age).min(end - now));
        }
    }

    /// Sleeps until the manifests change, `probe` (asked every [`PROBE_EVERY`], when given)
    /// says yes, or `wait` passes.
    pub fn wait(&mut self, wait: Duration, probe: Option<&mut dyn FnMut() -> bool>) -> Wake {
        self.wait_every(wait, probe, PROBE_EVERY)
    }

    /// [`Watch::wait`] with the probe asked every `every` (and the manifests looked at no less
    /// often than every [`POLL`]).
    pub fn wait_every(
        &mut self,
        wait: Duration,
        mut probe: Option<&mut dyn FnMut() -> bool>,
        every: Duration,
    ) -> Wake {
        let end = Instant::now() + wait;
        let mut next_probe = Instant::now();
        loop {
            if self.stopped() {
                return Wake::Stopped;
            }
            if fingerprint(&self.dir) != self.seen {
                return Wake::Changed;
            }
            let now = Instant::now();
            if now >= end {
                return Wake::Timeout;
            }
            if let Some(p) = probe.as_mut() {
                if now >= next_probe {
                    if p() {
                        return Wake::Ready;
                    }
                    next_probe = Instant::now() + every;
                }
            }
            let until = if probe.is_some() {
                next_probe.min(now + POLL).min(end)
            } else {
                (now + POLL).min(end)
            };
            let tick = until.saturating_duration_since(Instant::now());
            // Without inotify only a stop arrives here: then this is the poll's sleep.
            if self.wakes.recv_timeout(tick).is_ok() && !self.stopped() {
                settle(&self.wakes);
            }
        }
    }
}

/// Waits until no event came for [`SETTLE`], at most [`SETTLE_MAX`].
fn settle(rx: &Receiver<()>) {
    let end = Instant::now() + SETTLE_MAX;
    while Instant::now() < end && rx.recv_timeout(SETTLE).is_ok() {}
}

#[cfg(test)]
mod tests;
