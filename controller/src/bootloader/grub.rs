//! `/etc/default/grub`, a shell script `grub-mkconfig` sources: the kernel arguments of
//! `GRUB_CMDLINE_LINUX` (every entry) and `GRUB_CMDLINE_LINUX_DEFAULT` (the default entry) —
//! the last assignment of each, as the shell keeps the last — and edits of their values that
//! keep every other byte of the file.
//!
//! Values are shell words: single-quoted, double-quoted (with the escapes `\"`, `\\`, `\$` and
//! `` \` ``), unquoted, or these run together. A value that expands anything (`$VAR`, `` ` ``,
//! `$(...)`), continues over a backslash-newline, or is followed by more than a comment is
//! refused, never guessed at.
//!
//! # Caveat
//! Drop-ins in `/etc/default/grub.d/*.cfg`, which `update-grub` sources after this file, are
//! not read: a drop-in that sets the variables again overrides what is written here (the
//! `RebootRequired` condition then keeps saying that the boot lacks the arguments).

use super::cmdline;

/// The variable the agent adds arguments to (Proxmox's documentation names it).
pub const DEFAULT_VAR: &str = "GRUB_CMDLINE_LINUX_DEFAULT";
/// The variable for every entry, recovery included: read, and absent words removed from it too.
pub const ALL_VAR: &str = "GRUB_CMDLINE_LINUX";

/// One assignment `NAME=VALUE` in the file.
#[derive(Debug, Clone, PartialEq)]
struct Assignment {
    /// Byte span of the value's shell text (quotes included).
    span: (usize, usize),
    /// The value after quote removal.
    value: String,
    /// The value was one single- or double-quoted string without escapes: it is rewritten in
    /// place, inside the same quotes.
    simple_quote: Option<char>,
}

/// The kernel arguments the file gives the default entry: the words of `GRUB_CMDLINE_LINUX`
/// then those of `GRUB_CMDLINE_LINUX_DEFAULT`.
pub fn args(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for var in [ALL_VAR, DEFAULT_VAR] {
        if let Some(a) = last_assignment(text, var)? {
            for (s, e) in cmdline::words(&a.value).map_err(|e| format!("{var}: {e}"))? {
                out.push(a.value[s..e].to_string());
            }
        }
    }
    Ok(out)
}

/// `text` with `absent` removed from both variables' values and each word of `present` that
/// neither holds added to `GRUB_CMDLINE_LINUX_DEFAULT` (a new assignment line at the end when
/// the file has none); every other byte kept.
pub fn edit(text: &str, present: &[String], absent: &[String]) -> Result<String, String> {
    let all = last_assignment(text, ALL_VAR)?;
    let default = last_assignment(text, DEFAULT_VAR)?;
    let have = args(text)?;
    // A word GRUB_CMDLINE_LINUX holds is there already (it reaches the default entry too).
    let add: Vec<String> = present
        .iter()
        .filter(|p| !have.contains(p))
        .cloned()
        .collect();
    let mut edits: Vec<((usize, usize), String)> = Vec::new();
    if let Some(a) = &all {
        let v = cmdline::edit(&a.value, &[], absent)?;
        if v != a.value {
            edits.push((a.span, render(a, &v)));
        }
    }
    match &default {
        Some(a) => {
            let v = cmdline::edit(&a.value, &add, absent)?;
            if v != a.value {
                edits.push((a.span, render(a, &v)));
            }
        }
        None if !add.is_empty() => {
            let line = format!("{DEFAULT_VAR}=\"{}\"", add.join(" "));
            let end = if text.contains("\r\n") { "\r\n" } else { "\n" };
            let sep = if text.is_empty() || text.ends_with('\n') {
                ""
            } else {
                end
            };
            edits.push(((text.len(), text.len()), format!("{sep}{line}{end}")));
        }
        None => {}
    }
    edits.sort_by_key(|(s, _)| s.0);
    let mut out = String::with_capacity(text.len() + 64);
    let mut at = 0;
    for ((s, e), new) in edits {
        out.push_str(&text[at..s]);
        out.push_str(&new);
        at = e;
    }
    out.push_str(&text[at..]);
    Ok(out)
}

/// The value `v` in the shell syntax of `a`: inside its own quotes when it had simple ones,
/// else double-quoted with `"`, `\`, `$` and `` ` `` escaped.
fn render(a: &Assignment, v: &str) -> String {
    match a.simple_quote {
        Some('\'') if !v.contains('\'') => format!("'{v}'"),
        Some('"') if !v.contains(['"', '\\', '$', '`']) => format!("\"{v}\""),
        _ => {
            let mut s = String::from("\"");
            for c in v.chars() {
                if matches!(c, '"' | '\\' | '$' | '`') {
                    s.push('\\');
                }
                s.push(c);
            }
            s.push('"');
            s
        }
    }
}

