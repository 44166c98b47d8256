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
//! Drop-ins in `/etc/default/grub.d/*.cfg`, which `grub-mkconfig` sources after this file in
//! name order, are read too ([`args_with_drop_ins`]): one may add to a variable
//! (`GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX root=ZFS=rpool/ROOT/pve-1 boot=zfs"`, what Proxmox's
//! ZFS install writes), and its words count; one that sets a variable anew would override every
//! edit of this file, so it is refused with its name, never edited around.

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
/// then those of `GRUB_CMDLINE_LINUX_DEFAULT` (`grub-mkconfig` writes them in that order), up to
/// a lone `--` (the words after it go to init).
pub fn args(text: &str) -> Result<Vec<String>, String> {
    Ok(super::kernel_part(words(text)?))
}

/// Every word the file gives the default entry's command line, init's after a `--` included.
pub fn words(text: &str) -> Result<Vec<String>, String> {
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
/// the file has none); every other byte kept. Only the kernel's words count: a lone `--` ends
/// them. A `--` in `GRUB_CMDLINE_LINUX` gives every word of `GRUB_CMDLINE_LINUX_DEFAULT` (which
/// follows it) to init: the new words then go into `GRUB_CMDLINE_LINUX`, before its `--`, and
/// `GRUB_CMDLINE_LINUX_DEFAULT` is left alone; a `--` in `GRUB_CMDLINE_LINUX_DEFAULT` has the new
/// words go before it.
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
    let all_ends_kernel = match &all {
        Some(a) => cmdline::kernel_words(&a.value)
            .map_err(|e| format!("{ALL_VAR}: {e}"))?
            .1
            .is_some(),
        None => false,
    };
    let mut edits: Vec<((usize, usize), String)> = Vec::new();
    if let Some(a) = &all {
        let into_all: &[String] = if all_ends_kernel { &add } else { &[] };
        let v = cmdline::edit(&a.value, into_all, absent)?;
        if v != a.value {
            edits.push((a.span, render(a, &v)));
        }
    }
    match &default {
        // Every word of it follows GRUB_CMDLINE_LINUX's `--`: init's, not the agent's.
        _ if all_ends_kernel => {}
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

/// Where `grub-mkconfig` finds the drop-ins it sources after `/etc/default/grub`.
pub const DROP_IN_DIR: &str = "/etc/default/grub.d";
/// The most drop-ins read (a directory with more is a problem, not a guess).
pub const MAX_DROP_INS: usize = 64;

/// Stands for `$GRUB_CMDLINE_LINUX` / `${GRUB_CMDLINE_LINUX}` in a drop-in's value.
const SELF_ALL: char = '\u{E000}';
/// Stands for `$GRUB_CMDLINE_LINUX_DEFAULT` / `${GRUB_CMDLINE_LINUX_DEFAULT}`.
const SELF_DEFAULT: char = '\u{E001}';

/// A drop-in's words, by file: what it adds to the default entry's kernel arguments.
pub type DropInWords = Vec<(String, Vec<String>)>;
/// The default entry's arguments with the drop-ins applied, and each drop-in's words.
pub type WithDropIns = (Vec<String>, DropInWords);

/// The kernel arguments the default entry gets from `/etc/default/grub` (`main`) and then the
/// drop-ins (`(path, text)` in the order `grub-mkconfig` sources them: `*.cfg` by name), up to a
/// lone `--`, and the words each drop-in adds. A drop-in assignment must keep the variable's
/// value and add to it (`VAR="$VAR words"` or `${VAR}`, as a word of its own): one that sets it
/// anew, refers to anything else, holds a `--` or cannot be read with certainty is refused,
/// naming the file.
pub fn args_with_drop_ins(
    main: &str,
    drop_ins: &[(String, String)],
) -> Result<WithDropIns, String> {
    let (words, added) = words_with_drop_ins(main, drop_ins)?;
    Ok((super::kernel_part(words), added))
}

/// [`args_with_drop_ins`] with every word of the command line, init's after a `--` included.
pub fn words_with_drop_ins(
    main: &str,
    drop_ins: &[(String, String)],
) -> Result<WithDropIns, String> {
    let mut all = var_words(main, ALL_VAR, "/etc/default/grub")?;
    let mut default = var_words(main, DEFAULT_VAR, "/etc/default/grub")?;
    let mut added = Vec::new();
    for (path, text) in drop_ins {
        let marked = mark_self_references(text);
        let mut words = Vec::new();
        for (var, mark, current) in [
            (ALL_VAR, SELF_ALL, &mut all),
            (DEFAULT_VAR, SELF_DEFAULT, &mut default),
        ] {
            for a in assignments(&marked, var, path)? {
                let mut next = Vec::new();
                let mut kept = false;
                for (s, e) in cmdline::words(&a.value).map_err(|e| format!("{path}: {var}: {e}"))? {
                    let w = &a.value[s..e];
                    if w == mark.to_string() {
                        next.extend(current.iter().cloned());
                        kept = true;
                    } else if w.contains([SELF_ALL, SELF_DEFAULT]) {
                        return Err(format!("{path}: {var}: a variable inside a word; the agent reads only ${var} as a word of its own"));
                    } else if cmdline::is_separator(w) {
                        return Err(format!("{path}: {var}: a \"--\" (the words after it go to init, not the kernel): where the agent's words would land is not certain; move it into /etc/default/grub"));
                    } else {
                        words.push(w.to_string());
                        next.push(w.to_string());
                    }
                }
                if !kept {
                    return Err(format!("{path} sets {var} anew, after /etc/default/grub (grub-mkconfig reads drop-ins last), so an edit of /etc/default/grub would not reach the boot; make it add to the value ({var}=\"${var} ...\") or move its words into /etc/default/grub"));
                }
                *current = next;
            }
        }
        if !words.is_empty() {
            added.push((path.clone(), words));
        }
    }
    all.extend(default);
    Ok((all, added))
}

/// `text` with `$VAR` and `${VAR}` of the two variables replaced by their marks (the longer
/// name first; `$VAR` only where no name character follows).
fn mark_self_references(text: &str) -> String {
    let mut out = text.to_string();
    for (var, mark) in [(DEFAULT_VAR, SELF_DEFAULT), (ALL_VAR, SELF_ALL)] {
        out = out.replace(&format!("${{{var}}}"), &mark.to_string());
        let pat = format!("${var}");
        let mut s = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(i) = rest.find(&pat) {
            let after = &rest[i + pat.len()..];
            let glued = after
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            s.push_str(&rest[..i]);
            if glued {
                s.push_str(&pat);
            } else {
                s.push(mark);
            }
            rest = after;
        }
        s.push_str(rest);
        out = s;
    }
    out
}

/// The words of the last assignment of `var` in `text` (none when it has none).
fn var_words(text: &str, var: &str, file: &str) -> Result<Vec<String>, String> {
    let Some(a) = assignments(text, var, file)?.pop() else {
        return Ok(vec![]);
    };
    Ok(cmdline::words(&a.value)
        .map_err(|e| format!("{var}: {e}"))?
        .into_iter()
        .map(|(s, e)| a.value[s..e].to_string())
        .collect())
}

/// The last assignment of `var` (`VAR=...` or `export VAR=...` at the start of a line, after
/// blanks); `None` when the file has none.
fn last_assignment(text: &str, var: &str) -> Result<Option<Assignment>, String> {
    Ok(assignments(text, var, "/etc/default/grub")?.pop())
}

/// Every assignment of `var` in `text`, in order; `file` names the file in messages.
fn assignments(text: &str, var: &str, file: &str) -> Result<Vec<Assignment>, String> {
    let mut found = Vec::new();
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
                format!("{file} line {lineno}: {var}: {e}; the agent edits only plain values")
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
                    "{file} line {lineno}: {var}: more follows its value ({:?}); the agent edits only plain values",
                    crate::text::sanitize(t, 40)
                ));
            }
            found.push(a);
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
