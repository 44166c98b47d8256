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
            let flag = Flag {
                name: name.clone(),
                is_switch: ty.starts_with("bool(") || ty == "help",
                choices,
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
