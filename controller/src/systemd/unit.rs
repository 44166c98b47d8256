//! Rendering and parsing of the gpuplane service unit.
//!
//! # Escaping rules used by [`render`]
//!
//! Each rule names the systemd documentation it follows.
//!
//! * **Command lines** (systemd.service(5), "COMMAND LINES"). Every argument
//!   after the executable is one word. A word made only of ASCII letters,
//!   digits and `-_./:,=+@` is written bare. The word that is exactly `;` is
//!   written `\;` (a lone `;` separates commands). Any other word is written
//!   in double quotes, with `\` → `\\`, `"` → `\"`, newline → `\n`, tab → `\t`,
//!   carriage return → `\r`, other ASCII control characters (and DEL) →
//!   `\xNN` (C-style escapes, systemd.syntax(7) "Quoting"), `%` → `%%`
//!   (systemd.unit(5) "SPECIFIERS") and `$` → `$$` (systemd.service(5):
//!   "Use `$$` to pass a literal dollar sign"). Non-ASCII text is written
//!   as-is (UTF-8); the empty string is written `""`. The `%%`/`$$` forms are
//!   used instead of `\x25`/`\x24` because systemd resolves specifiers and
//!   variables *after* unescaping a word, so an escaped `%`/`$` would still be
//!   interpreted.
//! * **The executable** (`exec_start[0]`) must be an absolute path: it then
//!   starts with `/`, so none of the prefixes `-@:+!` can be formed, and
//!   systemd never searches `$PATH`. systemd rejects quotes, backslashes and
//!   control characters in the executable path, so those are errors here; `$`
//!   is an error too because systemd substitutes variables in `argv[0]` but not
//!   in the path it executes, so no spelling keeps both equal. `%` is written
//!   `%%`; a path with spaces is double-quoted.
//! * **Environment=** (systemd.exec(5)): one `Environment=` line per
//!   variable, written as a single word `KEY=VALUE` with the same quoting as
//!   command-line words, except that `$` is left alone (systemd.exec(5):
//!   "variable expansion is not performed inside the strings and the `$`
//!   character has no special meaning"). Names must match
//!   `[A-Za-z_][A-Za-z0-9_]*`; duplicate names are refused because systemd keeps
//!   only the last assignment.
//! * **Plain values** (`Description=`, `WorkingDirectory=`): systemd does not
//!   unquote these, it only resolves specifiers and strips surrounding
//!   whitespace, so `%` → `%%` and everything that cannot survive verbatim is
//!   refused: control characters (a newline would end the line), leading or
//!   trailing whitespace (stripped), and a trailing `\` (it would join the next
//!   line, systemd.syntax(7)).
//! * **Line length**: systemd refuses lines of 1 MiB or more (`LONG_LINE_MAX`),
//!   so such a line is an error rather than a unit systemd will not load.
//!
//! Every rendered value lives on one physical line; the renderer never emits
//! line continuations, comments (other than the header), specifiers other than
//! `%%`, variable references or command prefixes, and [`parse`] reports any of
//! those as errors.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::name::validate_unit_name;

/// First line of every rendered unit.
pub const HEADER: &str = "# Managed by gpuplane; local edits are overwritten.";

/// systemd's `LONG_LINE_MAX`: longer (logical) lines make the unit unloadable.
const LONG_LINE_MAX: usize = 1024 * 1024;

/// `PATH_MAX` and `NAME_MAX` as used by systemd's `path_is_valid()`.
const PATH_MAX: usize = 4096;
const NAME_MAX: usize = 255;

/// Values of `Restart=` accepted by systemd.service(5).
pub const RESTART_VALUES: [&str; 7] = [
    "no",
    "on-success",
    "on-failure",
    "on-abnormal",
    "on-watchdog",
    "on-abort",
    "always",
];

/// Largest `TimeoutStartSec=` in seconds whose value in microseconds still
/// fits systemd's 64-bit `usec_t`.
pub const MAX_TIMEOUT_START_SEC: u64 = u64::MAX / 1_000_000 - 1;

/// systemd's `WHITESPACE` set, used for word splitting and stripping.
const WS: &[u8] = b" \t\n\r";

/// What to render. All strings may come from untrusted spec text.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UnitSpec {
    /// Free text for `Description=`; omitted when empty.
    pub description: String,
    /// argv; `[0]` must be an absolute path to the executable.
    pub exec_start: Vec<String>,
    /// Environment variables, rendered in this order.
    pub environment: Vec<(String, String)>,
    /// Absolute, normalized directory (`/srv/x`, not `/srv/x/` or `/srv/./x`).
    pub working_directory: Option<String>,
    /// User name (`[A-Za-z_][A-Za-z0-9_-]{0,30}`) or numeric UID.
    pub user: Option<String>,
    /// One of [`RESTART_VALUES`], e.g. `"no"` or `"on-failure"`.
    pub restart: Option<String>,
    /// Seconds; at most [`MAX_TIMEOUT_START_SEC`].
    pub timeout_start_sec: Option<u64>,
    /// Unit names for `After=`, validated with [`validate_unit_name`].
    pub after: Vec<String>,
    /// Unit names for `WantedBy=` (e.g. `multi-user.target`), validated.
    pub wanted_by: Vec<String>,
}

/// The subset of a unit file that [`parse`] understands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedUnit {
    /// argv exactly as the process would receive it (after unquoting,
    /// unescaping, `%%` and `$$` collapsing). Empty when no `ExecStart=`.
    pub exec_start: Vec<String>,
    /// Environment assignments in systemd's order: a later assignment of the
    /// same name replaces the earlier one in place; an empty `Environment=`
    /// clears the list.
    pub environment: Vec<(String, String)>,
    /// `Description=` with `%%` collapsed; `None` when absent or empty.
    pub description: Option<String>,
    /// `WorkingDirectory=` after systemd's path simplification (`//`, `/./`
    /// and a trailing `/` removed).
    pub working_directory: Option<String>,
    /// `User=` with `%%` collapsed; not validated.
    pub user: Option<String>,
}

