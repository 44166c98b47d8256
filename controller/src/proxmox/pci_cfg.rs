//! Byte-preserving editor for the cluster-wide PCI resource mapping file
//! (`/etc/pve/mapping/pci.cfg`, `PVE::Mapping::PCI`).
//!
//! Why: the agent maintains the `map` lines of its own node in a file shared by every node of
//! the cluster and edited by humans and the PVE GUI/API. PVE itself would drop comments on its
//! next write, but until then (and for other nodes' lines always) we must not disturb anything.
//!
//! The structure follows `PVE::SectionConfig::parse_config` with the PCI header override
//! exactly (facts/proxmox/pci-mapping.txt section 2):
//! - input split on `\n`; lines matching `^\s*#` are skipped everywhere (even inside sections);
//! - at top level, `^(\S+)\s*$` is a section header (the mapping ID, no `type:` prefix);
//!   other non-empty lines are ignored by PVE;
//! - a section lasts until the first line that is exactly empty (or `"0"`, Perl-false) or EOF;
//!   in a CRLF file a `"\r"` line is NOT empty, so PVE merges such sections - we model that;
//! - property lines are `^\s+(\S+)(\s+(.*\S))?\s*$`; only valid `map` values count.
//!
//! Guarantees: `parse` never fails, `render` is byte-identical when unchanged, edits touch only
//! the requested node's `map` lines of one section (plus the section header/terminator when a
//! section is created or removed), and are idempotent.
//!
//! Caveats: if an ID appears in several sections, PVE uses the last one, and so do we: edits go
//! to the last one; earlier duplicates are left alone unless the mapping is removed, in which
//! case they are removed as well (otherwise they would become effective). The module does no
//! I/O or cluster locking.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use super::lines::{content, first_line_ending, is_ws, line_ending, split_lines, terminate};

/// Maximum length of the `description` values (schema `maxLength`).
const MAX_DESCRIPTION_LEN: usize = 4096;

/// One `map` entry: the devices of one node that back a mapping.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MapEntry {
    /// Node name (`pve-node` format).
    pub node: String,
    /// `vendor:device`, e.g. `"10de:2bb5"`. PVE compares it with lower-case sysfs values, so
    /// write lower case; upper case parses but never matches the host.
    pub id: String,
    /// PCI addresses, `;`-separated in the file (devices passed together as one hostpci).
    pub paths: Vec<String>,
    /// IOMMU group of the first path; required in practice on hosts with an IOMMU.
    pub iommugroup: Option<u32>,
    /// `vendor:device` of the subsystem; required in practice when the device reports one.
    pub subsystem_id: Option<String>,
    /// Node-specific free text (no commas possible).
    pub description: Option<String>,
}

/// Errors from parsing or validating map entries and mapping IDs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PciCfgError {
    /// A part without `=`; `map` has no default key.
    #[error("map entry part '{0}' has no key (expected key=value; map has no default key)")]
    ValueWithoutKey(String),
    /// A part like `=x` or `key=`.
    #[error("map entry part '{0}' has an empty key or an empty value")]
    EmptyKeyOrValue(String),
    /// A key that `map` does not define.
    #[error("unknown key '{0}' in map entry")]
    UnknownKey(String),
    /// A key given twice.
    #[error("duplicate key '{0}' in map entry")]
    DuplicateKey(String),
    /// One of `node`, `id`, `path` is missing.
    #[error("map entry is missing required key '{0}'")]
    MissingKey(&'static str),
    /// A value that fails the schema.
    #[error("invalid value '{value}' for '{key}': {reason}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The offending value.
        value: String,
        /// What the schema expects.
        reason: &'static str,
    },
    /// A mapping (section) ID that PVE would skip.
    #[error("invalid mapping id '{0}': expected ^[a-z][a-z0-9_-]+$ (case-insensitive)")]
    InvalidMappingId(String),
    /// An entry whose `node` differs from the node being edited.
    #[error("entry for node '{found}' given while editing node '{expected}'")]
    NodeMismatch {
        /// Node being edited.
        expected: String,
        /// Node of the entry.
        found: String,
    },
    /// An entry that does not survive `to_property_string` + `parse` unchanged.
    #[error("map entry cannot be written faithfully: {0}")]
    NotRepresentable(String),
}

fn invalid(key: &str, value: &str, reason: &'static str) -> PciCfgError {
    PciCfgError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    }
}

