//! The CRDs' own schema, enforced on manifest files exactly where the API server would enforce
//! it: one source of truth, the `openAPIV3Schema` generated from the `crds` crate (the same
//! text as `crds/gpuplane.dev_crds.yaml`), checked by a JSON-schema validator.
//!
//! What `kubectl apply` adds on top of the stored schema is added here too:
//! - unknown fields are refused (`enviroment:`), as kubectl's validation does; the API server
//!   would prune them silently, which is how a typo loses a setting;
//! - `metadata` holds only ObjectMeta's fields, and `metadata.name` / `namespace` follow
//!   Kubernetes' name rules (DNS-1123 subdomain / label);
//! - integers of a `uintN`/`intN` format must fit it, so a value out of range gets the field's
//!   path instead of a deserializer's message.
//!
//! OpenAPI's `nullable: true` becomes a `null` type; `status` is not checked (the agent owns it).

use serde_json::{json, Map, Value};
use std::sync::OnceLock;

/// The fields of ObjectMeta a manifest may set.
const OBJECT_META: &[&str] = &[
    "name",
    "namespace",
    "generateName",
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// A DNS-1123 subdomain: what Kubernetes requires of these objects' names.
const DNS_SUBDOMAIN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A DNS-1123 label: what Kubernetes requires of a namespace.
const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// One schema problem: the field's path (`spec.listen.port`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Checks a manifest of `kind` against its CRD's schema; every problem, in document order.
pub fn check(kind: &str, doc: &Value) -> Vec<SchemaError> {
    let Some(v) = validator(kind) else {
        return vec![];
    };
    let mut errors: Vec<SchemaError> = v
        .iter_errors(doc)
        .flat_map(|e| {
            let field = field_path(e.instance_path().as_str());
            let message = e.to_string();
            match unknown_fields(&message) {
                Some(names) => names
                    .into_iter()
                    .map(|n| SchemaError {
                        field: child(&field, &n),
                        message: format!("unknown field {n:?}; check its spelling against the CRD (kubectl explain {kind}.spec)"),
                    })
                    .collect(),
                None => vec![SchemaError {
                    field,
                    message: message_of(&e),
                }],
            }
        })
        .collect();
    errors.dedup();
    errors
}

/// The names in "Additional properties are not allowed ('a', 'b' were unexpected)".
fn unknown_fields(m: &str) -> Option<Vec<String>> {
    let rest = m.strip_prefix("Additional properties are not allowed (")?;
    let list = rest
        .strip_suffix(" was unexpected)")
        .or_else(|| rest.strip_suffix(" were unexpected)"))?;
    Some(
        list.split(", ")
            .map(|n| n.trim_matches('\'').to_string())
            .collect(),
    )
}

/// `parent.name`, or `name` at the top.
fn child(parent: &str, name: &str) -> String {
    if parent == "(document)" {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}

/// The longest rendering of the offending value a message echoes.
const SHOWN_MAX: usize = 80;

/// What each pattern of the CRDs (and of `metadata`) asks for, in words with an example: a
/// refusal says the form expected and how to write it, never the regular expression.
const PATTERNS: &[(&str, &str)] = &[
    (DNS_SUBDOMAIN, "is not a valid Kubernetes name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit (e.g. kpro6)"),
    (DNS_LABEL, "is not a valid Kubernetes name: lower-case letters, digits and '-', starting and ending with a letter or digit (e.g. confidential-vm)"),
    (gpuplane_crds::KERNEL_ARG_PATTERN, "is not one kernel argument: one word of letters, digits and _ . , : = / + @ % -, not starting with '-' (no whitespace, quotes or shell characters), e.g. vfio-pci.disable_idle_d3=1; list each word on its own"),
    (gpuplane_crds::KERNEL_ARG_KEY_PATTERN, "is not a kernel argument's key: the part before '=', letters, digits and _ . -, not starting with '.' or '-' (e.g. console for console=ttyS0)"),
    (r"^([01][0-9]|2[0-3]):[0-5][0-9]$", "is not a time of day as HH:MM, 00:00 to 23:59 UTC with two digits each (e.g. \"02:00\", quoted in YAML)"),
    (gpuplane_crds::PCI_ADDRESS_PATTERN, "is not a PCI address: [domain:]bus:device.function in lower-case hex (e.g. 0000:81:00.0 or 81:00.0, as lspci -D shows)"),
    (r"^[a-zA-Z][a-zA-Z0-9_\-]+$", "is not a Proxmox PCI mapping name: a letter, then at least one letter, digit, '_' or '-' (e.g. pro6000-vm, as in /etc/pve/mapping/pci.cfg)"),
    (r"^[A-Za-z_][A-Za-z0-9_]*$", "is not an environment variable name: a letter or '_', then letters, digits or '_' (e.g. CUDA_HOME)"),
    (r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$", "is not a tool name: a letter or '_', then at most 63 letters, digits, '_' or '-' (e.g. get_weather)"),
];

/// What pattern `p` asks for, in words ([`PATTERNS`]); never the expression itself.
fn pattern_words(p: &str) -> &'static str {
    PATTERNS
        .iter()
        .find(|(q, _)| *q == p)
        .map(|(_, w)| *w)
        .unwrap_or("does not have the form this field takes (kubectl explain describes it)")
}

/// The offending value as a message echoes it: JSON, one line, at most [`SHOWN_MAX`] bytes; a
/// longer string or list is cut and says how long it was.
fn shown(v: &Value) -> String {
    let text = v.to_string();
    if text.len() <= SHOWN_MAX {
        return text;
    }
    match v {
        Value::String(s) => format!(
            "{:?} ({} characters)",
            crate::text::sanitize(s, SHOWN_MAX - 24),
            s.chars().count()
        ),
        Value::Array(a) => format!(
            "{} ({} items)",
            crate::text::sanitize(&text, SHOWN_MAX - 16),
            a.len()
        ),
        _ => crate::text::sanitize(&text, SHOWN_MAX),
    }
}

/// The validator's error in the words of a spec error: the offending value capped
/// ([`shown`]), a pattern said in words ([`PATTERNS`]), then [`readable`].
fn message_of(e: &jsonschema::ValidationError<'_>) -> String {
    let value = shown(e.instance());
    if let jsonschema::error::ValidationErrorKind::Pattern { pattern } = e.kind() {
        return format!("{value} {}", pattern_words(pattern));
    }
    let m = e.to_string();
    let full = e.instance().to_string();
    match m.strip_prefix(&full) {
        Some(rest) => readable(&format!("{value}{rest}")),
        None => readable(&crate::text::sanitize(&m, 2 * SHOWN_MAX + 200)),
    }
}

/// The validator's message in the words of a spec error: an empty required string "is
/// required", integer bounds without a trailing `.0`.
fn readable(m: &str) -> String {
    if m == "\"\" is shorter than 1 character" {
        return "is required: it must not be empty".into();
    }
    // An int-or-string field (`maxUnavailable`) given a float, a list, an object or a boolean.
    if let Some((value, types)) = m.split_once(" is not of types ") {
        if types.contains("\"integer\", \"string\"") {
            return format!("{value} is neither a whole number nor a string; write a count or a percentage, e.g. 1 or \"25%\"");
        }
    }
    if m == "[] has less than 1 item" {
        return "lists nothing; at least one entry is needed".into();
    }
    let mut out = m.to_string();
    for key in ["maximum of ", "minimum of "] {
        if let Some(at) = out.find(key) {
            let num = &out[at + key.len()..];
            if let Some(int) = num.strip_suffix(".0") {
                if int.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
                    out = format!("{}{key}{int}", &out[..at]);
                }
            }
        }
    }
    out
}

/// `/spec/slices/1/driver` → `spec.slices[1].driver`.
fn field_path(pointer: &str) -> String {
    let mut out = String::new();
    for seg in pointer.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&seg);
        }
    }
    if out.is_empty() {
        "(document)".into()
    } else {
        out
    }
}

