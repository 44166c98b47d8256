//! Line helpers shared by the two editors (`lxc_conf`, `pci_cfg`).
//!
//! Both files are read by Perl code that splits the raw text on `\n` only (`split(/\n/, $raw)`)
//! and matches with Perl's `\s`, so a CRLF file keeps its `\r` at the end of each line. The
//! editors keep every line with its terminator, so that concatenating the lines gives back the
//! file byte for byte, and look at a line's content the way PVE does.

/// Splits into lines that keep their `\n` terminator (PVE splits on `\n` only).
pub(super) fn split_lines(text: &str) -> Vec<String> {
    text.split_inclusive('\n').map(str::to_string).collect()
}

/// Line without its `\n` (a `\r` stays, as in PVE).
pub(super) fn content(line: &str) -> &str {
    line.strip_suffix('\n').unwrap_or(line)
}

/// `\r\n`, `\n` or none.
pub(super) fn line_ending(line: &str) -> Option<&'static str> {
    if line.ends_with("\r\n") {
        Some("\r\n")
    } else if line.ends_with('\n') {
        Some("\n")
    } else {
        None
    }
}

/// The file's first line ending, `\n` when no line has one: the ending of new lines that have
/// no line before them to follow.
pub(super) fn first_line_ending(lines: &[String]) -> &'static str {
    lines.iter().find_map(|l| line_ending(l)).unwrap_or("\n")
}

/// The ending of `line`, for new lines inserted after it. A line without one (the unterminated
/// last line of a file) first gets `fallback`, so that the new lines start on a line of their
/// own.
pub(super) fn terminate(line: &mut String, fallback: &str) -> String {
    match line_ending(line) {
        Some(e) => e.to_string(),
        None => {
            line.push_str(fallback);
            fallback.to_string()
        }
    }
}

/// Perl `\s` on byte strings: space, \t, \n, \r, \v, \f.
pub(super) fn is_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

/// Empty or only Perl `\s` (`^\s*$`).
pub(super) fn is_blank(s: &str) -> bool {
    s.chars().all(is_ws)
}

/// Helpers for the editors' tests.
#[cfg(test)]
pub(super) mod testing;
