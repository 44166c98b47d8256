//! [`parse`]: unit text back to a [`ParsedUnit`], reading the keys gpuplane renders the way
//! systemd reads them: logical lines (`config_parse()`), specifiers, `config_parse_exec()`,
//! `config_parse_environ()` and `config_parse_working_directory()`.
//!
//! The tests use it to prove `parse(render(spec)) == spec` for hostile input; the simulated
//! host uses it to "run" a unit.

use super::quote::{extract_word, is_control};
use super::{valid_env_name, ParsedUnit, UnitError, LONG_LINE_MAX, WS};

fn syntax(line: usize, reason: impl Into<String>) -> UnitError {
    UnitError::Syntax {
        line,
        reason: reason.into(),
    }
}

/// Splits into logical lines like systemd's `config_parse()`: lines end at
/// `\n`, `\r\n` or `\r`; lines whose first non-blank character is `#` or `;`
/// are comments, even between continuation lines; a line ending in an
/// unescaped `\` is joined with the next one, the backslash becoming a space.
/// Returns (number of the first physical line, text).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut physical = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find(['\n', '\r']) {
            Some(i) => {
                physical.push(&rest[..i]);
                let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = &rest[i + skip..];
            }
            None => {
                physical.push(rest);
                rest = "";
            }
        }
    }

    let mut out = Vec::new();
    let mut continuation: Option<(usize, String)> = None;
    for (i, line) in physical.into_iter().enumerate() {
        let lead = line.trim_start_matches([' ', '\t']);
        if lead.starts_with('#') || lead.starts_with(';') {
            continue;
        }
        let (start, mut buf) = match continuation.take() {
            Some((start, mut buf)) => {
                buf.push_str(line);
                (start, buf)
            }
            None => (i + 1, line.to_string()),
        };
        let mut escaped = false;
        for b in buf.bytes() {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            }
        }
        if escaped {
            buf.pop();
            buf.push(' ');
            continuation = Some((start, buf));
        } else {
            out.push((start, buf));
        }
    }
    if let Some(c) = continuation {
        out.push(c);
    }
    out
}

fn trim_ws(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\n', '\r'])
}

/// `extract_first_word_and_warn()`: strict first, then retried with
/// `EXTRACT_CUNESCAPE_RELAX` (systemd logs a warning and keeps going).
fn extract_word_relaxed(
    s: &[u8],
    pos: &mut usize,
    line: usize,
) -> Result<Option<String>, UnitError> {
    let start = *pos;
    let word = match extract_word(s, pos, false) {
        Ok(w) => w,
        Err(_) => {
            *pos = start;
            extract_word(s, pos, true).map_err(|e| syntax(line, e))?
        }
    };
    word.map(|w| bytes_to_string(w, line)).transpose()
}

fn bytes_to_string(bytes: Vec<u8>, line: usize) -> Result<String, UnitError> {
    String::from_utf8(bytes).map_err(|_| syntax(line, "escape sequences produce invalid UTF-8"))
}

/// Specifier resolution as far as gpuplane needs it (systemd.unit(5)
/// "SPECIFIERS"): `%%` becomes `%`, a stray `%` at the very end is kept like
/// systemd does, every other specifier is an error because its value depends
/// on the host and the renderer never writes one.
fn resolve_specifiers(s: &str, line: usize) -> Result<String, UnitError> {
    if !s.contains('%') {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            None | Some('%') => out.push('%'),
            Some(specifier) => return Err(UnitError::Specifier { line, specifier }),
        }
    }
    Ok(out)
}

/// Exec-time variable substitution (systemd.service(5) "COMMAND LINES") as far
/// as it can be decided without an environment: `$$` becomes `$`; `$` before
/// a character that cannot start a name stays `$`. A word that is a variable
/// reference on its own (`$X...`; systemd splits it, or drops it when unset),
/// `${` and `$NAME` inside a word are errors.
fn substitute_variables(word: &str, line: usize) -> Result<String, UnitError> {
    let refuse = || UnitError::EnvSubstitution {
        line,
        word: word.to_string(),
    };
    if !word.contains('$') {
        return Ok(word.to_string());
    }
    let b = word.as_bytes();
    if b.first() == Some(&b'$') && !matches!(b.get(1), Some(b'{') | Some(b'$')) {
        return Err(refuse());
    }
    let mut out = String::with_capacity(word.len());
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('$') => {
                chars.next();
                out.push('$');
            }
            Some(&n) if n == '{' || n == '_' || n.is_ascii_alphanumeric() => return Err(refuse()),
            _ => out.push('$'),
        }
    }
    Ok(out)
}