impl ParsedUnit {
    /// The word after `flag` in `ExecStart=` (`--tp-size 4` gives `4`); `None` when the flag is
    /// absent or last.
    pub fn arg(&self, flag: &str) -> Option<String> {
        let argv = &self.exec_start;
        argv.iter()
            .position(|a| a == flag)
            .and_then(|i| argv.get(i + 1))
            .cloned()
    }

    /// The value the environment gives `name`, if any.
    pub fn env(&self, name: &str) -> Option<String> {
        self.environment
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
}

/// Why a unit could not be rendered or parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnitError {
    #[error("{field} contains a NUL byte, which cannot be represented in a unit file")]
    Nul { field: String },
    #[error("exec_start is empty; its first element must be the executable's absolute path")]
    EmptyExecStart,
    #[error(
        "executable {path:?} is not an absolute path; systemd would search $PATH or read a \
         leading '-', '@', ':', '+' or '!' as a prefix"
    )]
    RelativeExecutable { path: String },
    #[error("executable path {path:?} cannot be rendered: {reason}")]
    UnsafeExecutable { path: String, reason: String },
    #[error("environment variable name {name:?} is invalid: it must match [A-Za-z_][A-Za-z0-9_]*")]
    InvalidEnvName { name: String },
    #[error(
        "environment variable {name:?} is set more than once; systemd would keep only the last value"
    )]
    DuplicateEnvName { name: String },
    #[error("{field} value {value:?} cannot be rendered: {reason}")]
    InvalidValue {
        field: String,
        value: String,
        reason: String,
    },
    #[error("{field}: {message}")]
    InvalidUnitName { field: String, message: String },
    #[error(
        "restart value {0:?} is not one of no, on-success, on-failure, on-abnormal, \
         on-watchdog, on-abort, always"
    )]
    InvalidRestart(String),
    #[error(
        "user {0:?} is invalid: use a name matching [A-Za-z_][A-Za-z0-9_-]{{0,30}} or a numeric UID"
    )]
    InvalidUser(String),
    #[error("timeout_start_sec {0} is too large; at most {MAX_TIMEOUT_START_SEC} seconds")]
    TimeoutTooLarge(u64),
    #[error("the {key}= line would be {len} bytes; systemd refuses lines of {LONG_LINE_MAX} bytes or more")]
    LineTooLong { key: String, len: usize },
    /// Parse error: malformed line, quoting or escape, or a construct the
    /// renderer never produces.
    #[error("line {line}: {reason}")]
    Syntax { line: usize, reason: String },
    /// Parse error: a specifier other than `%%`. systemd would substitute
    /// host-specific text; gpuplane never renders specifiers.
    #[error(
        "line {line}: specifier '%{specifier}' is not supported (a literal '%' is written '%%')"
    )]
    Specifier { line: usize, specifier: char },
    /// Parse error: an `ExecStart=` (or `WorkingDirectory=`) prefix.
    #[error("line {line}: prefix {prefix:?} changes how systemd runs the command; gpuplane never renders prefixes")]
    Prefix { line: usize, prefix: char },
    /// Parse error: a word that systemd would change by variable substitution
    /// at exec time (`$VAR`, `${VAR}`, or a word starting with `$` that is not
    /// `$$`, which systemd drops when the variable is unset).
    #[error("line {line}: {word:?} would be changed by environment variable substitution (a literal '$' is written '$$')")]
    EnvSubstitution { line: usize, word: String },
    /// Parse error: more than one command (`;`-separated or several
    /// `ExecStart=` lines). gpuplane renders exactly one.
    #[error("line {line}: more than one command in ExecStart=")]
    MultipleCommands { line: usize },
}

// ---------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------

fn check_nul(field: &str, value: &str) -> Result<(), UnitError> {
    if value.contains('\0') {
        return Err(UnitError::Nul {
            field: field.to_string(),
        });
    }
    Ok(())
}

fn is_control(c: char) -> bool {
    (c as u32) < 0x20 || c == '\x7f'
}

/// Characters that need no quoting in any context we render a word into.
fn is_bare_safe(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':' | ',' | '=' | '+' | '@')
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum WordContext {
    /// An `ExecStart=` argument: `$` is doubled, a lone `;` is escaped.
    Exec,
    /// An `Environment=` assignment: `$` is literal.
    Env,
}

