//! The `map` property string of a mapping: [`MapEntry::parse`] checks it the way PVE's
//! `parse_property_string` and the `map` schema do, [`MapEntry::to_property_string`] prints it
//! the way the PVE GUI does, and the validators of node names, PCI IDs, PCI paths and mapping
//! IDs follow the schema's patterns.

use std::collections::BTreeSet;

use super::{MapEntry, PciCfgError};
use crate::proxmox::lines::is_ws;

/// Maximum length of the `description` values (schema `maxLength`).
const MAX_DESCRIPTION_LEN: usize = 4096;

pub(super) fn invalid(key: &str, value: &str, reason: &'static str) -> PciCfgError {
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
pub(super) fn is_valid_node(s: &str) -> bool {
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