/// `config_parse_exec()`: returns the argv of the single command, or `None`
/// for a value without any word.
fn parse_exec(value: &str, line: usize) -> Result<Option<Vec<String>>, UnitError> {
    let s = value.as_bytes();
    let mut pos = 0;
    let mut commands: Vec<Vec<String>> = Vec::new();
    while let Some(first) = extract_word_relaxed(s, &mut pos, line)? {
        if first == ";" {
            continue;
        }
        if let Some(prefix) = first.chars().next().filter(|c| "-@:+!|".contains(*c)) {
            return Err(UnitError::Prefix { line, prefix });
        }
        let path = resolve_specifiers(&first, line)?;
        if path.is_empty() {
            return Err(syntax(line, "empty executable path"));
        }
        if path
            .chars()
            .any(|c| is_control(c) || matches!(c, '"' | '\'' | '\\'))
        {
            return Err(syntax(line, "executable path contains special characters"));
        }
        if path.ends_with('/') {
            return Err(syntax(line, "executable path specifies a directory"));
        }
        if !path.starts_with('/') {
            return Err(syntax(line, "executable path is not absolute"));
        }
        if path.contains('$') {
            return Err(UnitError::EnvSubstitution { line, word: path });
        }
        let mut argv = vec![path];
        while pos < s.len() {
            let rest = &s[pos..];
            let ends_token = |i: usize| rest.get(i).is_none_or(|b| WS.contains(b));
            if rest[0] == b';' && ends_token(1) {
                pos += 1;
                break;
            }
            if rest.starts_with(b"\\;") && ends_token(2) {
                pos += 2;
                while s.get(pos).is_some_and(|b| WS.contains(b)) {
                    pos += 1;
                }
                argv.push(";".to_string());
                continue;
            }
            match extract_word_relaxed(s, &mut pos, line)? {
                Some(word) => {
                    let word = resolve_specifiers(&word, line)?;
                    argv.push(substitute_variables(&word, line)?);
                }
                None => break,
            }
        }
        commands.push(argv);
    }
    if commands.len() > 1 {
        return Err(UnitError::MultipleCommands { line });
    }
    Ok(commands.pop())
}

/// `config_parse_environ()` (without systemd's leniency: where systemd would
/// log and ignore a malformed line or assignment, this returns an error).
fn parse_environment(
    value: &str,
    line: usize,
    env: &mut Vec<(String, String)>,
) -> Result<(), UnitError> {
    if value.is_empty() {
        env.clear();
        return Ok(());
    }
    let s = value.as_bytes();
    let mut pos = 0;
    while let Some(word) = extract_word(s, &mut pos, false).map_err(|e| syntax(line, e))? {
        let word = resolve_specifiers(&bytes_to_string(word, line)?, line)?;
        let Some((name, val)) = word.split_once('=') else {
            return Err(syntax(
                line,
                format!("invalid environment assignment {word:?}"),
            ));
        };
        if !valid_env_name(name) {
            return Err(syntax(
                line,
                format!("invalid environment variable name {name:?}"),
            ));
        }
        match env.iter_mut().find(|(n, _)| n == name) {
            Some(entry) => entry.1 = val.to_string(),
            None => env.push((name.to_string(), val.to_string())),
        }
    }
    Ok(())
}

