//! Who may set which SGLang flag, and which flags take a path: the project's list
//! (`flag-policy.tsv`, beside SGLang's own flag table `server-args.tsv`).
//!
//! SGLang has hundreds of flags, and some of them run code: `--forward-hooks` imports and calls
//! what its JSON names, `--enable-custom-logit-processor` unpickles what every request carries,
//! `--config` merges arguments from a file the agent never reads. So a tenant may set only the
//! flags listed as `tenant` (they tune serving); every other flag needs the slice's admin
//! (`servers.allowedFlags`). Whether a value is a path is read from this table, never guessed
//! from how the value looks.

use std::collections::BTreeMap;
use std::sync::OnceLock;

const TABLE: &str = include_str!("flag-policy.tsv");

/// Who may set a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// Any InferenceServer: the flag tunes serving.
    Tenant,
    /// Only when the slice's admin lists it (`servers.allowedFlags`).
    Admin,
}

/// What a flag's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// Anything SGLang's parser accepts.
    Plain,
    /// A file or directory: absolute, normalized, under a model root.
    Path,
    /// A path as for [`Value::Path`], or the name of a built-in template.
    Template,
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub who: Who,
    pub value: Value,
    /// For tenant flags what they tune; for admin flags why a tenant may not set them.
    pub why: String,
}

/// The table by primary flag name.
pub fn table() -> &'static BTreeMap<String, Rule> {
    static T: OnceLock<BTreeMap<String, Rule>> = OnceLock::new();
    T.get_or_init(|| {
        TABLE
            .lines()
            .filter(|l| l.starts_with("--"))
            .map(|l| {
                let c: Vec<&str> = l.split('\t').collect();
                let who = match c.get(1).copied() {
                    Some("tenant") => Who::Tenant,
                    _ => Who::Admin,
                };
                let value = match c.get(2).copied() {
                    Some("path") => Value::Path,
                    Some("template") => Value::Template,
                    _ => Value::Plain,
                };
                let why = c.get(3).copied().unwrap_or_default().to_string();
                (c[0].to_string(), Rule { who, value, why })
            })
            .collect()
    })
}

/// The rule of `flag` (a primary name); a flag the table does not list is admin-only with a
/// plain value.
pub fn rule(flag: &str) -> Rule {
    table().get(flag).cloned().unwrap_or(Rule {
        who: Who::Admin,
        value: Value::Plain,
        why: "it is not among the serving tunables any server may set".into(),
    })
}

/// Whether `v` names a built-in template rather than a file: letters, digits, `-`, `_`, `.`,
/// no `/`, not `.` or `..`. The unit's working directory is private and empty, so such a name
/// cannot open a file there.
pub fn is_template_name(v: &str) -> bool {
    !v.is_empty()
        && v != "."
        && v != ".."
        && v.len() <= 128
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests;