impl MapEntry {
    /// Parses a `map` property string like PVE's `parse_property_string` + schema check:
    /// key order is irrelevant, whitespace-only parts are ignored, unknown or duplicate keys
    /// and missing `node`/`id`/`path` are errors, and every value is checked against its
    /// pattern (so `Ok` means PVE accepts the line).
    ///
    /// Caveat: `iommugroup` must be a plain non-negative decimal (PVE would also take a sign).
    pub fn parse(property_string: &str) -> Result<MapEntry, PciCfgError> {
        if property_string.contains(['\n', '\r']) {
            return Err(invalid("map", property_string, "contains a line feed"));
        }
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut node = None;
        let mut id = None;
        let mut paths = None;
        let mut iommugroup = None;
        let mut subsystem_id = None;
        let mut description = None;
        for part in property_string.split(',') {
            if part.chars().all(is_ws) {
                continue;
            }
            let Some((k, v)) = part.split_once('=') else {
                return Err(PciCfgError::ValueWithoutKey(part.to_string()));
            };
            if k.is_empty() || v.is_empty() {
                return Err(PciCfgError::EmptyKeyOrValue(part.to_string()));
            }
            if !seen.insert(k) {
                return Err(PciCfgError::DuplicateKey(k.to_string()));
            }
            match k {
                "node" => {
                    if !is_valid_node(v) {
                        return Err(invalid(k, v, "expected a node name (pve-node)"));
                    }
                    node = Some(v.to_string());
                }
                "id" | "subsystem-id" => {
                    if !is_valid_pci_id(v) {
                        return Err(invalid(k, v, "expected vvvv:dddd (hex)"));
                    }
                    if k == "id" {
                        id = Some(v.to_string());
                    } else {
                        subsystem_id = Some(v.to_string());
                    }
                }
                "path" => {
                    let list: Vec<String> = v.split(';').map(str::to_string).collect();
                    if !list.iter().all(|p| is_valid_pci_path(p)) {
                        return Err(invalid(
                            k,
                            v,
                            "expected dddd:bb:dd[.f][;...] (lower-case hex, domain required)",
                        ));
                    }
                    paths = Some(list);
                }
                "iommugroup" => {
                    let n = v
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                        .then(|| v.parse::<u32>().ok())
                        .flatten()
                        .ok_or_else(|| invalid(k, v, "expected a non-negative integer"))?;
                    iommugroup = Some(n);
                }
                "description" => {
                    if v.len() > MAX_DESCRIPTION_LEN {
                        return Err(invalid(k, v, "longer than 4096 bytes"));
                    }
                    description = Some(v.to_string());
                }
                _ => return Err(PciCfgError::UnknownKey(k.to_string())),
            }
        }
        Ok(MapEntry {
            node: node.ok_or(PciCfgError::MissingKey("node"))?,
            id: id.ok_or(PciCfgError::MissingKey("id"))?,
            paths: paths.ok_or(PciCfgError::MissingKey("path"))?,
            iommugroup,
            subsystem_id,
            description,
        })
    }

    /// Property string with keys sorted lexicographically like the PVE GUI writes them:
    /// `description?,id,iommugroup?,node,path,subsystem-id?`. Not validated; see
    /// [`MapEntry::validate`].
    pub fn to_property_string(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(d) = &self.description {
            parts.push(format!("description={d}"));
        }
        parts.push(format!("id={}", self.id));
        if let Some(g) = self.iommugroup {
            parts.push(format!("iommugroup={g}"));
        }
        parts.push(format!("node={}", self.node));
        parts.push(format!("path={}", self.paths.join(";")));
        if let Some(s) = &self.subsystem_id {
            parts.push(format!("subsystem-id={s}"));
        }
        parts.join(",")
    }

    /// Checks that the entry is valid for PVE and survives being written and re-read
    /// unchanged (e.g. no `,` in the description, no empty path list).
    pub fn validate(&self) -> Result<(), PciCfgError> {
        let s = self.to_property_string();
        let back = MapEntry::parse(&s)?;
        if &back == self {
            Ok(())
        } else {
            Err(PciCfgError::NotRepresentable(s))
        }
    }
}

/// True if PVE accepts `id` as a mapping (section) ID (`pve-configid`).
pub fn is_valid_mapping_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && id.len() >= 2
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$`
fn is_valid_node(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}$`
fn is_valid_pci_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 9 && b[4] == b':' && b[..4].iter().chain(&b[5..]).all(u8::is_ascii_hexdigit)
}

/// `[a-f0-9]{4,}:[a-f0-9]{2}:[a-f0-9]{2}(\.[a-f0-9])?`
fn is_valid_pci_path(s: &str) -> bool {
    let lower_hex = |p: &str| {
        p.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let (addr, func) = match s.split_once('.') {
        Some((a, f)) => (a, Some(f)),
        None => (s, None),
    };
    let parts: Vec<&str> = addr.split(':').collect();
    matches!(parts.as_slice(), [d, b, dev]
        if d.len() >= 4 && b.len() == 2 && dev.len() == 2
            && lower_hex(d) && lower_hex(b) && lower_hex(dev))
        && func.is_none_or(|f| f.len() == 1 && lower_hex(f))
}

/// A parsed `pci.cfg` that remembers every original line byte-for-byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciCfg {
    /// Original lines including their terminators; only the last may lack one.
    lines: Vec<String>,
}

/// Where a section sits in `lines`.
#[derive(Debug, Clone)]
struct Span {
    header: usize,
    id: String,
    /// Exclusive end of the body (index of the terminating line, or the line count).
    end: usize,
}

