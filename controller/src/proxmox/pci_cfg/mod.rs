//! Byte-preserving editor for the cluster-wide PCI resource mapping file
//! (`/etc/pve/mapping/pci.cfg`, `PVE::Mapping::PCI`).
//!
//! Why: the agent maintains the `map` lines of its own node in a file shared by every node of
//! the cluster and edited by humans and the PVE GUI/API. PVE itself would drop comments on its
//! next write, but until then (and for other nodes' lines always) we must not disturb anything.
//!
//! The structure follows `PVE::SectionConfig::parse_config` (pve-common,
//! `src/PVE/SectionConfig.pm`) with the section header override `parse_section_header` of
//! `PVE::Mapping::PCI` (pve-guest-common, `src/PVE/Mapping/PCI.pm`) exactly:
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
//!
//! Layout: this file holds the types; `map_entry.rs` the `map` property string (parse, print,
//! validate), `section_config.rs` the line grammar of PVE's section config, `editor.rs`
//! [`PciCfg`]'s methods, and `tests.rs` the tests.

use serde::{Deserialize, Serialize};

mod editor;
mod map_entry;
mod section_config;
#[cfg(test)]
mod tests;

pub use map_entry::is_valid_mapping_id;

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