/// The last assignment of `var` (`VAR=...` or `export VAR=...` at the start of a line, after
/// blanks); `None` when the file has none.
fn last_assignment(text: &str, var: &str) -> Result<Option<Assignment>, String> {
    let mut found = None;
    let mut line_start = 0;
    let mut lineno = 0;
    while line_start < text.len() {
        lineno += 1;
        let line_end = text[line_start..]
            .find('\n')
            .map(|i| line_start + i)
            .unwrap_or(text.len());
        let line = &text[line_start..line_end];
        let body = line.trim_start_matches([' ', '\t']);
        let body_at = line_start + (line.len() - body.len());
        let (rest, rest_at) = match body.strip_prefix("export") {
            Some(r) if r.starts_with([' ', '\t']) => {
                let r2 = r.trim_start_matches([' ', '\t']);
                (r2, body_at + body.len() - r2.len())
            }
            _ => (body, body_at),
        };
        if rest
            .strip_prefix(var)
            .and_then(|r| r.strip_prefix('='))
            .is_some()
        {
            let start = rest_at + var.len() + 1;
            let a = value(text, start).map_err(|e| {
                format!("/etc/default/grub line {lineno}: {var}: {e}; the agent edits only plain values")
            })?;
            // The value may not end the line early: only blanks and a comment may follow.
            let tail_end = text[a.span.1..]
                .find('\n')
                .map(|i| a.span.1 + i)
                .unwrap_or(text.len());
            let tail = text[a.span.1..tail_end].trim_end_matches('\r');
            let t = tail.trim_start_matches([' ', '\t']);
            if !(t.is_empty() || (t.starts_with('#') && t.len() < tail.len())) {
                return Err(format!(
                    "/etc/default/grub line {lineno}: {var}: more follows its value ({:?}); the agent edits only plain values",
                    crate::text::sanitize(t, 40)
                ));
            }
            found = Some(a);
            line_start = tail_end + 1;
            lineno += text[start..tail_end].matches('\n').count();
            continue;
        }
        line_start = line_end + 1;
    }
    Ok(found)
}

/// The shell word at `start` of `text` (an assignment's value), decoded.
fn value(text: &str, start: usize) -> Result<Assignment, String> {
    let b = text.as_bytes();
    let mut i = start;
    let mut v = String::new();
    let mut segments = 0;
    let mut simple = None;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')' => break,
            b'\r' if b.get(i + 1) == Some(&b'\n') || i + 1 == b.len() => break,
            b'\'' => {
                let end = text[i + 1..]
                    .find('\'')
                    .map(|j| i + 1 + j)
                    .ok_or("an unterminated single quote")?;
                v.push_str(&text[i + 1..end]);
                simple = Some('\'');
                i = end + 1;
            }
            b'"' => {
                let mut j = i + 1;
                let mut escaped = false;
                loop {
                    match b.get(j) {
                        None => return Err("an unterminated double quote".into()),
                        Some(b'"') => break,
                        Some(b'\\') => match b.get(j + 1) {
                            Some(c @ (b'"' | b'\\' | b'$' | b'`')) => {
                                v.push(*c as char);
                                escaped = true;
                                j += 2;
                            }
                            Some(b'\n') => {
                                return Err("a backslash-newline inside the value".into())
                            }
                            _ => {
                                v.push('\\');
                                j += 1;
                            }
                        },
                        Some(b'$') | Some(b'`') => {
                            return Err("an expansion ($ or `) inside the value".into())
                        }
                        Some(_) => {
                            let ch = text[j..].chars().next().unwrap_or('\u{fffd}');
                            v.push(ch);
                            j += ch.len_utf8().max(1);
                        }
                    }
                }
                simple = if escaped { None } else { Some('"') };
                i = j + 1;
            }
            b'$' | b'`' => return Err("an expansion ($ or `) in the value".into()),
            b'\\' => return Err("a backslash escape outside quotes".into()),
            _ => {
                let ch = text[i..].chars().next().unwrap_or('\u{fffd}');
                v.push(ch);
                simple = None;
                segments += 1;
                i += ch.len_utf8().max(1);
                continue;
            }
        }
        segments += 1;
    }
    // More than one quoted or unquoted piece run together: rewritten whole, double-quoted.
    let simple_quote = if segments == 1 { simple } else { None };
    Ok(Assignment {
        span: (start, i),
        value: v,
        simple_quote,
    })
}