/// `config_parse_working_directory()`: returns the simplified path.
fn parse_working_directory(value: &str, line: usize) -> Result<String, UnitError> {
    if value.starts_with('-') {
        return Err(UnitError::Prefix { line, prefix: '-' });
    }
    if value == "~" {
        return Err(syntax(line, "WorkingDirectory=~ is not supported"));
    }
    let path = resolve_specifiers(value, line)?;
    if !path.starts_with('/') {
        return Err(syntax(line, "WorkingDirectory= is not absolute"));
    }
    // path_simplify(): drop empty and "." components; ".." is refused by
    // path_is_normalized().
    let mut parts = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => return Err(syntax(line, "WorkingDirectory= contains '..'")),
            c => parts.push(c),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// Parses the keys gpuplane renders, the way systemd reads them
/// (systemd.syntax(7), systemd.service(5), systemd.exec(5)):
///
/// * Logical lines: `\n`, `\r\n` and `\r` end lines; lines starting with `#`
///   or `;` are comments (also between continuation lines); a trailing
///   unescaped `\` joins the next line with a space; keys and values are
///   stripped of surrounding whitespace.
/// * `[Unit]` `Description=`, `[Service]` `ExecStart=`, `Environment=`,
///   `WorkingDirectory=`, `User=`. Other keys and sections are ignored. An
///   empty value resets the setting, as in systemd.
/// * `ExecStart=`: `extract_first_word()` with `EXTRACT_UNQUOTE |
///   EXTRACT_CUNESCAPE`, retried with `EXTRACT_CUNESCAPE_RELAX` (unknown
///   escapes kept verbatim); a lone `;` separates commands and `\;` is a
///   literal `;` word; `%%` → `%`; `$$` → `$`.
/// * `Environment=`: the same word splitting (strict escapes), each word
///   `KEY=VALUE`; `%%` → `%`; `$` is literal.
///
/// Caveats — these are errors here although systemd would accept them, because
/// their result depends on the host or the renderer never produces them:
/// specifiers other than `%%` ([`UnitError::Specifier`]); command prefixes
/// `-@:+!|` ([`UnitError::Prefix`]); variable references `$VAR`/`${VAR}`
/// ([`UnitError::EnvSubstitution`]); several commands
/// ([`UnitError::MultipleCommands`]); a relative executable; NUL bytes;
/// escapes that yield invalid UTF-8; and malformed `Environment=` lines or
/// assignments, which systemd would ignore with a warning.
pub fn parse(text: &str) -> Result<ParsedUnit, UnitError> {
    if let Some(i) = text.find('\0') {
        let line = text[..i].matches('\n').count() + 1;
        return Err(syntax(line, "NUL byte"));
    }
    let mut unit = ParsedUnit::default();
    let mut section: Option<String> = None;
    let mut exec_line: Option<usize> = None;
    for (line, raw) in logical_lines(text) {
        if raw.len() >= LONG_LINE_MAX {
            return Err(syntax(line, "line too long"));
        }
        let l = trim_ws(&raw);
        if l.is_empty() {
            continue;
        }
        if let Some(header) = l.strip_prefix('[') {
            let Some(name) = header.strip_suffix(']') else {
                return Err(syntax(line, "invalid section header"));
            };
            section = Some(name.to_string());
            continue;
        }
        let Some((key, value)) = l.split_once('=') else {
            return Err(syntax(line, "missing '='"));
        };
        let (key, value) = (trim_ws(key), trim_ws(value));
        let non_empty = |v: &str| -> Option<String> { (!v.is_empty()).then(|| v.to_string()) };
        match (section.as_deref(), key) {
            (Some("Unit"), "Description") => {
                unit.description = non_empty(&resolve_specifiers(value, line)?);
            }
            (Some("Service"), "ExecStart") => match parse_exec(value, line)? {
                None => {
                    unit.exec_start.clear();
                    exec_line = None;
                }
                Some(_) if exec_line.is_some() => {
                    return Err(UnitError::MultipleCommands { line });
                }
                Some(argv) => {
                    unit.exec_start = argv;
                    exec_line = Some(line);
                }
            },
            (Some("Service"), "Environment") => {
                parse_environment(value, line, &mut unit.environment)?;
            }
            (Some("Service"), "WorkingDirectory") => {
                unit.working_directory = match value {
                    "" => None,
                    v => Some(parse_working_directory(v, line)?),
                };
            }
            (Some("Service"), "User") => {
                unit.user = non_empty(&resolve_specifiers(value, line)?);
            }
            _ => {}
        }
    }
    Ok(unit)
}
