//! What the view shows, read leniently out of status documents (a status file's YAML, or an
//! object's status from the API turned into the same shape): a field of the wrong type is left
//! out, never a reason to fail, and every string is sanitized and capped here, once, so the
//! rest of the view handles only safe, bounded text.

use serde_json::Value;
use std::collections::BTreeMap;

/// Caps on what one document may contribute (a status file is written by the agent, but the
/// view trusts no file: a huge or hostile one must print a bounded, escape-free view).
pub const MAX_GPUS: usize = 512;
pub const MAX_CONDITIONS: usize = 64;
const NAME_MAX: usize = 253;
const WORD_MAX: usize = 128;
/// A condition's message in `-o wide` (the whole message stays in `-o yaml`).
const MESSAGE_MAX: usize = 400;

/// One status document and where it came from (`GpuPartition-kpro6.yaml`, or the resource for
/// an API object); `Err` holds why it could not be read.
#[derive(Clone, Debug)]
pub struct Doc {
    pub origin: String,
    pub kind: Kind,
    pub value: Result<Value, String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Partition,
    Server,
    /// `_invalid.yaml`: the manifests were refused as a whole.
    Invalid,
}

/// What is known of each partition beyond its status: its node and each slice's consumer, from
/// the spec (the manifests given with `-f`, or the API object).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub node: Option<String>,
    /// slice name → `lxc 129`, `vm 200 (pro6000-vm)`.
    pub consumers: BTreeMap<String, String>,
}

/// Partition name → its spec, where one is at hand.
pub type Specs = BTreeMap<String, Spec>;

/// The consumer column's words for a slice's consumer.
pub fn consumer_words(c: &gpuplane_crds::partition::Consumer) -> Option<String> {
    if let Some(l) = &c.lxc {
        return Some(format!("lxc {}", l.vmid));
    }
    c.vm.as_ref().map(|v| {
        format!(
            "vm {} ({})",
            v.vmid,
            crate::text::sanitize(&v.pci_mapping, WORD_MAX)
        )
    })
}

/// The spec facts of `p`: node and consumers.
pub fn spec_of(p: &gpuplane_crds::GpuPartitionSpec) -> Spec {
    Spec {
        node: Some(clean(&p.node_name, NAME_MAX)),
        consumers: p
            .slices
            .iter()
            .filter_map(|s| {
                let words = s.consumer.as_ref().and_then(consumer_words)?;
                Some((clean(&s.name, NAME_MAX), words))
            })
            .collect(),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    /// `lastTransitionTime`, when it parses.
    pub since: Option<jiff::Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub address: String,
    pub slot: Option<String>,
    pub path: Option<String>,
    pub uuid: Option<String>,
    pub serial: Option<String>,
    pub numa: Option<i64>,
    pub driver: Option<String>,
    pub owner: Option<String>,
    pub missing: bool,
    /// `Healthy`, `Suspect`, `Unhealthy`, `Lost` (`None` from an agent before issue 40).
    pub health: Option<String>,
    /// The first line of its evidence.
    pub evidence: Option<String>,
    /// Its quarantine's stage (`Quarantined`, `Reset`, `Escalated`), when it is out of its slice.
    pub quarantine: Option<String>,
}

/// A resource's status as the view shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// `GpuPartition/kpro6`, `InferenceServer/default/qwen35-122b`.
    pub name: String,
    pub kind: Kind,
    pub conditions: Vec<Condition>,
    pub gpus: Vec<Gpu>,
    pub layout_hash: Option<String>,
    /// Why the document could not be read, in place of its conditions.
    pub unreadable: Option<String>,
}

impl Resource {
    /// The partition's name (`kpro6` of `GpuPartition/kpro6`).
    pub fn short_name(&self) -> &str {
        self.name.split_once('/').map_or(&self.name, |(_, n)| n)
    }
}

/// One line, no escapes, at most `max` bytes; tabs too become spaces (they would break
/// columns), and bidirectional overrides `�` (they would make a terminal show the text in
/// another order than it is).
pub fn clean(s: &str, max: usize) -> String {
    unbidi(&crate::text::sanitize(s, max).replace('\t', " "))
}

