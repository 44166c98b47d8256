//! Unit-name validation following systemd.unit(5) ("Description" section)
//! and systemd's `unit_name_is_valid()`.
//!
//! Unit names end up in file names under `/etc/systemd/system` and in
//! `After=`/`WantedBy=` lists, so a name must be checked before it is used
//! anywhere: `/` would escape the unit directory, whitespace would split a
//! dependency list into two names, and `%` would be read as a specifier.

/// Unit type suffixes systemd knows (systemd.unit(5); `unit_type_from_string`).
pub const UNIT_TYPES: [&str; 11] = [
    "service",
    "socket",
    "device",
    "mount",
    "automount",
    "swap",
    "target",
    "path",
    "timer",
    "slice",
    "scope",
];

/// systemd's `UNIT_NAME_MAX` is 256 including the terminating NUL.
const UNIT_NAME_MAX_LEN: usize = 255;

/// Characters allowed in a unit name besides `@` (systemd's `VALID_CHARS`).
/// `\` is allowed because systemd-escape(1) writes `\xNN` escapes into names.
fn is_valid_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_' | '.' | '\\')
}

fn suffix_list() -> String {
    UNIT_TYPES
        .iter()
        .map(|t| format!(".{t}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Valid systemd unit name per systemd.unit(5): max 255 chars, charset
/// `[A-Za-z0-9:_.\\-]` plus `@` for templates/instances, and a known unit type
/// suffix (`.service`, `.target`, ...).
///
/// Accepts plain names (`foo.service`), templates (`foo@.service`) and
/// instances (`foo@bar.service`), exactly like systemd's
/// `unit_name_is_valid(name, UNIT_NAME_ANY)`. A name that passes contains no
/// `/`, whitespace, `%`, quotes or control characters, so it is safe both as a
/// file name inside a unit directory and as one word in `After=`/`WantedBy=`.
///
/// The `Err` message says what is wrong and how to fix it.
pub fn validate_unit_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("unit name is empty; use e.g. `sglang-qwen.service`".to_string());
    }
    if name.len() > UNIT_NAME_MAX_LEN {
        return Err(format!(
            "unit name is {} bytes long; systemd allows at most {UNIT_NAME_MAX_LEN}",
            name.len()
        ));
    }
    if let Some((i, c)) = name
        .char_indices()
        .find(|&(_, c)| !(is_valid_name_char(c) || c == '@'))
    {
        return Err(format!(
            "unit name {name:?} contains {c:?} at byte {i}; only ASCII letters, digits, \
             ':', '-', '_', '.', '\\' and '@' are allowed"
        ));
    }
    let Some((prefix, suffix)) = name.rsplit_once('.') else {
        return Err(format!(
            "unit name {name:?} has no unit type suffix; append one of {}",
            suffix_list()
        ));
    };
    if !UNIT_TYPES.contains(&suffix) {
        return Err(format!(
            "unit name {name:?} has unknown unit type suffix \".{suffix}\"; expected one of {}",
            suffix_list()
        ));
    }
    if prefix.is_empty() {
        return Err(format!(
            "unit name {name:?} has nothing before the \".{suffix}\" suffix"
        ));
    }
    if prefix.starts_with('@') {
        return Err(format!(
            "unit name {name:?} starts with '@'; a template name needs a prefix, e.g. \"foo@.{suffix}\""
        ));
    }
    Ok(())
}

/// Appends `.service` when no known unit type suffix is present, then
/// validates with [`validate_unit_name`].
///
/// `sglang-qwen` becomes `sglang-qwen.service`; `sglang-qwen.service` is kept.
/// A name whose last dot is followed by something that is not a unit type
/// (`qwen2.5`, `x.unknownsuffix`) is treated as having no suffix, so it gets
/// `.service` appended (`qwen2.5.service`), which is valid.
///
/// Caveat: a name that already carries a *different* known suffix
/// (`foo.socket`, `foo.target`) is rejected rather than returned unchanged,
/// because callers use the result as the name of the service unit they render;
/// silently handing back `foo.target` would install a service under a target's
/// name.
pub fn service_unit_name(name: &str) -> Result<String, String> {
    let full = match name.rsplit_once('.') {
        Some((_, "service")) => name.to_string(),
        Some((_, suffix)) if UNIT_TYPES.contains(&suffix) => {
            return Err(format!(
                "{name:?} names a {suffix} unit; gpuplane renders service units, \
                 use a name ending in \".service\" or without a suffix"
            ));
        }
        _ => format!("{name}.service"),
    };
    validate_unit_name(&full)?;
    Ok(full)
}

#[cfg(test)]
mod tests;
