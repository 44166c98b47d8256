//! [`render`]: a [`UnitSpec`] to deterministic unit text.
//!
//! Every value is checked against what systemd would do with it and refused with a
//! [`UnitError`] when no spelling keeps its meaning; the escaping rules are listed in the docs
//! of [`crate::systemd::unit`].

use super::quote::{is_control, quote_word, WordContext};
use super::{
    valid_env_name, UnitError, UnitSpec, HEADER, LONG_LINE_MAX, MAX_TIMEOUT_START_SEC, NAME_MAX,
    PATH_MAX, RESTART_VALUES,
};
use crate::systemd::name::validate_unit_name;

/// `field` is named only on the error (`format_args!` for a numbered one): the planner renders
/// every server's unit in every plan, and naming each argument cost more than checking it.
fn check_nul(field: impl std::fmt::Display, value: &str) -> Result<(), UnitError> {
    if value.contains('\0') {
        return Err(UnitError::Nul {
            field: field.to_string(),
        });
    }
    Ok(())
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
fn render_plain(field: impl std::fmt::Display + Copy, value: &str) -> Result<String, UnitError> {
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
/// * [`parse`](fn@super::parse) of the text returns exactly `spec.exec_start`,
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
    push_environment(&mut out, &spec.environment)?;
    push_line(&mut out, "ExecStart", &render_exec_start(&spec.exec_start)?)?;

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
    for (key, value) in &spec.sandbox {
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(UnitError::InvalidValue {
                field: "sandbox".into(),
                value: key.clone(),
                reason: "a setting name is ASCII letters only".into(),
            });
        }
        let v = render_plain(format_args!("sandbox[{key}]"), value)?;
        push_line(&mut out, key, &v)?;
    }

    if !spec.wanted_by.is_empty() {
        let wanted = render_unit_names("wanted_by", &spec.wanted_by)?;
        out.push_str("\n[Install]\n");
        push_line(&mut out, "WantedBy", &wanted)?;
    }
    Ok(out)
}

/// `Environment=` lines, one per variable, each name valid and given once.
fn push_environment(out: &mut String, environment: &[(String, String)]) -> Result<(), UnitError> {
    let mut seen: Vec<&str> = Vec::with_capacity(environment.len());
    for (i, (name, value)) in environment.iter().enumerate() {
        check_nul(format_args!("environment[{i}] name"), name)?;
        check_nul(format_args!("environment[{name}]"), value)?;
        if !valid_env_name(name) {
            return Err(UnitError::InvalidEnvName { name: name.clone() });
        }
        if seen.contains(&name.as_str()) {
            return Err(UnitError::DuplicateEnvName { name: name.clone() });
        }
        seen.push(name);
        let word = quote_word(&format!("{name}={value}"), WordContext::Env);
        push_line(out, "Environment", &word)?;
    }
    Ok(())
}

/// `ExecStart=`'s value: the executable, then every argument quoted as one word.
fn render_exec_start(argv: &[String]) -> Result<String, UnitError> {
    let (exe, args) = argv.split_first().ok_or(UnitError::EmptyExecStart)?;
    let mut cmd = render_executable(exe)?;
    for (i, arg) in args.iter().enumerate() {
        check_nul(format_args!("exec_start[{}]", i + 1), arg)?;
        cmd.push(' ');
        cmd.push_str(&quote_word(arg, WordContext::Exec));
    }
    Ok(cmd)
}