/// Whether `c` reorders what a terminal shows (the Trojan Source characters, CVE-2021-42574).
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// `s` with every bidirectional control replaced by `�`.
pub fn unbidi(s: &str) -> String {
    s.chars()
        .map(|c| if is_bidi(c) { '\u{fffd}' } else { c })
        .collect()
}

/// `v` with [`unbidi`] applied to every string, keys too: what `-o yaml` prints (the YAML
/// serializer escapes the other control characters itself).
pub fn unbidi_value(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(unbidi(s)),
        Value::Array(a) => Value::Array(a.iter().map(unbidi_value).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (unbidi(k), unbidi_value(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn text(v: &Value, key: &str, max: usize) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(clean(s, max)),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The resource a document describes: its `resource` field, else the origin without `.yaml`.
fn name_of(d: &Doc) -> String {
    let from_origin = || clean(d.origin.trim_end_matches(".yaml"), NAME_MAX);
    match (&d.kind, &d.value) {
        (Kind::Invalid, _) => "(manifests)".into(),
        (_, Ok(v)) => text(v, "resource", NAME_MAX)
            .filter(|s| !s.is_empty())
            .unwrap_or_else(from_origin),
        _ => from_origin(),
    }
}

fn conditions(v: &Value) -> Vec<Condition> {
    let Some(list) = v.get("conditions").and_then(Value::as_array) else {
        return vec![];
    };
    list.iter()
        .take(MAX_CONDITIONS)
        .filter(|c| c.is_object())
        .map(|c| Condition {
            type_: text(c, "type", WORD_MAX).unwrap_or_else(|| "?".into()),
            status: text(c, "status", WORD_MAX).unwrap_or_else(|| "Unknown".into()),
            reason: text(c, "reason", WORD_MAX).unwrap_or_default(),
            message: text(c, "message", MESSAGE_MAX).unwrap_or_default(),
            since: c
                .get("lastTransitionTime")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok()),
        })
        .collect()
}

fn gpus(v: &Value) -> Vec<Gpu> {
    let Some(list) = v.get("gpus").and_then(Value::as_array) else {
        return vec![];
    };
    list.iter()
        .take(MAX_GPUS)
        .filter(|g| g.is_object())
        .map(|g| Gpu {
            address: text(g, "address", WORD_MAX).unwrap_or_else(|| "?".into()),
            slot: text(g, "slot", WORD_MAX),
            path: text(g, "path", NAME_MAX),
            uuid: text(g, "uuid", WORD_MAX),
            serial: text(g, "serial", WORD_MAX),
            numa: g.get("numa").and_then(Value::as_i64),
            driver: text(g, "driver", WORD_MAX),
            owner: text(g, "owner", NAME_MAX),
            missing: g.get("missing").and_then(Value::as_bool).unwrap_or(false),
            health: text(g, "health", WORD_MAX),
            evidence: g
                .get("evidence")
                .and_then(|e| e.get(0))
                .and_then(Value::as_str)
                .map(|e| crate::text::sanitize(e, NAME_MAX)),
            quarantine: g.get("quarantine").and_then(|q| text(q, "stage", WORD_MAX)),
        })
        .collect()
}

/// The view of one document. `_invalid.yaml` becomes one condition, `Valid=False` with its
/// reason and message (the file has no time).
pub fn resource(d: &Doc) -> Resource {
    let name = name_of(d);
    let mut r = Resource {
        name,
        kind: d.kind,
        conditions: vec![],
        gpus: vec![],
        layout_hash: None,
        unreadable: None,
    };
    match &d.value {
        Err(e) => r.unreadable = Some(clean(e, MESSAGE_MAX)),
        Ok(v) if d.kind == Kind::Invalid => r.conditions.push(Condition {
            type_: "Valid".into(),
            status: "False".into(),
            reason: text(v, "reason", WORD_MAX)
                .unwrap_or_else(|| gpuplane_crds::reason::Reason::InvalidSpec.into()),
            message: text(v, "message", MESSAGE_MAX).unwrap_or_default(),
            since: None,
        }),
        Ok(v) => {
            r.conditions = conditions(v);
            r.gpus = gpus(v);
            r.layout_hash = text(v, "layoutHash", WORD_MAX);
        }
    }
    r
}

#[cfg(test)]
mod tests;