/// One kind's committed schema and its validator, built the first time a manifest of the kind
/// is checked.
struct Kind {
    schema: Value,
    validator: OnceLock<Option<jsonschema::Validator>>,
}

/// The validator of `kind` (`None`: not one of ours, or its schema does not compile — said in
/// the log), from the committed CRDs' schemas (`gpuplane_crds::CRD_SCHEMAS_JSON`).
///
/// Each kind's is compiled only when a manifest of that kind is checked, once a process:
/// compiling them is most of what a one-shot `gpuplane plan` computes (all three kinds: 9.7 M of
/// its 19.9 M instructions, callgrind), and a host's manifests often hold one kind only (a
/// passthrough host: its partition).
fn validator(kind: &str) -> Option<&'static jsonschema::Validator> {
    static KINDS: OnceLock<Vec<(String, Kind)>> = OnceLock::new();
    let kinds = KINDS.get_or_init(|| {
        crd_schemas()
            .into_iter()
            .map(|(k, schema)| {
                let validator = OnceLock::new();
                (k, Kind { schema, validator })
            })
            .collect()
    });
    let (_, k) = kinds.iter().find(|(k, _)| k == kind)?;
    k.validator
        .get_or_init(|| {
            jsonschema::options()
                .with_draft(jsonschema::Draft::Draft4)
                .build(&manifest_schema(k.schema.clone()))
                .map_err(|e| tracing::error!("the {kind} schema does not compile: {e}"))
                .ok()
        })
        .as_ref()
}