/// Renders one word so that systemd's `extract_first_word(EXTRACT_UNQUOTE |
/// EXTRACT_CUNESCAPE)` followed by specifier (and, for [`WordContext::Exec`],
/// variable) resolution yields exactly `s`. `s` must not contain NUL.
fn quote_word(s: &str, ctx: WordContext) -> String {
    if ctx == WordContext::Exec && s == ";" {
        // systemd.service(5): "a lone semicolon may be escaped as \;".
        return "\\;".to_string();
    }
    if !s.is_empty() && s.chars().all(is_bare_safe) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' if ctx == WordContext::Exec => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if is_control(c) => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn render_executable(path: &str) -> Result<String, UnitError> {
    check_nul("exec_start[0]", path)?;
    if !path.starts_with('/') {
        return Err(UnitError::RelativeExecutable {
            path: path.to_string(),
        });
    }
    let unsafe_exec = |reason: &str| UnitError::UnsafeExecutable {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    if path.ends_with('/') {
        return Err(unsafe_exec("it ends with '/', which names a directory"));
    }
    for c in path.chars() {
        if is_control(c) {
            return Err(unsafe_exec(
                "systemd refuses control characters in executable paths",
            ));
        }
        if matches!(c, '"' | '\'' | '\\') {
            return Err(unsafe_exec(
                "systemd refuses quotes and backslashes in executable paths",
            ));
        }
        if c == '$' {
            return Err(unsafe_exec(
                "systemd substitutes variables in argv[0] but not in the executed path, \
                 so '$' cannot be represented",
            ));
        }
    }
    // No backslash, quote, control character or '$' is left, so quote_word
    // only has '%' (and spaces/non-ASCII, which need the quotes) to handle.
    Ok(quote_word(path, WordContext::Exec))
}

/// A value that systemd takes verbatim apart from specifiers and stripping of
/// surrounding whitespace (`Description=`, `WorkingDirectory=`).
fn render_plain(field: &str, value: &str) -> Result<String, UnitError> {
    check_nul(field, value)?;
    let invalid = |reason: &str| UnitError::InvalidValue {
        field: field.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    };
    if value.chars().any(is_control) {
        return Err(invalid(
            "control characters (newline, tab, ...) cannot appear in this setting",
        ));
    }
    if value.starts_with(' ') || value.ends_with(' ') {
        return Err(invalid("systemd strips leading and trailing whitespace"));
    }
    if value.ends_with('\\') {
        return Err(invalid(
            "a trailing backslash would continue the setting on the next line",
        ));
    }
    Ok(value.replace('%', "%%"))
}

fn render_working_directory(dir: &str) -> Result<String, UnitError> {
    let rendered = render_plain("working_directory", dir)?;
    let invalid = |reason: &str| UnitError::InvalidValue {
        field: "working_directory".to_string(),
        value: dir.to_string(),
        reason: reason.to_string(),
    };
    if !dir.starts_with('/') {
        return Err(invalid("it must be an absolute path"));
    }
    if dir.len() >= PATH_MAX {
        return Err(invalid("it is longer than PATH_MAX"));
    }
    if dir != "/" {
        for component in dir[1..].split('/') {
            match component {
                "" => {
                    return Err(invalid(
                        "it must be normalized: no '//' and no trailing '/'",
                    ))
                }
                "." | ".." => {
                    return Err(invalid("it must be normalized: no '.' or '..' components"))
                }
                c if c.len() > NAME_MAX => {
                    return Err(invalid("a path component is longer than NAME_MAX"))
                }
                _ => {}
            }
        }
    }
    Ok(rendered)
}

/// systemd's strict user-name rule (`valid_user_group_name()` without
/// `VALID_USER_RELAX`) or a numeric UID other than the reserved 65535 and
/// 4294967295.
fn valid_user(user: &str) -> bool {
    if !user.is_empty() && user.bytes().all(|b| b.is_ascii_digit()) {
        return matches!(user.parse::<u32>(), Ok(uid) if uid != 65535 && uid != u32::MAX);
    }
    let mut bytes = user.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
        _ => return false,
    }
    user.len() <= 31 && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn render_unit_names(field: &str, names: &[String]) -> Result<String, UnitError> {
    for (i, n) in names.iter().enumerate() {
        validate_unit_name(n).map_err(|message| UnitError::InvalidUnitName {
            field: format!("{field}[{i}]"),
            message,
        })?;
    }
    // Valid names contain no whitespace, quotes, '%' and never end in '\'.
    Ok(names.join(" "))
}

fn push_line(out: &mut String, key: &str, value: &str) -> Result<(), UnitError> {
    let len = key.len() + 1 + value.len();
    if len >= LONG_LINE_MAX {
        return Err(UnitError::LineTooLong {
            key: key.to_string(),
            len,
        });
    }
    out.push_str(key);
    out.push('=');
    out.push_str(value);
    out.push('\n');
    Ok(())
}

/// Renders `spec` as a unit file.
///
/// Guarantees, for every `Ok` result:
/// * The text is a pure function of `spec` (no host lookups, no timestamps),
///   starts with [`HEADER`] and ends with a newline.
/// * [`parse`] of the text returns exactly `spec.exec_start`,
///   `spec.environment`, and the description, working directory and user.
/// * Each setting is on one physical line with no control characters, so no
///   value can start a new key, section or comment, and none is continued.
///
/// Errors: NUL anywhere; empty `exec_start`; a relative or unrepresentable
/// executable (see the module docs); invalid or duplicate environment names;
/// control characters, surrounding spaces or a trailing `\` in the description
/// or working directory; a relative or non-normalized working directory; an
/// invalid user, restart value, timeout or unit name; a line of 1 MiB or more.
pub fn render(spec: &UnitSpec) -> Result<String, UnitError> {
    let mut out = String::new();
    out.push_str(HEADER);
    out.push('\n');

    out.push_str("[Unit]\n");
    if !spec.description.is_empty() {
        let d = render_plain("description", &spec.description)?;
        push_line(&mut out, "Description", &d)?;
    }
    if !spec.after.is_empty() {
        let after = render_unit_names("after", &spec.after)?;
        push_line(&mut out, "After", &after)?;
    }

    out.push_str("\n[Service]\n");
    if let Some(user) = &spec.user {
        check_nul("user", user)?;
        if !valid_user(user) {
            return Err(UnitError::InvalidUser(user.clone()));
        }
        push_line(&mut out, "User", user)?;
    }
    if let Some(dir) = &spec.working_directory {
        let d = render_working_directory(dir)?;
        push_line(&mut out, "WorkingDirectory", &d)?;
    }
    let mut seen: Vec<&str> = Vec::with_capacity(spec.environment.len());
    for (i, (name, value)) in spec.environment.iter().enumerate() {
        check_nul(&format!("environment[{i}] name"), name)?;
        check_nul(&format!("environment[{name}]"), value)?;
        if !valid_env_name(name) {
            return Err(UnitError::InvalidEnvName { name: name.clone() });
        }
        if seen.contains(&name.as_str()) {
            return Err(UnitError::DuplicateEnvName { name: name.clone() });
        }
        seen.push(name);
        let word = quote_word(&format!("{name}={value}"), WordContext::Env);
        push_line(&mut out, "Environment", &word)?;
    }

    let (exe, args) = spec
        .exec_start
        .split_first()
        .ok_or(UnitError::EmptyExecStart)?;
    let mut cmd = render_executable(exe)?;
    for (i, arg) in args.iter().enumerate() {
        check_nul(&format!("exec_start[{}]", i + 1), arg)?;
        cmd.push(' ');
        cmd.push_str(&quote_word(arg, WordContext::Exec));
    }
    push_line(&mut out, "ExecStart", &cmd)?;

    if let Some(restart) = &spec.restart {
        if !RESTART_VALUES.contains(&restart.as_str()) {
            return Err(UnitError::InvalidRestart(restart.clone()));
        }
        push_line(&mut out, "Restart", restart)?;
    }
    if let Some(t) = spec.timeout_start_sec {
        if t > MAX_TIMEOUT_START_SEC {
            return Err(UnitError::TimeoutTooLarge(t));
        }
        push_line(&mut out, "TimeoutStartSec", &t.to_string())?;
    }

    if !spec.wanted_by.is_empty() {
        let wanted = render_unit_names("wanted_by", &spec.wanted_by)?;
        out.push_str("\n[Install]\n");
        push_line(&mut out, "WantedBy", &wanted)?;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

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

/// Result of one successful `cunescape_one()`.
enum Unescaped {
    /// `\xNN` and octal escapes produce a raw byte.
    Byte(u8),
    /// Other escapes produce a code point, UTF-8 encoded by the caller.
    Code(u32),
}

fn hex(b: u8) -> Option<u32> {
    (b as char).to_digit(16)
}

/// systemd's `unichar_is_valid()`.
fn unichar_is_valid(c: u32) -> bool {
    c < 0x11_0000
        && (c & 0xFFFF_F800) != 0xD800
        && !(0xFDD0..=0xFDEF).contains(&c)
        && (c & 0xFFFE) != 0xFFFE
}

/// systemd's `cunescape_one()` with `accept_nul = false`: `s` starts right
/// after a backslash. Returns the number of bytes consumed and the result, or
/// `None` for an invalid escape (systemd's `-EINVAL`).
fn cunescape_one(s: &[u8]) -> Option<(usize, Unescaped)> {
    let simple = |c: u8| Some((1, Unescaped::Code(u32::from(c))));
    match *s.first()? {
        b'a' => simple(0x07),
        b'b' => simple(0x08),
        b'f' => simple(0x0c),
        b'n' => simple(b'\n'),
        b'r' => simple(b'\r'),
        b't' => simple(b'\t'),
        b'v' => simple(0x0b),
        b'\\' => simple(b'\\'),
        b'"' => simple(b'"'),
        b'\'' => simple(b'\''),
        b's' => simple(b' '),
        b'x' => {
            let v = hex(*s.get(1)?)? << 4 | hex(*s.get(2)?)?;
            (v != 0).then_some((3, Unescaped::Byte(v as u8)))
        }
        b'u' => {
            let mut v = 0u32;
            for i in 1..5 {
                v = v << 4 | hex(*s.get(i)?)?;
            }
            (v != 0).then_some((5, Unescaped::Code(v)))
        }
        b'U' => {
            let mut v = 0u32;
            for i in 1..9 {
                v = v << 4 | hex(*s.get(i)?)?;
            }
            (v != 0 && unichar_is_valid(v)).then_some((9, Unescaped::Code(v)))
        }
        b'0'..=b'7' => {
            let mut v = 0u32;
            for i in 0..3 {
                let d = *s.get(i)?;
                if !(b'0'..=b'7').contains(&d) {
                    return None;
                }
                v = v << 3 | u32::from(d - b'0');
            }
            (v != 0 && v <= 255).then_some((3, Unescaped::Byte(v as u8)))
        }
        _ => None,
    }
}

/// systemd's `extract_first_word()` with `EXTRACT_UNQUOTE | EXTRACT_CUNESCAPE`
/// (plus `EXTRACT_CUNESCAPE_RELAX` when `relax`), separators = whitespace.
///
/// Quotes (`'` or `"`) may start and end anywhere inside a word; backslash
/// escapes are interpreted both inside and outside quotes. With `relax`, an
/// unknown escape is kept verbatim (backslash included) and an unquoted
/// trailing backslash is kept. Unbalanced quotes are always an error.
/// Returns `Ok(None)` when only whitespace is left; on success `pos` is moved
/// past the word and the whitespace after it.
fn extract_word(s: &[u8], pos: &mut usize, relax: bool) -> Result<Option<Vec<u8>>, &'static str> {
    while s.get(*pos).is_some_and(|b| WS.contains(b)) {
        *pos += 1;
    }
    if *pos >= s.len() {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut quote: Option<u8> = None;
    loop {
        let Some(&c) = s.get(*pos) else {
            return match quote {
                Some(_) => Err("unbalanced quotes"),
                None => Ok(Some(out)),
            };
        };
        *pos += 1;
        if c == b'\\' {
            let Some(&next) = s.get(*pos) else {
                if relax && quote.is_none() {
                    out.push(b'\\');
                    return Ok(Some(out));
                }
                return Err("trailing backslash");
            };
            match cunescape_one(&s[*pos..]) {
                Some((n, Unescaped::Byte(b))) => {
                    out.push(b);
                    *pos += n;
                }
                Some((n, Unescaped::Code(u))) => {
                    // \u may name a surrogate, which systemd would encode
                    // into invalid UTF-8; a Rust string cannot hold it.
                    let ch = char::from_u32(u).ok_or("escape encodes a UTF-16 surrogate")?;
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    *pos += n;
                }
                None if relax => {
                    out.push(b'\\');
                    out.push(next);
                    *pos += 1;
                }
                None => return Err("invalid escape sequence"),
            }
            continue;
        }
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => out.push(c),
            None if c == b'\'' || c == b'"' => quote = Some(c),
            None if WS.contains(&c) => {
                while s.get(*pos).is_some_and(|b| WS.contains(b)) {
                    *pos += 1;
                }
                return Ok(Some(out));
            }
            None => out.push(c),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PY: &str = "/usr/bin/python3";

    /// Spec text an attacker might put in a model path, served name, extra
    /// argument or environment value.
    const HOSTILE: &[&str] = &[
        "/models/qwen\nExecStartPre=/bin/rm -rf /",
        "; rm -rf /",
        ";",
        "\\;",
        "a;",
        "$HOME",
        "${HOME}",
        "$",
        "$$",
        "a$b",
        "%n",
        "%",
        "%%",
        "\"",
        "'",
        "\\",
        "a\\",
        "\\\\\\",
        "tab\there",
        "cr\rlf\n",
        "qwen-é-模型-🦀",
        "-",
        "--",
        "-rf",
        "@x",
        ":x",
        "+x",
        "!x",
        "|x",
        "",
        " ",
        "  lead and trail  ",
        "#comment",
        "[Service]",
        "x=y",
        "\x01\x1b[31m\x7f",
        "\\x41",
        "\u{feff}\u{2028}\u{85}",
        "\"; echo pwned; \"",
        "' \" ` $(id) `id`",
    ];

    fn spec(argv: Vec<String>, env: Vec<(String, String)>) -> UnitSpec {
        UnitSpec {
            description: "SGLang server".to_string(),
            exec_start: argv,
            environment: env,
            ..UnitSpec::default()
        }
    }

    fn hostile_spec() -> UnitSpec {
        let mut argv = vec![PY.to_string(), "-m".into(), "sglang.launch_server".into()];
        argv.extend(HOSTILE.iter().map(|s| s.to_string()));
        let env = HOSTILE
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("GP_{i}"), v.to_string()))
            .collect();
        spec(argv, env)
    }

    fn roundtrip(s: &UnitSpec) -> ParsedUnit {
        let text = render(s).unwrap_or_else(|e| panic!("render failed: {e}"));
        let parsed = parse(&text).unwrap_or_else(|e| panic!("parse failed: {e}\n{text}"));
        assert_eq!(parsed.exec_start, s.exec_start, "\n{text}");
        assert_eq!(parsed.environment, s.environment, "\n{text}");
        parsed
    }

    fn exec_line(text: &str) -> &str {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("ExecStart="))
            .collect();
        assert_eq!(lines.len(), 1, "{text}");
        lines[0]
    }

    fn render_arg(arg: &str) -> String {
        let text = render(&spec(vec![PY.into(), arg.into()], vec![])).unwrap();
        exec_line(&text)["ExecStart=/usr/bin/python3 ".len()..].to_string()
    }

    #[test]
    fn hostile_arguments_and_env_round_trip() {
        roundtrip(&hostile_spec());
        for h in HOSTILE {
            roundtrip(&spec(
                vec![PY.into(), h.to_string()],
                vec![("V".into(), h.to_string())],
            ));
        }
    }

    #[test]
    fn hostile_arguments_render_as_expected() {
        assert_eq!(render_arg("--model-path"), "--model-path");
        assert_eq!(render_arg("/models/a b"), "\"/models/a b\"");
        assert_eq!(render_arg("/m/x\ny"), "\"/m/x\\ny\"");
        assert_eq!(render_arg("; rm -rf /"), "\"; rm -rf /\"");
        assert_eq!(render_arg(";"), "\\;");
        assert_eq!(render_arg("$HOME"), "\"$$HOME\"");
        assert_eq!(render_arg("%n"), "\"%%n\"");
        assert_eq!(render_arg("\""), "\"\\\"\"");
        assert_eq!(render_arg("\\"), "\"\\\\\"");
        assert_eq!(render_arg("a\tb"), "\"a\\tb\"");
        assert_eq!(render_arg("\x01\x7f"), "\"\\x01\\x7f\"");
        assert_eq!(render_arg("é"), "\"é\"");
        assert_eq!(render_arg("-rf"), "-rf");
        assert_eq!(render_arg(""), "\"\"");
        assert_eq!(render_arg("'"), "\"'\"");
    }

    #[test]
    fn each_setting_is_one_physical_line() {
        let text = render(&hostile_spec()).unwrap();
        exec_line(&text);
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("Environment="))
                .count(),
            HOSTILE.len()
        );
        for l in text.lines() {
            // Only ASCII control characters matter to systemd's line reader.
            assert!(!l.chars().any(is_control), "control char in {l:?}");
            let trailing = l.len() - l.trim_end_matches('\\').len();
            assert_eq!(trailing % 2, 0, "continuation in {l:?}");
            assert!(
                l.is_empty()
                    || l == HEADER
                    || l.starts_with('[')
                    || l.starts_with("Description=")
                    || l.starts_with("ExecStart=")
                    || l.starts_with("Environment="),
                "unexpected line {l:?}"
            );
        }
        // The hostile strings cannot have introduced another section or key.
        let parsed = parse(&text).unwrap();
        assert_eq!(parsed.description.as_deref(), Some("SGLang server"));
        assert_eq!(parsed.working_directory, None);
        assert_eq!(parsed.user, None);
    }

    #[test]
    fn full_render_is_deterministic() {
        let s = UnitSpec {
            description: "SGLang qwen 100%".into(),
            exec_start: vec![
                PY.into(),
                "-m".into(),
                "sglang.launch_server".into(),
                "--model-path".into(),
                "/models/Qwen 7B".into(),
            ],
            environment: vec![
                ("CUDA_VISIBLE_DEVICES".into(), "0,1".into()),
                ("HF_HOME".into(), "/var/cache/hf $x".into()),
            ],
            working_directory: Some("/var/lib/gpuplane".into()),
            user: Some("sglang".into()),
            restart: Some("on-failure".into()),
            timeout_start_sec: Some(600),
            after: vec!["network-online.target".into()],
            wanted_by: vec!["multi-user.target".into()],
        };
        let expected = "\
# Managed by gpuplane; local edits are overwritten.
[Unit]
Description=SGLang qwen 100%%
After=network-online.target

[Service]
User=sglang
WorkingDirectory=/var/lib/gpuplane
Environment=CUDA_VISIBLE_DEVICES=0,1
Environment=\"HF_HOME=/var/cache/hf $x\"
ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path \"/models/Qwen 7B\"
Restart=on-failure
TimeoutStartSec=600

[Install]
WantedBy=multi-user.target
";
        assert_eq!(render(&s).unwrap(), expected);
        assert_eq!(render(&s).unwrap(), render(&s.clone()).unwrap());
        let p = roundtrip(&s);
        assert_eq!(p.description.as_deref(), Some("SGLang qwen 100%"));
        assert_eq!(p.working_directory.as_deref(), Some("/var/lib/gpuplane"));
        assert_eq!(p.user.as_deref(), Some("sglang"));

        let minimal = render(&spec(vec!["/bin/true".into()], vec![])).unwrap();
        assert!(minimal.starts_with(&format!("{HEADER}\n")));
        assert!(!minimal.contains("[Install]"));
    }

    #[test]
    fn executable_rules() {
        let exe = |p: &str| render(&spec(vec![p.into(), "x".into()], vec![]));
        for p in [
            "python3", "-/bin/x", "@/bin/x", ":/bin/x", "+/bin/x", "!/bin/x", "", "./x", "~/x",
        ] {
            assert_eq!(
                exe(p),
                Err(UnitError::RelativeExecutable { path: p.into() }),
                "{p:?}"
            );
        }
        for p in [
            "/bin/$x",
            "/bin/a\"b",
            "/bin/a'b",
            "/bin/a\\b",
            "/bin/a\nb",
            "/bin/a\tb",
            "/bin/",
        ] {
            assert!(
                matches!(exe(p), Err(UnitError::UnsafeExecutable { .. })),
                "{p:?}"
            );
        }
        assert!(matches!(exe("/bin/a\0b"), Err(UnitError::Nul { .. })));
        assert_eq!(
            render(&spec(vec![], vec![])),
            Err(UnitError::EmptyExecStart)
        );
        for p in [
            "/opt/my app/bin/sglang",
            "/opt/100%/x",
            "/opt/;/x",
            "/opt/é/-x",
        ] {
            let s = spec(vec![p.into(), "-x".into()], vec![]);
            assert_eq!(roundtrip(&s).exec_start[0], p);
        }
    }

    #[test]
    fn field_validation_errors() {
        let base = || spec(vec![PY.into()], vec![]);
        let with = |f: &dyn Fn(&mut UnitSpec)| {
            let mut s = base();
            f(&mut s);
            render(&s)
        };
        assert!(matches!(
            with(&|s| s.exec_start.push("a\0b".into())),
            Err(UnitError::Nul { .. })
        ));
        assert!(matches!(
            with(&|s| s.environment.push(("A".into(), "\0".into()))),
            Err(UnitError::Nul { .. })
        ));
        for bad in ["", "1A", "A-B", "A B", "A=B", "É", "A\n"] {
            assert_eq!(
                with(&|s| s.environment.push((bad.into(), "v".into()))),
                Err(UnitError::InvalidEnvName { name: bad.into() }),
                "{bad:?}"
            );
        }
        assert_eq!(
            with(&|s| {
                s.environment.push(("A".into(), "1".into()));
                s.environment.push(("A".into(), "2".into()));
            }),
            Err(UnitError::DuplicateEnvName { name: "A".into() })
        );
        for bad in ["a\nb", " a", "a ", "a\\", "a\tb"] {
            assert!(
                matches!(
                    with(&|s| s.description = bad.into()),
                    Err(UnitError::InvalidValue { .. })
                ),
                "{bad:?}"
            );
        }
        for bad in [
            "srv",
            "/srv/",
            "/srv//x",
            "/srv/./x",
            "/srv/../x",
            "-/srv",
            "/srv\n",
            "/srv ",
        ] {
            assert!(
                matches!(
                    with(&|s| s.working_directory = Some(bad.into())),
                    Err(UnitError::InvalidValue { .. })
                ),
                "{bad:?}"
            );
        }
        for good in ["/", "/srv/my models/100%", "/srv/a\\b"] {
            let mut s = base();
            s.working_directory = Some(good.into());
            assert_eq!(roundtrip(&s).working_directory.as_deref(), Some(good));
        }
        for bad in [
            "",
            "root:x",
            "a b",
            "-x",
            "1a$",
            "65535",
            "4294967295",
            &"a".repeat(32),
        ] {
            assert_eq!(
                with(&|s| s.user = Some(bad.into())),
                Err(UnitError::InvalidUser(bad.into())),
                "{bad:?}"
            );
        }
        for good in ["root", "_svc", "sglang-1", "1000", "0"] {
            assert!(with(&|s| s.user = Some(good.into())).is_ok(), "{good:?}");
        }
        assert_eq!(
            with(&|s| s.restart = Some("sometimes".into())),
            Err(UnitError::InvalidRestart("sometimes".into()))
        );
        for r in RESTART_VALUES {
            assert!(with(&|s| s.restart = Some(r.into())).is_ok());
        }
        assert_eq!(
            with(&|s| s.timeout_start_sec = Some(u64::MAX)),
            Err(UnitError::TimeoutTooLarge(u64::MAX))
        );
        assert!(with(&|s| s.timeout_start_sec = Some(MAX_TIMEOUT_START_SEC)).is_ok());
        let e = with(&|s| s.after.push("net work.target".into())).unwrap_err();
        assert!(
            matches!(&e, UnitError::InvalidUnitName { field, .. } if field == "after[0]"),
            "{e}"
        );
        let e = with(&|s| s.wanted_by.push("multi-user".into())).unwrap_err();
        assert!(e.to_string().contains("wanted_by[0]"), "{e}");
        assert!(matches!(
            with(&|s| s.exec_start.push("x".repeat(LONG_LINE_MAX))),
            Err(UnitError::LineTooLong { .. })
        ));
    }

    #[test]
    fn error_messages_are_readable() {
        let e = render(&spec(vec!["sglang".into()], vec![])).unwrap_err();
        assert!(e.to_string().contains("not an absolute path"), "{e}");
        let e = render(&spec(vec![PY.into(), "a\0".into()], vec![])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "exec_start[1] contains a NUL byte, which cannot be represented in a unit file"
        );
    }

    fn parse_exec_value(v: &str) -> Result<Vec<String>, UnitError> {
        parse(&format!("[Service]\nExecStart={v}\n")).map(|p| p.exec_start)
    }

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parse_follows_systemd_command_line_rules() {
        let ok = |v: &str, w: &[&str]| assert_eq!(parse_exec_value(v), Ok(words(w)), "{v}");
        ok("/bin/a b   c", &["/bin/a", "b", "c"]);
        ok("/bin/a x\"y z\"'w'", &["/bin/a", "xy zw"]);
        ok("/bin/a \"\" ''", &["/bin/a", "", ""]);
        ok("/bin/a \\; \";\" x\\;", &["/bin/a", ";", ";", "x\\;"]);
        ok(
            "/bin/a \\s \\x41\\101\\u00e9\\U0001F980",
            &["/bin/a", " ", "AAé🦀"],
        );
        ok("/bin/a \\n\\t\\\\\\\"\\'", &["/bin/a", "\n\t\\\"'"]);
        // Unknown escapes and a trailing backslash are kept (EXTRACT_CUNESCAPE_RELAX).
        // (A backslash at the very end of the line would be a continuation, so
        // the trailing one is followed by a space that systemd strips.)
        ok(
            "/bin/a \\q \\x00 end\\ ",
            &["/bin/a", "\\q", "\\x00", "end\\"],
        );
        ok("/bin/a %% 100%", &["/bin/a", "%", "100%"]);
        ok(
            "/bin/a $$HOME a$$b x$-y \"a $\"",
            &["/bin/a", "$HOME", "a$b", "x$-y", "a $"],
        );
        ok("/bin/a ;", &["/bin/a"]);
        ok("; /bin/a", &["/bin/a"]);
        let err = |v: &str| parse_exec_value(v).unwrap_err();
        assert!(matches!(
            err("/bin/a ; /bin/b"),
            UnitError::MultipleCommands { .. }
        ));
        assert_eq!(
            err("/bin/a %n"),
            UnitError::Specifier {
                line: 2,
                specifier: 'n'
            }
        );
        assert_eq!(
            err("/bin/%H"),
            UnitError::Specifier {
                line: 2,
                specifier: 'H'
            }
        );
        for (v, p) in [
            ("-/bin/a", '-'),
            ("@/bin/a a", '@'),
            ("\"+/bin/a\"", '+'),
            ("!/bin/a", '!'),
            (":/bin/a", ':'),
        ] {
            assert_eq!(err(v), UnitError::Prefix { line: 2, prefix: p }, "{v}");
        }
        for v in [
            "/bin/a $HOME",
            "/bin/a ${HOME}",
            "/bin/a x${HOME}",
            "/bin/a $",
            "/bin/a x$HOME",
            "/bin/$$a",
        ] {
            assert!(matches!(err(v), UnitError::EnvSubstitution { .. }), "{v}");
        }
        for v in [
            "/bin/a \"x",
            "/bin/a 'x",
            "/bin/a \"x\\",
            "bin/a",
            "/bin/",
            "/bin/a\\\\b",
            "/bin/a \\xff",
        ] {
            assert!(matches!(err(v), UnitError::Syntax { .. }), "{v}");
        }
    }

    #[test]
    fn parse_follows_systemd_file_syntax() {
        let text = "\u{feff}# c\n; c\n[Unit]\n  Description = a %%b\\\\  \n[Service]\r\n\
                    ExecStart=/bin/a \\\n# comment inside continuation\n; another\n   b \\\n\tc\r\
                    Environment=A=1 \"B=2 3\" \\\n C='4\\n'\nEnvironment=A=5\n\
                    WorkingDirectory=/srv//x/./y/\nUser=%%u\n[X-Other]\nExecStart=/bin/other\n";
        let p = parse(text).unwrap();
        assert_eq!(p.description.as_deref(), Some("a %b\\\\"));
        assert_eq!(p.exec_start, words(&["/bin/a", "b", "c"]));
        assert_eq!(
            p.environment,
            vec![
                ("A".to_string(), "5".to_string()),
                ("B".to_string(), "2 3".to_string()),
                ("C".to_string(), "4\n".to_string()),
            ]
        );
        assert_eq!(p.working_directory.as_deref(), Some("/srv/x/y"));
        assert_eq!(p.user.as_deref(), Some("%u"));

        // Empty assignments reset, like systemd.
        let p = parse("[Service]\nEnvironment=A=1\nEnvironment=\nExecStart=/bin/a\nExecStart=\nExecStart=/bin/b\nUser=x\nUser=\n").unwrap();
        assert!(p.environment.is_empty());
        assert_eq!(p.exec_start, words(&["/bin/b"]));
        assert_eq!(p.user, None);

        assert!(matches!(
            parse("[Service]\nExecStart=/bin/a\nExecStart=/bin/b\n"),
            Err(UnitError::MultipleCommands { line: 3 })
        ));
        for bad in [
            "[Service\n",
            "[Service]\nExecStart\n",
            "[Service]\nEnvironment=1A=x\n",
            "[Service]\nEnvironment=noequals\n",
            "[Service]\nEnvironment=\"A=\\q\"\n",
            "[Service]\nEnvironment=\"A=x\n",
            "[Service]\nWorkingDirectory=rel\n",
            "[Service]\nWorkingDirectory=/a/../b\n",
            "[Service]\nExecStart=/bin/a\0\n",
        ] {
            assert!(
                matches!(parse(bad), Err(UnitError::Syntax { .. })),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse("[Service]\nEnvironment=A=%n\n"),
            Err(UnitError::Specifier { specifier: 'n', .. })
        ));
        assert!(matches!(
            parse("[Service]\nWorkingDirectory=-/srv\n"),
            Err(UnitError::Prefix { prefix: '-', .. })
        ));
        // Keys outside the sections gpuplane renders into are ignored.
        assert_eq!(
            parse("ExecStart=/bin/x\n[Install]\nUser=y\n"),
            Ok(ParsedUnit::default())
        );
    }

    fn hostile_char() -> impl Strategy<Value = char> {
        prop_oneof![
            3 => prop::sample::select(vec![
                '\n', '\r', '\t', ' ', '"', '\'', '\\', '$', '%', ';', '{', '}', '-', '@', ':',
                '+', '!', '|', '#', '=', '[', ']', '`', '\x01', '\x0b', '\x1b', '\x7f', 'x',
                'n', 's', '0', 'é', '\u{feff}', '\u{85}', '🦀',
            ]),
            1 => any::<char>().prop_filter("no NUL", |c| *c != '\0'),
        ]
    }

    fn hostile_string() -> impl Strategy<Value = String> {
        prop::collection::vec(hostile_char(), 0..16).prop_map(|v| v.into_iter().collect())
    }

    fn executable() -> impl Strategy<Value = String> {
        "(/[a-zA-Z0-9 ._%;@+:!é-]{1,8}){1,3}"
    }

    fn environment() -> impl Strategy<Value = Vec<(String, String)>> {
        prop::collection::btree_map("[A-Za-z_][A-Za-z0-9_]{0,6}", hostile_string(), 0..6)
            .prop_map(|m| m.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn prop_render_parse_round_trip(
            exe in executable(),
            args in prop::collection::vec(hostile_string(), 0..8),
            env in environment(),
        ) {
            let mut argv = vec![exe];
            argv.extend(args);
            let s = spec(argv, env);
            let text = render(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let p = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            prop_assert_eq!(p.exec_start, s.exec_start);
            prop_assert_eq!(p.environment, s.environment);
            prop_assert_eq!(text.lines().filter(|l| l.starts_with("ExecStart=")).count(), 1);
            prop_assert!(!text.chars().any(|c| is_control(c) && c != '\n'));
        }

        #[test]
        fn prop_any_string_is_one_argument(arg in any::<String>()) {
            let arg: String = arg.chars().filter(|c| *c != '\0').collect();
            let s = spec(vec![PY.into(), arg, "tail".into()], vec![]);
            let text = render(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(parse(&text).map(|p| p.exec_start), Ok(s.exec_start));
        }

        #[test]
        fn prop_parse_never_panics(text in "[\\[\\]A-Za-z=\"'\\\\$%; \n\r\t#é-]{0,80}") {
            let _ = parse(&text);
            let _ = parse(&format!("[Service]\nExecStart={text}"));
            let _ = parse(&format!("[Service]\nEnvironment={text}"));
        }
    }

    /// Decodes the `Command Line:` dump of systemd-analyze (systemd's
    /// `quote_command_line()`): bare words, or double-quoted words with `\"`,
    /// `\\`, `` \` ``, `\$` and C escapes.
    fn decode_dump_command_line(s: &str) -> Vec<String> {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b' ' {
                i += 1;
                continue;
            }
            let mut w = Vec::new();
            if b[i] == b'"' {
                i += 1;
                while b[i] != b'"' {
                    if b[i] == b'\\' {
                        if matches!(b[i + 1], b'$' | b'`' | b'"' | b'\\') {
                            w.push(b[i + 1]);
                            i += 2;
                        } else {
                            let (n, u) = cunescape_one(&b[i + 1..]).expect("dump escape");
                            match u {
                                Unescaped::Byte(x) => w.push(x),
                                Unescaped::Code(c) => {
                                    let mut buf = [0u8; 4];
                                    let ch = char::from_u32(c).expect("char");
                                    w.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                                }
                            }
                            i += 1 + n;
                        }
                    } else {
                        w.push(b[i]);
                        i += 1;
                    }
                }
                i += 1;
            } else {
                while i < b.len() && b[i] != b' ' {
                    w.push(b[i]);
                    i += 1;
                }
            }
            out.push(String::from_utf8(w).expect("utf8"));
        }
        out
    }

    /// Cross-checks the renderer against the real systemd parser. Skips (with
    /// a note) where `systemd-analyze` is not installed.
    #[test]
    fn systemd_analyze_verify_hostile_unit() {
        use std::process::Command;
        if Command::new("systemd-analyze")
            .arg("--version")
            .output()
            .is_err()
        {
            println!("note: systemd-analyze not found; skipping verification against systemd");
            return;
        }
        let dir = std::env::temp_dir().join(format!("gpuplane-sd-verify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = hostile_spec();
        s.exec_start[0] = "/bin/echo".into();
        s.working_directory = Some("/tmp".into());
        s.restart = Some("on-failure".into());
        s.timeout_start_sec = Some(900);
        s.after = vec!["network-online.target".into()];
        s.wanted_by = vec!["multi-user.target".into()];
        let path = dir.join("gpuplane-hostile.service");
        std::fs::write(&path, render(&s).unwrap()).unwrap();
        let out = Command::new("systemd-analyze")
            .env("SYSTEMD_LOG_LEVEL", "debug")
            .env("SYSTEMD_LOG_COLOR", "0")
            .arg("verify")
            .arg(&path)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{all}");
        // Syntax warnings look like "<path>:<line>: ...".
        let needle = format!("{}:", path.display());
        assert!(!all.contains(&needle), "systemd complained:\n{all}");
        let cmd: Vec<&str> = all
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("Command Line: "))
            .collect();
        assert_eq!(cmd.len(), 1, "{all}");
        // The dump shows argv before exec-time variable substitution, which
        // turns each "$$" into "$" (systemd.service(5) "COMMAND LINES").
        let mut expected = s.exec_start.clone();
        for a in &mut expected[1..] {
            *a = a.replace('$', "$$");
        }
        assert_eq!(decode_dump_command_line(cmd[0]), expected);
        // Environment is dumped raw, one "Environment: K=V" per variable.
        for (k, v) in &s.environment {
            assert!(
                all.contains(&format!("Environment: {k}={v}\n")),
                "{k}: {all}"
            );
        }
    }
}
