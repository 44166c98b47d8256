//! `extraArgs` checked the way SGLang's own argparse parser would read them, against the flag
//! table (`flags.rs`): every word is a known flag or a value of the flag before it, each flag
//! has as many values as it takes, values are in its choices and parse as its type, and no
//! flag is given twice (argparse would silently keep the last).
//!
//! Abbreviations are refused although argparse accepts unique prefixes: a prefix that is
//! unique in one SGLang version may be ambiguous in the next.

use super::flags::{self, Arity, Flag, ValueType};
use std::collections::BTreeMap;

/// One word group of `extraArgs`, as SGLang's argparse parser would group the words.
#[derive(Debug, Clone, PartialEq)]
pub enum Word<'a> {
    /// `--opt [values...]` (or `--opt=value`); `flag` is `None` for a flag SGLang does not have,
    /// whose values are then every word up to the next flag.
    Flag {
        at: usize,
        opt: String,
        flag: Option<&'static Flag>,
        values: Vec<(usize, &'a str)>,
    },
    /// A word that is no flag and no flag's value; `after_switch` names the switch before it.
    Stray {
        at: usize,
        after_switch: Option<String>,
    },
}

/// Groups `args` into flags with their values (each value with its index in `args`).
pub fn split(args: &[String]) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut after_switch: Option<String> = None;
    while i < args.len() {
        let word = &args[i];
        let Some(rest) = word.strip_prefix("--") else {
            out.push(Word::Stray {
                at: i,
                after_switch: after_switch.take(),
            });
            i += 1;
            continue;
        };
        let (opt, inline) = match rest.split_once('=') {
            Some((name, v)) => (format!("--{name}"), Some(v)),
            None => (word.clone(), None),
        };
        let flag = flags::lookup(&opt);
        let mut values: Vec<(usize, &str)> = inline.map(|v| (i, v)).into_iter().collect();
        let mut j = i + 1;
        if values.is_empty() {
            let (takes, many) = match flag.map(|f| f.arity) {
                None => (true, true),
                Some(Arity::None) => (false, false),
                Some(a) => (true, matches!(a, Arity::OneOrMore | Arity::ZeroOrMore)),
            };
            while takes && j < args.len() && !args[j].starts_with("--") {
                values.push((j, args[j].as_str()));
                j += 1;
                if !many {
                    break;
                }
            }
        }
        after_switch = flag
            .is_some_and(|f| f.arity == Arity::None)
            .then(|| opt.clone());
        out.push(Word::Flag {
            at: i,
            opt,
            flag,
            values,
        });
        i = j;
    }
    out
}

/// Problems of `args`, each with the index of the word it is about.
pub fn check(args: &[String], managed: &[&str]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for w in split(args) {
        let (i, opt, flag, values) = match w {
            Word::Stray { at, after_switch } => {
                let word = &args[at];
                let msg = match after_switch {
                    Some(sw) => format!("{word:?} follows {sw}, a switch that takes no value"),
                    None => format!("{word:?} is not a flag and follows no flag that takes a value; extraArgs holds --flag [value] words only"),
                };
                out.push((at, msg));
                continue;
            }
            Word::Flag {
                at,
                opt,
                flag,
                values,
            } => (at, opt, flag, values),
        };
        let Some(flag) = flag else {
            // Its values are unknowable: the words up to the next flag are skipped, said once.
            out.push((i, format!("{opt} is not an SGLang 0.5.23 flag (check the spelling; full names only, no abbreviations)")));
            continue;
        };
        if managed.contains(&flag.name.as_str()) {
            out.push((i, format!("{opt} is set by the agent from the spec; use the spec field instead of extraArgs")));
        }
        if let Some(first) = seen.insert(flag.name.clone(), i) {
            out.push((
                i,
                format!(
                    "{} is given twice (also extraArgs[{first}]); SGLang would keep only the last",
                    flag.name
                ),
            ));
        }
        arity(&mut out, i, &opt, flag.arity, values.len());
        for (k, v) in &values {
            value(&mut out, *k, &opt, flag, v);
        }
    }
    out
}

/// The number of values fits the flag.
fn arity(out: &mut Vec<(usize, String)>, i: usize, opt: &str, a: Arity, n: usize) {
    let wrong = match a {
        Arity::None => (n > 0).then_some("is a switch and takes no value"),
        Arity::One => (n != 1).then_some("takes exactly one value"),
        Arity::Optional => (n > 1).then_some("takes at most one value"),
        Arity::OneOrMore => (n == 0).then_some("takes one or more values"),
        Arity::ZeroOrMore => None,
    };
    if let Some(w) = wrong {
        out.push((i, format!("{opt} {w} (found {n})")));
    }
}

/// A value is one of the flag's choices and parses as its type.
fn value(out: &mut Vec<(usize, String)>, k: usize, opt: &str, flag: &flags::Flag, v: &str) {
    if let Err(m) = flags::check_choice(&flag.name, v) {
        out.push((k, m.replace(&flag.name, opt)));
        return;
    }
    let ok = match flag.value {
        ValueType::Int => v.parse::<i64>().is_ok(),
        ValueType::Float => v.parse::<f64>().is_ok_and(f64::is_finite),
        ValueType::Other => true,
    };
    if !ok {
        let ty = if flag.value == ValueType::Int {
            "an integer"
        } else {
            "a number"
        };
        out.push((k, format!("{v:?} is not {ty}, as {opt} needs")));
    }
}

#[cfg(test)]
mod tests;
