//! The line grammar of PVE's `SectionConfig::parse_config` with the PCI mapping's section
//! header (the bare mapping ID): comments, section ends, headers and property lines.

use crate::proxmox::lines::is_ws;

/// `^\s*#`
pub(super) fn is_comment(c: &str) -> bool {
    c.trim_start_matches(is_ws).starts_with('#')
}

/// Perl-false line: ends a section (and is skipped at top level).
pub(super) fn is_false(c: &str) -> bool {
    c.is_empty() || c == "0"
}

/// `^(\S+)\s*$` -> the ID.
pub(super) fn section_header(c: &str) -> Option<&str> {
    let end = c.find(is_ws).unwrap_or(c.len());
    let (id, rest) = c.split_at(end);
    (!id.is_empty() && rest.chars().all(is_ws)).then_some(id)
}

/// `^\s+(\S+)(\s+(.*\S))?\s*$` -> (key, value).
pub(super) fn property(c: &str) -> Option<(&str, Option<&str>)> {
    let body = c.trim_start_matches(is_ws);
    if body.len() == c.len() || body.is_empty() {
        return None;
    }
    let end = body.find(is_ws).unwrap_or(body.len());
    let (key, rest) = body.split_at(end);
    let value = rest.trim_matches(is_ws);
    Some((key, (!value.is_empty()).then_some(value)))
}
