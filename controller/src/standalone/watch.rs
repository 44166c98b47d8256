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
//! Before each read, [`Watch::until_quiet`] waits until every writer has **finished**, as
//! inotify tells it (`Writes`): a manifest created or modified is being written until it is
//! closed after writing (`IN_CLOSE_WRITE`) or renamed into place (`IN_MOVED_TO`); a read waits
//! for that, however long the writer pauses (at most [`WRITE_MAX`]). A finished write is read
//! [`SETTLE`] after its last event, not after a fixed quiet time. A **removal** is the one
//! change that is not final at once: `git checkout` replaces a changed file by removing it and
//! creating it again, and a manifest read in between is a server removed, whose unit the agent
//! would stop — so a read waits [`QUIET`] after a removal for the file to come back. Where
//! inotify is not available (or lost events: a queue overflow), the fallback is the old rule:
//! no file nor the directory modified in the last [`QUIET`] (at most [`QUIET_MAX`]), by their
//! modification times. [`Watch::read_stable`] then reads again when the directory changed
//! during the read itself.
//!
//! Safe ways to write the manifests (docs/install.md, "On a Proxmox host without Kubernetes"): write a file and close
//! it (`cat >`, an editor's save, `cp`), rename a finished file into place, `git pull`/`git
//! checkout`, or swap a symlinked directory in one rename (git-sync): the agent reads a file
//! only once its writer closed it. Caveat: a writer that keeps the file open and never writes
//! again is read after [`WRITE_MAX`].

use crate::host::PROBE_EVERY;
use notify::Watcher as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Quiet time after a change event before the directory is read.
pub const SETTLE: Duration = Duration::from_millis(10);
/// How long a read waits at least for the events of writes already made to arrive from
/// inotify (they travel through the watcher's thread: well under a millisecond).
pub const IN_FLIGHT: Duration = Duration::from_millis(5);
/// Longest wait for quiet after the first event.
pub const SETTLE_MAX: Duration = Duration::from_secs(1);
/// How long the directory's files must be unmodified before they are read, where inotify does
/// not tell when a writer finished; with inotify, how long a removed manifest may take to come
/// back (`git checkout`'s remove-then-create).
pub const QUIET: Duration = Duration::from_millis(500);
/// Longest wait for a writer that keeps a manifest open after modifying it.
pub const WRITE_MAX: Duration = Duration::from_secs(30);
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
    // Where a symlinked directory leads: a swap to files of the same names, sizes and times
    // (written within one clock tick) is a change too.
    if link_parent(dir).is_some() {
        if let Ok(to) = std::fs::canonicalize(dir) {
            v.push((format!("-> {}", to.display()), 0, None));
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

/// What inotify told of the writers since the last read: the manifests being written (created
/// or modified, not yet closed or renamed into place), the last removal of one, the last event,
/// and whether events were lost (then the modification-time rule decides).
#[derive(Debug, Default)]
struct Writes {
    open: std::collections::BTreeSet<PathBuf>,
    removed: Option<Instant>,
    last: Option<Instant>,
    lost: bool,
}

impl Writes {
    /// Takes one event in.
    fn take(&mut self, ev: &notify::Event) {
        use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind, RenameMode};
        self.last = Some(Instant::now());
        if ev.need_rescan() {
            self.lost = true;
            self.open.clear();
            return;
        }
        let manifests = ev
            .paths
            .iter()
            .filter(|p| crate::manifests::is_manifest_file(p));
        match ev.kind {
            EventKind::Create(_) | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => {
                self.open.extend(manifests.cloned())
            }
            EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::From)) => {
                for p in manifests {
                    self.open.remove(p);
                }
            }
            EventKind::Remove(_) => {
                for p in manifests {
                    self.open.remove(p);
                    self.removed = Some(Instant::now());
                }
            }
            _ => {}
        }
    }
}