/// A `map` line of a section body that PVE accepts.
#[derive(Debug, Clone)]
struct MapLine {
    idx: usize,
    entry: MapEntry,
}

impl PciCfg {
    /// Parses a file. Never fails: lines PVE would ignore or reject are kept as opaque lines.
    /// Guarantee: `PciCfg::parse(x).render() == x` for any `x`.
    pub fn parse(text: &str) -> PciCfg {
        PciCfg {
            lines: split_lines(text),
        }
    }

    /// Renders the file; byte-identical to the input when nothing was changed.
    pub fn render(&self) -> String {
        self.lines.concat()
    }

    /// All mappings as PVE sees them: valid section IDs, valid `map` entries in file order
    /// (all nodes). Sections without any valid `map` entry are omitted (PVE skips them); with
    /// duplicate IDs the last section wins, as in PVE.
    pub fn mappings(&self) -> BTreeMap<String, Vec<MapEntry>> {
        let mut out = BTreeMap::new();
        for span in self.spans() {
            let entries: Vec<MapEntry> =
                self.map_lines(&span).into_iter().map(|m| m.entry).collect();
            if entries.is_empty() {
                out.remove(&span.id);
            } else {
                out.insert(span.id, entries);
            }
        }
        out
    }

    /// Makes the `map` lines of `node` in section `mapping` equal `entries` (in that order);
    /// other nodes' lines, description/mdev/live-migration-capable lines and comments are kept.
    /// Returns true if anything changed.
    ///
    /// - Existing lines that already equal a wanted entry (semantically, any key order) are
    ///   kept byte-for-byte (a longest common subsequence is kept, so order is respected);
    ///   the others are removed and missing entries inserted next to the kept ones (or where
    ///   the node's lines were, else after the section's last `map` line), TAB-indented, keys
    ///   in GUI order, with the line ending of the preceding line.
    /// - Invalid `map` lines (PVE ignores them) are never touched, even for this node.
    /// - Missing section and non-empty `entries`: a canonical section is appended at the end
    ///   (`id`, TAB `map` lines, empty line), preceded by an empty line if needed so that it
    ///   cannot be merged into a previous section. It always uses `\n` endings, because PVE
    ///   only ends a section at a truly empty line (`"\r"` is not).
    /// - A section left without any valid `map` line is removed entirely (header, body incl.
    ///   comments, and its terminating empty line), since PVE skips it and then refuses to
    ///   write the file. Lines before the header are kept. Earlier sections with the same ID
    ///   (hand-made duplicates) are removed too, so the mapping really disappears for PVE.
    ///
    /// Preconditions (not checked here; use [`PciCfg::try_set_node_entries`]): `mapping` is a
    /// valid ID, every entry is valid and has `node == node`. Otherwise the result may not be
    /// what PVE reads back and a repeated call may not be a no-op.
    pub fn set_node_entries(&mut self, mapping: &str, node: &str, entries: &[MapEntry]) -> bool {
        let Some(span) = self.spans().into_iter().rev().find(|s| s.id == mapping) else {
            if entries.is_empty() {
                return false;
            }
            self.append_section(mapping, entries);
            return true;
        };

        let all_maps = self.map_lines(&span);
        let mine: Vec<&MapLine> = all_maps.iter().filter(|m| m.entry.node == node).collect();
        let existing: Vec<&MapEntry> = mine.iter().map(|m| &m.entry).collect();
        if existing.iter().copied().eq(entries.iter()) {
            return false;
        }

        let pairs = lcs(&existing, entries);
        let kept: BTreeSet<usize> = pairs.iter().map(|&(e, _)| e).collect();
        let remove: BTreeSet<usize> = mine
            .iter()
            .enumerate()
            .filter(|(i, _)| !kept.contains(i))
            .map(|(_, m)| m.idx)
            .collect();

        let remaining_valid = all_maps.len() - remove.len() + (entries.len() - pairs.len());
        if remaining_valid == 0 {
            // Earlier sections with the same ID would become effective once the last one is
            // gone (PVE lets the last duplicate win), so they go too.
            let dups: Vec<Span> = self
                .spans()
                .into_iter()
                .filter(|s| s.id == mapping)
                .collect();
            for s in dups.iter().rev() {
                self.remove_section(s);
            }
            return true;
        }

        // Default position when nothing of this node is kept.
        let fallback = match (mine.first(), self.last_map_property(&span)) {
            (Some(m), _) => m.idx,
            (None, Some(i)) => i + 1,
            (None, None) => span.header + 1,
        };
        let mut inserts: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (k, entry) in entries.iter().enumerate() {
            if pairs.iter().any(|&(_, w)| w == k) {
                continue;
            }
            let at = match pairs.iter().rev().find(|&&(_, w)| w < k) {
                Some(&(e, _)) => mine[e].idx + 1,
                None => pairs.first().map_or(fallback, |&(e, _)| mine[e].idx),
            };
            inserts
                .entry(at)
                .or_default()
                .push(format!("\tmap {}", entry.to_property_string()));
        }
        self.apply(&remove, &inserts);
        true
    }

