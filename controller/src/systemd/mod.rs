//! Rendering and parsing of the systemd service unit that runs an SGLang
//! inference server.
//!
//! The unit is built from user-supplied spec text (model paths, served model
//! names, extra arguments, environment values). systemd unit files are a small
//! language of their own: `%` starts a specifier, `$` expands variables on
//! command lines, a lone `;` separates commands, a trailing `\` joins lines,
//! quotes and C escapes are interpreted, and prefixes such as `-` or `+` on the
//! executable change how it runs. This module exists so that **no spec string
//! can change the meaning of the unit**: every argv element renders as exactly
//! one word and every environment value as exactly one assignment, and anything
//! that cannot be represented that way is refused with a [`unit::UnitError`]
//! instead of being written.
//!
//! * [`unit::render()`] turns a [`unit::UnitSpec`] into deterministic unit text.
//! * [`unit::parse()`] reads the relevant keys back the way systemd does; the
//!   simulated host uses it to "run" a unit and the tests use it to prove the
//!   round trip `parse(render(spec)) == spec` for hostile input.
//! * [`name`] validates unit names (systemd.unit(5)).
//!
//! The rules implemented follow systemd.service(5) "COMMAND LINES",
//! systemd.exec(5) `Environment=`, systemd.unit(5) "SPECIFIERS" and
//! systemd.syntax(7) (quoting, comments, line continuation), cross-checked
//! against systemd 252's `config_parse_exec()`/`extract_first_word()` and,
//! where the binary is installed, against `systemd-analyze verify`.

pub mod name;
pub mod unit;

pub use name::{service_unit_name, validate_unit_name};
pub use unit::{parse, render, ParsedUnit, UnitError, UnitSpec};