/// Kind → its CRD's `openAPIV3Schema`, as committed.
fn crd_schemas() -> Vec<(String, Value)> {
    match serde_json::from_str(gpuplane_crds::CRD_SCHEMAS_JSON) {
        Ok(Value::Object(m)) => m.into_iter().collect(),
        _ => {
            tracing::error!("the embedded CRD schemas do not parse");
            vec![]
        }
    }
}

/// The CRD's schema as a JSON schema for a manifest (see the module doc).
pub fn manifest_schema(mut crd_schema: Value) -> Value {
    close(&mut crd_schema);
    if let Some(props) = crd_schema
        .get_mut("properties")
        .and_then(Value::as_object_mut)
    {
        props.remove("status");
        props.insert("metadata".into(), metadata_schema());
        props.insert("apiVersion".into(), json!({"type": "string"}));
        props.insert("kind".into(), json!({"type": "string"}));
        props.insert("status".into(), json!({}));
    }
    crd_schema
}

/// ObjectMeta: known fields only, names by Kubernetes' rules.
fn metadata_schema() -> Value {
    let mut props = Map::new();
    for f in OBJECT_META {
        props.insert((*f).into(), json!({}));
    }
    props.insert(
        "name".into(),
        json!({"type": "string", "maxLength": 253, "pattern": DNS_SUBDOMAIN}),
    );
    props.insert(
        "namespace".into(),
        json!({"type": "string", "maxLength": 63, "pattern": DNS_LABEL}),
    );
    props.insert(
        "labels".into(),
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
    );
    props.insert(
        "annotations".into(),
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
    );
    json!({"type": "object", "required": ["name"], "properties": props, "additionalProperties": false})
}

/// Recursively: objects with known properties refuse others; `nullable` admits null; integer
/// formats bound their values; `x-kubernetes-int-or-string` admits an integer or a string only
/// (as the API server's structural schema does).
fn close(v: &mut Value) {
    let Some(o) = v.as_object_mut() else {
        if let Some(a) = v.as_array_mut() {
            a.iter_mut().for_each(close);
        }
        return;
    };
    let preserve = o.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if o.contains_key("properties") && !o.contains_key("additionalProperties") && !preserve {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    if o.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) && !o.contains_key("type") {
        o.insert("type".into(), json!(["integer", "string"]));
    }
    if o.remove("nullable") == Some(Value::Bool(true)) {
        match o.get_mut("type") {
            Some(Value::String(t)) => {
                let t = t.clone();
                o.insert("type".into(), json!([t, "null"]));
            }
            Some(Value::Array(ts)) => ts.push(json!("null")),
            _ => {}
        }
    }
    if let Some((min, max)) = o.get("format").and_then(Value::as_str).and_then(bounds) {
        o.entry("minimum").or_insert(json!(min));
        o.entry("maximum").or_insert(json!(max));
    }
    for (_, child) in o.iter_mut() {
        close(child);
    }
}

/// The range of an integer format.
fn bounds(format: &str) -> Option<(f64, f64)> {
    Some(match format {
        "uint8" => (0.0, u8::MAX as f64),
        "uint16" => (0.0, u16::MAX as f64),
        "uint32" => (0.0, u32::MAX as f64),
        "uint64" => (0.0, u64::MAX as f64),
        "int32" => (i32::MIN as f64, i32::MAX as f64),
        "int64" => (i64::MIN as f64, i64::MAX as f64),
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