    /// Like [`PciCfg::set_node_entries`] but first checks its preconditions: a valid mapping
    /// ID, valid entries that all belong to `node`.
    pub fn try_set_node_entries(
        &mut self,
        mapping: &str,
        node: &str,
        entries: &[MapEntry],
    ) -> Result<bool, PciCfgError> {
        if !is_valid_mapping_id(mapping) {
            return Err(PciCfgError::InvalidMappingId(mapping.to_string()));
        }
        if !is_valid_node(node) {
            return Err(invalid("node", node, "expected a node name (pve-node)"));
        }
        for e in entries {
            if e.node != node {
                return Err(PciCfgError::NodeMismatch {
                    expected: node.to_string(),
                    found: e.node.clone(),
                });
            }
            e.validate()?;
        }
        Ok(self.set_node_entries(mapping, node, entries))
    }

    /// Sections with a valid ID, in file order (SectionConfig's line loop).
    fn spans(&self) -> Vec<Span> {
        let mut out = Vec::new();
        let n = self.lines.len();
        let mut i = 0;
        while i < n {
            let c = content(&self.lines[i]);
            if is_comment(c) || is_false(c) {
                i += 1;
                continue;
            }
            let Some(id) = section_header(c) else {
                i += 1;
                continue;
            };
            let mut j = i + 1;
            while j < n {
                let cj = content(&self.lines[j]);
                if !is_comment(cj) && is_false(cj) {
                    break;
                }
                j += 1;
            }
            if is_valid_mapping_id(id) {
                out.push(Span {
                    header: i,
                    id: id.to_string(),
                    end: j,
                });
            }
            i = j + 1;
        }
        out
    }

