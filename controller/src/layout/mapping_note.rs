//! The identity a Proxmox PCI mapping entry names, in its `description`.
//!
//! Why: Proxmox checks a mapping at VM start (`PVE/Mapping/PCI.pm`, `assert_valid`) by the
//! device's `id`, `subsystem-id` and IOMMU group only: on a host of identical GPUs any of them
//! passes at any path. A mapping entry written by the agent therefore also names the GPU it
//! meant, so that a person reading `pci.cfg` sees which physical GPU a path stands for, and so
//! that the planner can tell an entry whose path now holds another GPU (a renumbering, a GPU
//! replaced in place) and take it out before a VM start hands that GPU to the VM.
//!
//! Format: `gpuplane serial=<s> uuid=<u> dsn=<d> slot=<n>`, each field only when known, each
//! value only when it is a plain token (letters, digits, `.`, `_`, `:`, `-`; at most 64): a
//! property string cannot carry a comma, and a slot name is host text. Descriptions that do not
//! start with `gpuplane ` are a person's and are never read as identity.
//!
//! Pure.

use crate::host::model::GpuIdentity;

/// The first word of a description the agent wrote.
const PREFIX: &str = "gpuplane";
/// The longest value a field may carry.
const MAX_VALUE: usize = 64;

/// The description for a GPU of identity `id`; `None` when nothing identifies it.
pub fn describe(id: &GpuIdentity) -> Option<String> {
    let fields = [
        ("serial", &id.serial),
        ("uuid", &id.uuid),
        ("dsn", &id.dsn),
        ("slot", &id.slot),
    ];
    // Built in one buffer: the planner describes every GPU of a VM slice in every plan.
    let mut out = String::with_capacity(96);
    out.push_str(PREFIX);
    for (k, v) in fields {
        if let Some(v) = v.as_deref().filter(|v| is_token(v)) {
            out.extend([" ", k, "=", v]);
        }
    }
    (out.len() > PREFIX.len()).then_some(out)
}

/// The identity a description names: `None` for a description the agent did not write.
/// Unknown fields and malformed words are ignored (a person may have edited it).
pub fn parse(description: &str) -> Option<GpuIdentity> {
    let mut words = description.split(' ');
    if words.next() != Some(PREFIX) {
        return None;
    }
    let mut id = GpuIdentity::default();
    for w in words {
        let Some((k, v)) = w.split_once('=') else {
            continue;
        };
        if !is_token(v) {
            continue;
        }
        let slot = match k {
            "serial" => &mut id.serial,
            "uuid" => &mut id.uuid,
            "dsn" => &mut id.dsn,
            "slot" => &mut id.slot,
            _ => continue,
        };
        *slot = Some(v.to_string());
    }
    Some(id)
}

/// Why the GPU observed at an entry's path (`now`: what can be read of it now, any driver) is
/// not the GPU the entry names (`named`): the first of its own identities (serial, UUID, serial
/// number capability) both know that differ. Only when neither side knows one of those does
/// the slot decide: a device at the path in another slot than the entry names is another board
/// as far as anything can tell (a GPU with no readable identity that was moved between slots
/// is judged a stranger too: taking its entry out only narrows what a VM may take).
pub fn contradiction(named: &GpuIdentity, now: &GpuIdentity) -> Option<String> {
    let pairs = [
        ("serial", &named.serial, &now.serial),
        ("uuid", &named.uuid, &now.uuid),
        ("dsn", &named.dsn, &now.dsn),
    ];
    let differ = |k: &str, a: &Option<String>, b: &Option<String>| match (a, b) {
        (Some(a), Some(b)) if !a.eq_ignore_ascii_case(b) => Some(format!("{k} {a} → {b}")),
        _ => None,
    };
    if let Some(why) = pairs.iter().find_map(|(k, a, b)| differ(k, a, b)) {
        return Some(why);
    }
    let comparable = pairs.iter().any(|(_, a, b)| a.is_some() && b.is_some());
    if comparable {
        return None;
    }
    match (&named.slot, &now.slot) {
        (Some(a), Some(b)) if a != b => Some(format!("slot {a} → {b}")),
        (Some(a), None) => Some(format!("slot {a} → none")),
        _ => None,
    }
}

fn is_token(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_VALUE
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

#[cfg(test)]
mod tests;
