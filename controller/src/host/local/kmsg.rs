//! The kernel log (`/dev/kmsg`): what every observation reads it for (the IOMMU's and the
//! confidential computing's boot lines, the GPU driver's Xid events), and the reader the health
//! follower counts new events with.
//!
//! # Why a mirror
//! `/dev/kmsg` gives one record per `read`: an observation that read the whole ring made one
//! system call per record — about 800 in the qemu host (a tenth of an observation there), and
//! thousands on a long-running host whose ring is full. [`Mirror`] keeps what it read and, at each
//! look, reads only the records logged since, then drops the ones the kernel has dropped from its
//! ring (older than the ring's first record, found with one `lseek` and one `read`).
//!
//! # Guarantees
//! - A look gives the same records a fresh read of the whole ring would give, in the same order:
//!   those the ring still holds (by sequence number), at most [`MAX_RECORDS`] of the newest.
//! - Its memory is bounded by the ring's size (and [`MAX_RECORDS`]); a record lost while the
//!   reader was behind (`EPIPE`) was dropped from the ring too.
//!
//! # Caveats
//! When the ring's first record cannot be told at a look (the second handle failed to open or
//! to read), that look drops nothing: it may hold records the ring has dropped since, never
//! fewer than the ring holds.
//!
//! Under a test root (not `/`), `/dev/kmsg` is a plain text file with one message per line, read
//! whole at each look.

use super::Root;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// At most this many records are kept (and read in one look).
pub const MAX_RECORDS: usize = 100_000;

/// `/dev/kmsg`, opened non-blocking (a read past the last record is EAGAIN, not a wait).
pub fn open() -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(0o4000 /* O_NONBLOCK */)
        .open("/dev/kmsg")
        .ok()
}

/// One record's sequence number and message (its first line), from `prio,seq,time,flags;msg`.
fn parse(rec: &str) -> Option<(u64, &str)> {
    let (head, msg) = rec.split_once(';')?;
    let seq = head.split(',').nth(1)?.parse().ok()?;
    Some((seq, msg.lines().next().unwrap_or("")))
}

/// Calls `each` with the sequence number and message of every record `f` has from where it
/// stands, at most `max` records: each read returns one record; EAGAIN ends them, EPIPE is a
/// record overwritten before it was read.
pub fn records(f: &mut File, max: usize, mut each: impl FnMut(u64, &str)) {
    let mut buf = vec![0u8; 8192];
    for _ in 0..max {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let rec = String::from_utf8_lossy(&buf[..n]);
                if let Some((seq, msg)) = parse(&rec) {
                    each(seq, msg);
                }
            }
            Err(e) if e.raw_os_error() == Some(32) => continue,
            Err(_) => break,
        }
    }
}

/// The sequence number of the oldest record the ring holds: `lseek(SEEK_SET, 0)` moves a
/// reader there; its next read returns that record. A record overwritten between the seek and
/// the read (`EPIPE`, a busy ring wrapping) is tried again, a few times. `None` when it cannot
/// be told (an empty ring, a failed read).
fn first_seq(f: &mut File) -> Option<u64> {
    let mut buf = vec![0u8; 8192];
    for _ in 0..3 {
        f.seek(SeekFrom::Start(0)).ok()?;
        match f.read(&mut buf) {
            Ok(n) => return parse(&String::from_utf8_lossy(&buf[..n])).map(|(seq, _)| seq),
            Err(e) if e.raw_os_error() == Some(32) => continue,
            Err(_) => return None,
        }
    }
    None
}

/// The kernel log as the last look read it, brought up to date at each look.
#[derive(Debug, Default)]
pub struct Mirror {
    /// Reads the new records (opened at the first look, which reads the whole ring).
    reader: Option<File>,
    /// Finds the ring's oldest record.
    probe: Option<File>,
    records: VecDeque<(u64, String)>,
}

impl Mirror {
    /// The kernel log's messages, one a line, oldest first.
    pub fn read(&mut self, root: &Root) -> String {
        if !root.is_real() {
            return root.read("/dev/kmsg").unwrap_or_default();
        }
        self.update();
        let len = self.records.iter().map(|(_, m)| m.len() + 1).sum();
        let mut out = String::with_capacity(len);
        for (_, m) in &self.records {
            out.push_str(m);
            out.push('\n');
        }
        out
    }

    fn update(&mut self) {
        if self.reader.is_none() {
            self.reader = open();
            self.probe = open();
        }
        let Some(r) = self.reader.as_mut() else {
            return;
        };
        let kept = &mut self.records;
        records(r, MAX_RECORDS, |seq, msg| {
            kept.push_back((seq, msg.to_string()));
        });
        while kept.len() > MAX_RECORDS {
            kept.pop_front();
        }
        // What the kernel dropped from its ring since, the mirror drops too. When the ring's
        // first record cannot be told, nothing is dropped: a record the reader consumed is
        // never read again, so clearing on a failed probe would lose it for good.
        if let Some(first) = self.probe.as_mut().and_then(first_seq) {
            while kept.front().is_some_and(|(s, _)| *s < first) {
                kept.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests;