    /// Valid `map` lines of a section body, in file order.
    fn map_lines(&self, span: &Span) -> Vec<MapLine> {
        (span.header + 1..span.end)
            .filter_map(|idx| {
                let c = content(&self.lines[idx]);
                if is_comment(c) {
                    return None;
                }
                match property(c) {
                    Some(("map", Some(v))) => {
                        MapEntry::parse(v).ok().map(|entry| MapLine { idx, entry })
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Index of the last `map` property line (valid or not) of a section.
    fn last_map_property(&self, span: &Span) -> Option<usize> {
        (span.header + 1..span.end).rev().find(|&i| {
            let c = content(&self.lines[i]);
            !is_comment(c) && matches!(property(c), Some(("map", _)))
        })
    }

    fn remove_section(&mut self, span: &Span) {
        let mut end = span.end;
        if self.lines.get(end).is_some_and(|l| content(l).is_empty()) {
            end += 1;
        }
        self.lines.drain(span.header..end);
    }

    fn append_section(&mut self, mapping: &str, entries: &[MapEntry]) {
        if let Some(last) = self.lines.last_mut() {
            if !last.ends_with('\n') {
                last.push('\n');
            }
            if !content(last).is_empty() {
                self.lines.push("\n".to_string());
            }
        }
        self.lines.push(format!("{mapping}\n"));
        for e in entries {
            self.lines
                .push(format!("\tmap {}\n", e.to_property_string()));
        }
        self.lines.push("\n".to_string());
    }

    /// Removes lines and inserts new ones before the given original indices.
    fn apply(&mut self, remove: &BTreeSet<usize>, inserts: &BTreeMap<usize, Vec<String>>) {
        let fallback_eol = first_line_ending(&self.lines).to_string();
        let old = std::mem::take(&mut self.lines);
        let n = old.len();
        let mut out: Vec<String> = Vec::with_capacity(n + inserts.len());
        for (idx, line) in old.into_iter().enumerate() {
            if let Some(new) = inserts.get(&idx) {
                let eol = out
                    .last()
                    .and_then(|l| line_ending(l))
                    .unwrap_or(&fallback_eol)
                    .to_string();
                out.extend(new.iter().map(|l| format!("{l}{eol}")));
            }
            if !remove.contains(&idx) {
                out.push(line);
            }
        }
        if let Some(new) = inserts.get(&n) {
            let eol = match out.last_mut() {
                Some(last) => terminate(last, &fallback_eol),
                None => fallback_eol.clone(),
            };
            out.extend(new.iter().map(|l| format!("{l}{eol}")));
        }
        self.lines = out;
    }
}

/// Longest common subsequence of `a` and `b` as (index in a, index in b) pairs, ascending.
fn lcs(a: &[&MapEntry], b: &[MapEntry]) -> Vec<(usize, usize)> {
    let (n, m) = (a.len(), b.len());
    let mut t = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i][j] = if *a[i] == b[j] {
                t[i + 1][j + 1] + 1
            } else {
                t[i + 1][j].max(t[i][j + 1])
            };
        }
    }
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if *a[i] == b[j] {
            out.push((i, j));
            i += 1;
            j += 1;
        } else if t[i + 1][j] >= t[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// `^\s*#`
fn is_comment(c: &str) -> bool {
    c.trim_start_matches(is_ws).starts_with('#')
}

/// Perl-false line: ends a section (and is skipped at top level).
fn is_false(c: &str) -> bool {
    c.is_empty() || c == "0"
}

/// `^(\S+)\s*$` -> the ID.
fn section_header(c: &str) -> Option<&str> {
    let end = c.find(is_ws).unwrap_or(c.len());
    let (id, rest) = c.split_at(end);
    (!id.is_empty() && rest.chars().all(is_ws)).then_some(id)
}

/// `^\s+(\S+)(\s+(.*\S))?\s*$` -> (key, value).
fn property(c: &str) -> Option<(&str, Option<&str>)> {
    let body = c.trim_start_matches(is_ws);
    if body.len() == c.len() || body.is_empty() {
        return None;
    }
    let end = body.find(is_ws).unwrap_or(body.len());
    let (key, rest) = body.split_at(end);
    let value = rest.trim_matches(is_ws);
    Some((key, (!value.is_empty()).then_some(value)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxmox::lines::testing::{is_subsequence, lines};
    use proptest::prelude::*;

    const F101: &str = include_str!("testdata/pci-10-1b.cfg");
    const F102: &str = include_str!("testdata/pci-10-2b.cfg");
    const HAND: &str = include_str!("testdata/pci-hand-edited.cfg");

    fn entry(node: &str, path: &str, group: u32) -> MapEntry {
        MapEntry {
            node: node.to_string(),
            id: "10de:2231".to_string(),
            paths: vec![path.to_string()],
            iommugroup: Some(group),
            subsystem_id: Some("10de:147e".to_string()),
            description: None,
        }
    }

    fn node_entries(cfg: &PciCfg, mapping: &str, node: &str) -> Vec<MapEntry> {
        cfg.mappings()
            .get(mapping)
            .map(|v| v.iter().filter(|e| e.node == node).cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn round_trip() {
        let crlf = F101.replace('\n', "\r\n");
        let no_nl = F102.trim_end_matches('\n');
        for t in [F101, F102, HAND, &crlf, no_nl, "", "\n", "x", " \t\n0\n#\n"] {
            assert_eq!(PciCfg::parse(t).render(), t);
        }
    }

    #[test]
    fn mappings_of_examples() {
        let m = PciCfg::parse(F101).mappings();
        assert_eq!(m.len(), 2);
        assert_eq!(m["gpu-pool"].len(), 4);
        assert_eq!(m["gpu-pool"][1], entry("pve1", "0000:61:00.0", 15));
        assert_eq!(m["nic-vf"].len(), 3);

        let m = PciCfg::parse(F102).mappings();
        assert_eq!(m["rtx-full"][0].paths, vec!["0000:01:00"]);
        assert_eq!(
            m["dual-fpga"][0].paths,
            vec!["0000:c1:00.0", "0000:c2:00.0"]
        );
        assert_eq!(m["a16-vgpu"].len(), 2);

        // Hand-edited: comments anywhere, space indentation, any key order; invalid lines
        // (upper-case path, unknown key, map without value) are ignored like PVE does.
        let m = PciCfg::parse(HAND).mappings();
        assert_eq!(
            m["gpu-pool"],
            vec![
                entry("pve2", "0000:41:00.0", 22),
                entry("pve1", "0000:41:00.0", 14),
                entry("pve1", "0000:61:00.0", 15),
            ]
        );
        assert!(!m.contains_key("Bad!id"));
        assert!(!m.contains_key("empty-one"));
        assert_eq!(m["nic"].len(), 1);
    }

    #[test]
    fn crlf_sections_merge_like_pve() {
        // In a CRLF file "\r" is not an empty line, so PVE never ends the first section.
        let crlf = F101.replace('\n', "\r\n");
        let mut cfg = PciCfg::parse(&crlf);
        let m = cfg.mappings();
        assert_eq!(m.keys().collect::<Vec<_>>(), ["gpu-pool"]);
        assert_eq!(m["gpu-pool"].len(), 7);
        // A new section is appended with LF and a real empty line, so PVE sees it separately.
        let e = entry("pve1", "0000:01:00.0", 1);
        assert!(cfg.set_node_entries("new-gpu", "pve1", std::slice::from_ref(&e)));
        assert!(cfg.render().starts_with(&crlf));
        assert_eq!(cfg.mappings()["new-gpu"], vec![e.clone()]);
        assert!(!cfg.set_node_entries("new-gpu", "pve1", &[e]));
        // Editing inside a CRLF section keeps CRLF.
        let mut cfg = PciCfg::parse(&crlf);
        cfg.set_node_entries(
            "gpu-pool",
            "pve1",
            &[
                entry("pve1", "0000:41:00.0", 14),
                entry("pve1", "0000:81:00.0", 16),
            ],
        );
        assert!(cfg.render().contains("\tmap id=10de:2231,iommugroup=16,node=pve1,path=0000:81:00.0,subsystem-id=10de:147e\r\n"));
    }

    #[test]
    fn unchanged_when_equal_in_any_key_order() {
        let mut cfg = PciCfg::parse(HAND);
        let want = node_entries(&cfg, "gpu-pool", "pve1");
        assert!(!cfg.set_node_entries("gpu-pool", "pve1", &want));
        assert_eq!(cfg.render(), HAND);
        assert!(!cfg.set_node_entries("missing", "pve1", &[]));
        assert!(!cfg.set_node_entries("gpu-pool", "pve9", &[]));
        assert_eq!(cfg.render(), HAND);
    }

    #[test]
    fn remove_one_entry_changes_only_that_line() {
        let mut cfg = PciCfg::parse(F101);
        assert!(cfg.set_node_entries("gpu-pool", "pve1", &[entry("pve1", "0000:41:00.0", 14)]));
        let expected = F101.replace(
            "\tmap id=10de:2231,iommugroup=15,node=pve1,path=0000:61:00.0,subsystem-id=10de:147e\n",
            "",
        );
        assert_eq!(cfg.render(), expected);
        assert!(!cfg.set_node_entries("gpu-pool", "pve1", &[entry("pve1", "0000:41:00.0", 14)]));
    }

    #[test]
    fn add_and_reorder_entries() {
        let mut cfg = PciCfg::parse(F101);
        let a = entry("pve1", "0000:41:00.0", 14);
        let b = entry("pve1", "0000:61:00.0", 15);
        let c = entry("pve1", "0000:81:00.0", 16);
        assert!(cfg.set_node_entries("gpu-pool", "pve1", &[a.clone(), b.clone(), c.clone()]));
        let new_line =
            "\tmap id=10de:2231,iommugroup=16,node=pve1,path=0000:81:00.0,subsystem-id=10de:147e\n";
        let expected = F101.replace(
            "path=0000:61:00.0,subsystem-id=10de:147e\n",
            &format!("path=0000:61:00.0,subsystem-id=10de:147e\n{new_line}"),
        );
        assert_eq!(cfg.render(), expected);
        assert_eq!(
            node_entries(&cfg, "gpu-pool", "pve1"),
            [a.clone(), b.clone(), c.clone()]
        );

        // Order matters (alternatives are tried in order): c first.
        assert!(cfg.set_node_entries("gpu-pool", "pve1", &[c.clone(), a.clone(), b.clone()]));
        assert_eq!(
            node_entries(&cfg, "gpu-pool", "pve1"),
            [c.clone(), a.clone(), b.clone()]
        );
        assert!(!cfg.set_node_entries("gpu-pool", "pve1", &[c, a, b]));
        assert_eq!(node_entries(&cfg, "gpu-pool", "pve2").len(), 2);

        // Node with no lines yet: after the section's last map line, before description.
        let mut cfg = PciCfg::parse(F101);
        let d = entry("pve3", "0000:01:00.0", 3);
        assert!(cfg.set_node_entries("gpu-pool", "pve3", std::slice::from_ref(&d)));
        assert!(cfg.render().contains(
            "path=0000:c1:00.0,subsystem-id=10de:147e\n\tmap id=10de:2231,iommugroup=3,node=pve3,path=0000:01:00.0,subsystem-id=10de:147e\n\tdescription Compute GPUs"
        ));
    }

    #[test]
    fn hand_edited_file_keeps_comments_and_spacing() {
        let mut cfg = PciCfg::parse(HAND);
        let want = [entry("pve1", "0000:61:00.0", 15)];
        assert!(cfg.set_node_entries("gpu-pool", "pve1", &want));
        let out = cfg.render();
        let removed: Vec<&str> = lines(HAND)
            .into_iter()
            .filter(|l| !lines(&out).contains(l))
            .collect();
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert!(removed[0].contains("node=pve1") && removed[0].contains("0000:41:00.0"));
        assert_eq!(lines(&out).len(), lines(HAND).len() - 1);
        assert_eq!(node_entries(&cfg, "gpu-pool", "pve1"), want);
        assert_eq!(node_entries(&cfg, "gpu-pool", "pve2").len(), 1);
    }

    #[test]
    fn removing_all_entries_removes_only_the_section() {
        let mut cfg = PciCfg::parse(F101);
        assert!(cfg.set_node_entries("gpu-pool", "pve1", &[]));
        assert!(cfg.set_node_entries("gpu-pool", "pve2", &[]));
        let nic = &F101[F101.find("nic-vf").unwrap_or(0)..];
        assert_eq!(cfg.render(), nic);
        assert!(!cfg.set_node_entries("gpu-pool", "pve2", &[]));

        let mut cfg = PciCfg::parse(F102);
        assert!(cfg.set_node_entries("a16-vgpu", "pve3", &[]));
        let start = F102.find("a16-vgpu").unwrap_or(0);
        let end = F102.find("dual-fpga").unwrap_or(0);
        assert_eq!(cfg.render(), format!("{}{}", &F102[..start], &F102[end..]));

        // Last section without a terminating empty line and a comment above the header.
        let text = "a1\n\tmap id=10de:2231,node=pve1,path=0000:01:00.0\n\n# my gpus\nb1\n\tmap id=10de:2231,node=pve1,path=0000:02:00.0";
        let mut cfg = PciCfg::parse(text);
        assert!(cfg.set_node_entries("b1", "pve1", &[]));
        assert_eq!(
            cfg.render(),
            "a1\n\tmap id=10de:2231,node=pve1,path=0000:01:00.0\n\n# my gpus\n"
        );
    }

    #[test]
    fn new_section_is_canonical() {
        let e = MapEntry {
            node: "pve1".into(),
            id: "10de:2bb5".into(),
            paths: vec!["0000:81:00.0".into()],
            iommugroup: Some(40),
            subsystem_id: Some("10de:204e".into()),
            description: Some("slot 3".into()),
        };
        let line = "\tmap description=slot 3,id=10de:2bb5,iommugroup=40,node=pve1,path=0000:81:00.0,subsystem-id=10de:204e\n";
        for (before, sep) in [
            (F101, ""),
            (F101.trim_end_matches('\n'), "\n\n"),
            ("", ""),
            ("# c", "\n\n"),
        ] {
            let mut cfg = PciCfg::parse(before);
            assert!(cfg.set_node_entries("gpuplane-h200", "pve1", std::slice::from_ref(&e)));
            assert_eq!(
                cfg.render(),
                format!("{before}{sep}gpuplane-h200\n{line}\n")
            );
            assert_eq!(cfg.mappings()["gpuplane-h200"], vec![e.clone()]);
            assert!(!cfg.set_node_entries("gpuplane-h200", "pve1", std::slice::from_ref(&e)));
        }
    }

    #[test]
    fn map_entry_parse_and_print() {
        let s = "node=pve1,path=0000:01:00.0;0000:01:00.1,id=10DE:2231, ,description=a b=c";
        let e = MapEntry::parse(s).expect("valid");
        assert_eq!(e.paths.len(), 2);
        assert_eq!(e.id, "10DE:2231");
        assert_eq!(
            e.to_property_string(),
            "description=a b=c,id=10DE:2231,node=pve1,path=0000:01:00.0;0000:01:00.1"
        );
        assert_eq!(e.validate(), Ok(()));
        let cases: [(&str, PciCfgError); 8] = [
            ("node=a,id=10de:2231", PciCfgError::MissingKey("path")),
            (
                "id=10de:2231,path=0000:01:00",
                PciCfgError::MissingKey("node"),
            ),
            ("node=a,path=0000:01:00", PciCfgError::MissingKey("id")),
            ("node=a,node=b", PciCfgError::DuplicateKey("node".into())),
            ("node=a,mdev=1", PciCfgError::UnknownKey("mdev".into())),
            ("pve1", PciCfgError::ValueWithoutKey("pve1".into())),
            ("node=", PciCfgError::EmptyKeyOrValue("node=".into())),
            (" node=a", PciCfgError::UnknownKey(" node".into())),
        ];
        for (s, err) in cases {
            assert_eq!(MapEntry::parse(s), Err(err), "{s}");
        }
        for bad in [
            "node=a,id=10de:22311,path=0000:01:00",
            "node=-a,id=10de:2231,path=0000:01:00",
            "node=a,id=10de:2231,path=0000:0A:00",
            "node=a,id=10de:2231,path=01:00.0",
            "node=a,id=10de:2231,path=0000:01:00.0;",
            "node=a,id=10de:2231,path=0000:01:00.10",
            "node=a,id=10de:2231,path=0000:01:00,iommugroup=-1",
            "node=a,id=10de:2231,path=0000:01:00,subsystem-id=xyz",
        ] {
            let r = MapEntry::parse(bad);
            assert!(
                matches!(r, Err(PciCfgError::InvalidValue { .. })),
                "{bad}: {r:?}"
            );
            assert!(r
                .err()
                .is_some_and(|e| e.to_string().contains("invalid value")));
        }
        let mut bad = e.clone();
        bad.description = Some("a,b".into());
        assert!(bad.validate().is_err());
    }

    #[test]
    fn try_set_checks_preconditions() {
        let mut cfg = PciCfg::parse(F101);
        let e = entry("pve1", "0000:01:00.0", 1);
        assert_eq!(
            cfg.try_set_node_entries("9bad", "pve1", std::slice::from_ref(&e)),
            Err(PciCfgError::InvalidMappingId("9bad".into()))
        );
        assert!(matches!(
            cfg.try_set_node_entries("gpu-pool", "pve2", std::slice::from_ref(&e)),
            Err(PciCfgError::NodeMismatch { .. })
        ));
        assert_eq!(cfg.render(), F101);
        assert_eq!(cfg.try_set_node_entries("gpu-pool", "pve1", &[e]), Ok(true));
    }

    // ---- property tests ----

    fn gen_entry(node: &'static str) -> impl Strategy<Value = MapEntry> {
        (
            0u8..6,
            0u32..4,
            any::<bool>(),
            prop::option::of("[a-z ]{1,8}"),
        )
            .prop_map(move |(bus, g, sub, d)| MapEntry {
                node: node.to_string(),
                id: "10de:2231".to_string(),
                paths: vec![format!("0000:{bus:02x}:00.0")],
                iommugroup: Some(g),
                subsystem_id: sub.then(|| "10de:147e".to_string()),
                description: d,
            })
    }

    fn any_node_entry() -> impl Strategy<Value = MapEntry> {
        prop_oneof![gen_entry("pve1"), gen_entry("pve2"), gen_entry("pve3")]
    }

    /// A map line with shuffled key order and varied indentation.
    fn map_line(e: MapEntry) -> impl Strategy<Value = String> {
        let parts: Vec<String> = e
            .to_property_string()
            .split(',')
            .map(str::to_string)
            .collect();
        (
            Just(parts).prop_shuffle(),
            prop::sample::select(vec!["\t", " ", "  ", "\t "]),
            prop::sample::select(vec!["", " ", "\t"]),
        )
            .prop_map(|(p, ind, trail)| format!("{ind}map {}{trail}", p.join(",")))
    }

    fn body_line() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => any_node_entry().prop_flat_map(map_line),
            1 => prop::sample::select(vec![
                "\tdescription some GPUs",
                "\tmdev 1",
                "\tlive-migration-capable 0",
                "# comment in section",
                "   # indented comment",
                "\tmap node=pve1,id=10DE:xyz,path=0000:01:00.0",
                "\tmap",
                "\tbogus 1",
                " ",
            ]).prop_map(str::to_string),
        ]
    }

    fn gen_cfg() -> impl Strategy<Value = String> {
        let section = (
            prop::sample::select(vec!["gpu-pool", "nic-vf", "a16", "Bad!id"]),
            prop::collection::vec(body_line(), 0..6),
            prop::sample::select(vec!["", "# top comment\n", "\n"]),
        )
            .prop_map(|(id, body, pre)| {
                let mut s = format!("{pre}{id}\n");
                for l in body {
                    s.push_str(&l);
                    s.push('\n');
                }
                s.push('\n');
                s
            });
        (prop::collection::vec(section, 0..4), any::<bool>()).prop_map(|(secs, trim)| {
            let s = secs.concat();
            if trim {
                s.trim_end_matches('\n').to_string()
            } else {
                s
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn prop_round_trip_any_string(s in "(?s).{0,200}") {
            prop_assert_eq!(PciCfg::parse(&s).render(), s);
        }

        #[test]
        fn prop_set_node_entries(
            text in gen_cfg(),
            mapping in prop::sample::select(vec!["gpu-pool", "nic-vf", "a16", "new-map"]),
            node in prop::sample::select(vec!["pve1", "pve2"]),
            wanted in prop::collection::vec(any_node_entry(), 0..4),
        ) {
            prop_assert_eq!(PciCfg::parse(&text).render(), text.clone());
            let wanted: Vec<MapEntry> = wanted.into_iter().map(|mut e| { e.node = node.to_string(); e }).collect();
            let mut cfg = PciCfg::parse(&text);
            let before = cfg.mappings();
            let spans = cfg.spans();
            let target = spans.iter().rev().find(|s| s.id == mapping).cloned();
            cfg.set_node_entries(mapping, node, &wanted);
            let out = cfg.render();
            let after = cfg.mappings();

            // The node's entries are exactly `wanted`; everything else PVE sees is unchanged.
            let got: Vec<MapEntry> = after.get(mapping).map(|v| v.iter().filter(|e| e.node == node).cloned().collect()).unwrap_or_default();
            prop_assert_eq!(&got, &wanted);
            let others = |m: &BTreeMap<String, Vec<MapEntry>>| -> BTreeMap<String, Vec<MapEntry>> {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.iter().filter(|e| k != mapping || e.node != node).cloned().collect::<Vec<_>>()))
                    .filter(|(_, v)| !v.is_empty())
                    .collect()
            };
            prop_assert_eq!(others(&before), others(&after));

            // Foreign lines are an identical subsequence (minus the section when it was removed).
            let old = PciCfg::parse(&text);
            let mut skip: BTreeSet<usize> = BTreeSet::new();
            if let Some(span) = &target {
                skip.extend(old.map_lines(span).into_iter().filter(|m| m.entry.node == node).map(|m| m.idx));
                if !after.contains_key(mapping) {
                    for s in spans.iter().filter(|s| s.id == mapping) {
                        skip.extend(s.header..=s.end);
                    }
                }
            }
            let old_lines = lines(&text);
            let foreign: Vec<&str> = old_lines.iter().enumerate().filter(|(i, _)| !skip.contains(i)).map(|(_, l)| *l).collect();
            prop_assert!(is_subsequence(&foreign, &lines(&out)), "{}\n---\n{}", text, out);

            // Idempotent.
            prop_assert!(!cfg.set_node_entries(mapping, node, &wanted));
            prop_assert_eq!(cfg.render(), out);
        }
    }
}
