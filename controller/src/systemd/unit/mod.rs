//! Rendering and parsing of the gpuplane service unit.
//!
//! # Escaping rules used by [`render()`]
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
//! `%%`, variable references or command prefixes, and [`parse()`] reports any of
//! those as errors.
//!
//! # Layout
//!
//! * this file: the types both directions share ([`UnitSpec`], [`ParsedUnit`],
//!   [`UnitError`]) and systemd's limits;
//! * `render.rs`: [`render()`], spec to unit text;
//! * `parse.rs`: [`parse()`], unit text back to a [`ParsedUnit`] the way systemd reads it;
//! * `quote.rs`: the quoting of one word in both directions (systemd.syntax(7) "Quoting"),
//!   kept in one place so that each rule the renderer writes sits next to the code that
//!   reads it back;
//! * `tests.rs`: the tests of both directions, mostly round trips of hostile input.

use serde::{Deserialize, Serialize};

mod parse;
mod quote;
mod render;
#[cfg(test)]
mod tests;

pub use parse::parse;
pub use render::render;

/// First line of every rendered unit.
pub const HEADER: &str = "# Managed by gpuplane; local edits are overwritten.";

/// Whether unit file `text` was written by gpuplane: its first line is [`HEADER`].
pub fn is_managed(text: &str) -> bool {
    text.lines().next() == Some(HEADER)
}

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

/// Environment variable names both directions accept: `[A-Za-z_][A-Za-z0-9_]*`.
fn valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

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
    /// Unit names for `After=`, validated with [`validate_unit_name`](super::name::validate_unit_name).
    pub after: Vec<String>,
    /// Unit names for `WantedBy=` (e.g. `multi-user.target`), validated.
    pub wanted_by: Vec<String>,
    /// Sandboxing settings of `[Service]` (`NoNewPrivileges`, `yes`), rendered after
    /// `ExecStart=` in this order: keys ASCII letters only, values plain (see the module docs).
    #[serde(default)]
    pub sandbox: Vec<(String, String)>,
}

/// The subset of a unit file that [`parse()`] understands.
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
