//! SGLang 0.5.23's launch flags, from the parser `prepare_server_args` builds.
//!
//! The table (`server-args.tsv`) was dumped from the real package (see its header).
//! It lets the agent reject an unknown flag in `extraArgs` and check choices of
//! `--tool-call-parser` / `--reasoning-parser` before anything reaches a host.

use std::collections::BTreeMap;
use std::sync::OnceLock;

const TABLE: &str = include_str!("server-args.tsv");

/// One flag of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// Primary option string, `--tp-size`.
    pub name: String,
    /// Takes no value (store_true / BooleanOptionalAction).
    pub is_switch: bool,
    /// Allowed values; empty = unrestricted.
    pub choices: Vec<String>,
    /// How many values follow the flag (argparse's `nargs`).
    pub arity: Arity,
    /// What each value must parse as.
    pub value: ValueType,
}

/// How many values a flag takes, as argparse's `nargs` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// A switch: no value.
    None,
    /// Exactly one value (argparse's default).
    One,
    /// `nargs=?`: zero or one.
    Optional,
    /// `nargs=+`: one or more.
    OneOrMore,
    /// `nargs=*`: zero or more.
    ZeroOrMore,
}

/// The type a flag's values are parsed as, where the agent can check it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    Int,
    Float,
    /// Text, JSON or anything else argparse hands to a custom parser.
    Other,
}

/// Every option string (primary and aliases) mapped to its flag.
pub fn table() -> &'static BTreeMap<String, Flag> {
    static T: OnceLock<BTreeMap<String, Flag>> = OnceLock::new();
    T.get_or_init(|| {
        let mut map = BTreeMap::new();
        for line in TABLE.lines().filter(|l| l.starts_with("--")) {
            let cols: Vec<&str> = line.split('\t').collect();
            let name = cols.first().copied().unwrap_or_default().to_string();
            let aliases = cols.get(1).copied().unwrap_or_default();
            let ty = cols.get(2).copied().unwrap_or_default();
            let choices = cols
                .get(4)
                .map(|c| {
                    c.split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let is_switch = ty.contains("bool(") || ty.contains("const(") || ty == "help";
            let arity = if is_switch {
                Arity::None
            } else if ty.contains("nargs=+") {
                Arity::OneOrMore
            } else if ty.contains("nargs=*") {
                Arity::ZeroOrMore
            } else if ty.contains("nargs=?") {
                Arity::Optional
            } else {
                Arity::One
            };
            let value = match ty.split(';').next().unwrap_or_default() {
                "int" => ValueType::Int,
                "float" => ValueType::Float,
                _ => ValueType::Other,
            };
            let flag = Flag {
                name: name.clone(),
                is_switch,
                choices,
                arity,
                value,
            };
            for alias in aliases.split(',').filter(|a| a.starts_with("--")) {
                map.insert(alias.to_string(), flag.clone());
            }
            map.insert(name, flag);
        }
        map
    })
}

/// Looks up an option string (`--tp` style prefixes are not accepted: argparse
/// abbreviations are ambiguous across versions, so the agent wants full names).
pub fn lookup(option: &str) -> Option<&'static Flag> {
    table().get(option)
}

/// Checks `value` against the flag's choices. `Err` lists a few allowed values.
pub fn check_choice(option: &str, value: &str) -> Result<(), String> {
    let Some(flag) = lookup(option) else {
        return Err(format!("{option} is not an SGLang 0.5.23 flag"));
    };
    if flag.choices.is_empty() || flag.choices.iter().any(|c| c == value) {
        return Ok(());
    }
    Err(format!(
        "{value:?} is not a valid {option}; SGLang 0.5.23 accepts one of: {}",
        flag.choices.join(", ")
    ))
}

#[cfg(test)]
mod tests;