/// The manifests' directory, watched.
pub struct Watch {
    dir: PathBuf,
    /// The directory watched: `dir`, or the parent of the one file `dir` names.
    target: PathBuf,
    /// Where `target` led when it was last watched (a symlink's directory).
    watched: PathBuf,
    seen: Fingerprint,
    /// The inotify watcher, kept alive; `None` when inotify is not available (then the poll
    /// alone).
    _watcher: Option<notify::RecommendedWatcher>,
    /// Wake-ups: the watcher's change events and [`Stopper::stop`]'s.
    wakes: Receiver<()>,
    /// Kept so that `wakes` never disconnects.
    tx: Sender<()>,
    stop: Arc<AtomicBool>,
    /// The writers inotify told of; `None` without inotify.
    writes: Option<Arc<std::sync::Mutex<Writes>>>,
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
        let writes = Arc::new(std::sync::Mutex::new(Writes::default()));
        let told = writes.clone();
        let watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if let (Ok(ev), Ok(mut w)) = (ev, told.lock()) {
                w.take(&ev);
            }
            let _ = events.send(());
        })
        .and_then(|mut w| {
            w.watch(&target, notify::RecursiveMode::NonRecursive)?;
            // A symlinked directory (git-sync swaps it in one rename): its parent tells of the
            // swap at once; `follow_link` then moves the watch to the new directory.
            if let Some(parent) = link_parent(dir) {
                w.watch(&parent, notify::RecursiveMode::NonRecursive)?;
            }
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
        let writes = watcher.as_ref().map(|_| writes);
        Watch {
            dir: dir.to_path_buf(),
            watched: std::fs::canonicalize(&target).unwrap_or_else(|_| target.clone()),
            target,
            seen: fingerprint(dir),
            _watcher: watcher,
            wakes,
            tx,
            stop: Arc::new(AtomicBool::new(false)),
            writes,
        }
    }

    /// A watch without inotify: the poll and the modification-time rule alone (what a
    /// filesystem without change events gets; for the tests of that rule).
    #[cfg(test)]
    pub(crate) fn polling(dir: &Path) -> Watch {
        let mut w = Watch::new(dir);
        w._watcher = None;
        w.writes = None;
        w
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
            // Before every try: a swap during the last read moves the watch too.
            self.follow_link();
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

    /// When the directory is a symlink that now leads elsewhere (a git-sync swap), moves the
    /// watch to where it leads. What was being written in the old directory no longer counts,
    /// and what was written in the new one before its watch was placed was never told: the
    /// next read waits by the modification times ([`Watch::until_mtimes_quiet`]), as after
    /// lost events. (A writer through the link that opened a file of the new directory before
    /// the watch moved was read half-written without it: the writer torture's fourth writer.)
    fn follow_link(&mut self) {
        let Ok(now) = std::fs::canonicalize(&self.target) else {
            return;
        };
        if now == self.watched {
            return;
        }
        if let Some(w) = self._watcher.as_mut() {
            let _ = w.unwatch(&self.watched);
            if let Err(e) = w.watch(&now, notify::RecursiveMode::NonRecursive) {
                tracing::warn!("cannot watch {} ({e}); polling it", now.display());
            }
        }
        if let Some(writes) = &self.writes {
            let mut w = writes.lock().unwrap_or_else(|e| e.into_inner());
            w.open.clear();
            w.lost = true;
        }
        tracing::info!("{} now leads to {}", self.target.display(), now.display());
        self.watched = now;
    }

    /// The manifests' fingerprint and the watched directory's own modification time (entries
    /// added, removed, renamed).
    fn snapshot(&self) -> Snapshot {
        let dir = std::fs::metadata(&self.target)
            .and_then(|m| m.modified())
            .ok();
        (fingerprint(&self.dir), dir)
    }

    /// Sleeps until every writer inotify told of has finished (module documentation); without
    /// inotify, or after lost events, until the modification times are quiet ([`Watch::until_mtimes_quiet`]).
    /// Returns the snapshot it judged by.
    pub fn until_quiet(&self) -> Snapshot {
        let Some(writes) = &self.writes else {
            return self.until_mtimes_quiet();
        };
        let start = Instant::now();
        let end = start + WRITE_MAX;
        loop {
            let wait = {
                let mut w = writes.lock().unwrap_or_else(|e| e.into_inner());
                if std::mem::take(&mut w.lost) {
                    drop(w);
                    return self.until_mtimes_quiet();
                }
                let now = Instant::now();
                // SETTLE after the last event, and IN_FLIGHT after this call began: an event of
                // a write the fingerprint already shows may still be on its way from inotify.
                let settle = w
                    .last
                    .map_or(Duration::ZERO, |t| SETTLE.saturating_sub(now - t))
                    .max(IN_FLIGHT.saturating_sub(now - start));
                let back = w
                    .removed
                    .map_or(Duration::ZERO, |t| QUIET.saturating_sub(now - t));
                if !w.open.is_empty() {
                    Some(SETTLE.max(settle))
                } else if !settle.is_zero() || !back.is_zero() {
                    Some(settle.max(back))
                } else {
                    w.removed = None;
                    None
                }
            };
            let Some(wait) = wait else {
                return self.snapshot();
            };
            let now = Instant::now();
            if now >= end {
                tracing::warn!(
                    "a writer of {} has not finished within {}s; reading it anyway",
                    self.dir.display(),
                    WRITE_MAX.as_secs()
                );
                return self.snapshot();
            }
            std::thread::sleep(wait.min(end - now));
        }
    }

    /// Sleeps until neither a file of the manifests nor the directory was modified in the last
    /// [`QUIET`], at most [`QUIET_MAX`] (then it logs why and returns: the read goes ahead).
    /// Returns the snapshot it judged by.
    pub fn until_mtimes_quiet(&self) -> Snapshot {
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

/// The parent of `dir` when `dir` is a symlink (to a directory).
fn link_parent(dir: &Path) -> Option<PathBuf> {
    let link = std::fs::symlink_metadata(dir)
        .ok()?
        .file_type()
        .is_symlink();
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    link.then(|| parent.unwrap_or(Path::new(".")).to_path_buf())
}

/// Waits until no event came for [`SETTLE`], at most [`SETTLE_MAX`].
fn settle(rx: &Receiver<()>) {
    let end = Instant::now() + SETTLE_MAX;
    while Instant::now() < end && rx.recv_timeout(SETTLE).is_ok() {}
}

#[cfg(test)]
mod tests;
