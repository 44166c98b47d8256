//! `gpuplane status`: the front door's part of the view — the clock (or `--now`), whether stdout
//! is a terminal (colour), and the watch loop's stdout; the view itself is `status_view`.

use super::failure::Failure;
use crate::status_view::{watch::Watch, Format, Source};
use std::io::{IsTerminal, Write};

/// Colour only on a terminal, and never when `NO_COLOR` is set (no-color.org).
fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Prints the view once, or with `watch` every interval what changed (at most `count` reads).
pub fn status(
    source: &Source,
    format: Format,
    watch: Option<std::time::Duration>,
    count: Option<u64>,
    now: Option<jiff::Timestamp>,
) -> Result<i32, Failure> {
    let clock = || now.unwrap_or_else(|| crate::clock::now().0);
    let first = source.frame(format, clock()).map_err(Failure::Failed)?;
    for n in &first.1 {
        eprintln!("warning: {n}");
    }
    let colour = colour();
    let mut stdout = std::io::stdout().lock();
    match watch {
        None => {
            stdout.write_all(crate::status_view::render::print(&first.0, colour).as_bytes())?;
        }
        Some(interval) => Watch {
            interval,
            count,
            colour,
            out: &mut stdout,
        }
        .run(first, || source.frame(format, clock()))?,
    }
    Ok(0)
}
