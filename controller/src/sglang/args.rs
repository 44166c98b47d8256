//! `extraArgs` checked the way SGLang's own argparse parser would read them, against the flag
//! table (`flags.rs`): every word is a known flag or a value of the flag before it, each flag
//! has as many values as it takes, values are in its choices and parse as its type, and no
//! flag is given twice (argparse would silently keep the last).
//!
//! Abbreviations are refused although argparse accepts unique prefixes: a prefix that is
//! unique in one SGLang version may be ambiguous in the next.

use super::flags::{self, Arity, ValueType};
use std::collections::BTreeMap;

/// Problems of `args`, each with the index of the word it is about.
pub fn check(args: &[String], managed: &[&str]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut i = 0;
    // The switch just before, for a clearer message about a value given to it.
    let mut after_switch: Option<String> = None;
    while i < args.len() {
        let word = &args[i];
        let Some(rest) = word.strip_prefix("--") else {
            let msg = match after_switch.take() {
                Some(sw) => format!("{word:?} follows {sw}, a switch that takes no value"),
                None => format!("{word:?} is not a flag and follows no flag that takes a value; extraArgs holds --flag [value] words only"),
            };
            out.push((i, msg));
            i += 1;
            continue;
        };
        let (opt, inline) = match rest.split_once('=') {
            Some((name, v)) => (format!("--{name}"), Some(v.to_string())),
            None => (word.clone(), None),
        };
        let Some(flag) = flags::lookup(&opt) else {
            out.push((i, format!("{opt} is not an SGLang 0.5.23 flag (check the spelling; full names only, no abbreviations)")));
            // Its values are unknowable: skip the words up to the next flag, said once.
            i += 1;
            while i < args.len() && !args[i].starts_with("--") {
                i += 1;
            }
            after_switch = None;
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
        // The values: inline after '=', else the following words up to the next flag.
        let mut values: Vec<(usize, String)> = inline.map(|v| (i, v)).into_iter().collect();
        let mut j = i + 1;
        if values.is_empty() {
            let takes_many = matches!(flag.arity, Arity::OneOrMore | Arity::ZeroOrMore);
            while j < args.len() && !args[j].starts_with("--") && flag.arity != Arity::None {
                values.push((j, args[j].clone()));
                j += 1;
                if !takes_many {
                    break;
                }
            }
        }
        after_switch = (flag.arity == Arity::None).then(|| opt.clone());
        arity(&mut out, i, &opt, flag.arity, values.len());
        for (k, v) in &values {
            value(&mut out, *k, &opt, flag, v);
        }
        i = j;
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
