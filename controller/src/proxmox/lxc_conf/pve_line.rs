//! The line grammar of PVE's `parse_pct_config`: what PVE makes of one line of a container
//! config. The classifier, the editor and the rewrite model all read lines through it.

use crate::proxmox::lines::{is_blank, is_ws};

/// One line as classified by `parse_pct_config`. Its rules are tried in the order of the
/// variants: blank, `[pve:pending]`, snapshot header, `#` comment, `lxc.*` key, `description:`,
/// `snapstate:`, `delete:` and `key: value`; any other line is unparseable (PVE drops it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PveLine<'a> {
    Blank,
    PendingHeader,
    SnapshotHeader(&'a str),
    Comment(&'a str),
    Lxc { key: &'a str, value: &'a str },
    Description(&'a str),
    Snapstate(&'a str),
    Delete(&'a str),
    Normal { key: &'a str, value: &'a str },
    Unparseable,
}

pub(super) fn parse_pve_line(line: &str) -> PveLine<'_> {
    if is_blank(line) {
        return PveLine::Blank;
    }
    const PENDING: &[u8] = b"[pve:pending]";
    let b = line.as_bytes();
    if b.len() >= PENDING.len()
        && b[..PENDING.len()].eq_ignore_ascii_case(PENDING)
        && is_blank(&line[PENDING.len()..])
    {
        return PveLine::PendingHeader;
    }
    if let Some(name) = snapshot_header(line) {
        return PveLine::SnapshotHeader(name);
    }
    if let Some(rest) = line.strip_prefix('#') {
        return PveLine::Comment(rest);
    }
    if let Some(l) = lxc_line(line) {
        return l;
    }
    if let Some(rest) = line.strip_prefix("description:") {
        let v = rest.trim_matches(is_ws);
        if !v.is_empty() {
            return PveLine::Description(v);
        }
    }
    if let Some(state) = snapstate(line) {
        return PveLine::Snapstate(state);
    }
    if let Some(rest) = line.strip_prefix("delete:") {
        let v = rest.trim_matches(is_ws);
        if !v.is_empty() {
            return PveLine::Delete(v);
        }
    }
    if let Some(l) = normal_line(line) {
        return l;
    }
    PveLine::Unparseable
}

/// `^\[([a-z][a-z0-9_\-]+)\]\s*$` (case-insensitive).
fn snapshot_header(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('[')?;
    let close = rest.find(']')?;
    let name = &rest[..close];
    let mut chars = name.chars();
    let first = chars.next()?;
    let ok = first.is_ascii_alphabetic()
        && name.len() >= 2
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && is_blank(&rest[close + 1..]);
    ok.then_some(name)
}

/// `^(lxc\.[a-z0-9_\-\.]+)(:|\s*=)\s*(.*?)\s*$`
fn lxc_line(line: &str) -> Option<PveLine<'_>> {
    let rest = line.strip_prefix("lxc.")?;
    let key_len = 4 + rest
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.".contains(c)))
        .unwrap_or(rest.len());
    if key_len == 4 {
        return None;
    }
    let key = &line[..key_len];
    let after = &line[key_len..];
    let value = if let Some(v) = after.strip_prefix(':') {
        v
    } else {
        after.trim_start_matches(is_ws).strip_prefix('=')?
    };
    Some(PveLine::Lxc {
        key,
        value: value.trim_matches(is_ws),
    })
}

/// Unanchored `snapstate:\s*(prepare|delete)\s*$`.
fn snapstate(line: &str) -> Option<&str> {
    line.match_indices("snapstate:").find_map(|(i, m)| {
        let rest = line[i + m.len()..].trim_start_matches(is_ws);
        ["prepare", "delete"].into_iter().find_map(|s| {
            let tail = rest.strip_prefix(s)?;
            is_blank(tail).then_some(&rest[..s.len()])
        })
    })
}

/// `^([a-z][a-z_]*\d*):\s*(.+?)\s*$`
fn normal_line(line: &str) -> Option<PveLine<'_>> {
    let b = line.as_bytes();
    if !b.first()?.is_ascii_lowercase() {
        return None;
    }
    let mut i = 1;
    while i < b.len() && (b[i].is_ascii_lowercase() || b[i] == b'_') {
        i += 1;
    }
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if b.get(i) != Some(&b':') {
        return None;
    }
    let key = &line[..i];
    let raw = &line[i + 1..];
    let trimmed = raw.trim_matches(is_ws);
    let value = if !trimmed.is_empty() {
        trimmed
    } else {
        // `\s*(.+?)\s*$` on an all-whitespace rest backtracks to capture its last character.
        let last = raw.chars().next_back()?;
        &raw[raw.len() - last.len_utf8()..]
    };
    Some(PveLine::Normal { key, value })
}
