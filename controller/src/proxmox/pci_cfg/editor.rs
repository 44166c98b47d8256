//! The editor: [`PciCfg`]'s parse, render, read and edit methods. Every original line is kept
//! byte for byte; an edit touches only one node's `map` lines of one section (plus the section
//! header and terminator when a section is created or removed).

use std::collections::{BTreeMap, BTreeSet};

use super::map_entry::{invalid, is_valid_mapping_id, is_valid_node};
use super::section_config::{is_comment, is_false, property, section_header};
use super::{MapEntry, MapLine, PciCfg, PciCfgError, Span};
use crate::proxmox::lines::{content, first_line_ending, line_ending, split_lines, terminate};

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
    pub(super) fn spans(&self) -> Vec<Span> {
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
    pub(super) fn map_lines(&self, span: &Span) -> Vec<MapLine> {
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
