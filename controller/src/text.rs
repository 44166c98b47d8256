//! Text from outside the agent (crash logs, probe output, process names, versions, spec text
//! echoed in messages), made safe to put into events, status and logs.
//!
//! Untrusted text may hold any Unicode, control characters (terminal escapes, newlines that
//! forge log lines) and be of any length. Every function here cuts on a character boundary
//! (never panics on multi-byte characters) and bounds the result.

/// Largest event note the agent publishes, in bytes (the API server refuses notes over 1 KiB).
pub const EVENT_NOTE_MAX: usize = 1000;

/// Cuts `s` to at most `max` bytes on a character boundary, marking a cut with `…`.
///
/// # Guarantees
/// Never panics; the result is at most `max` bytes (for `max >= 3`) and valid UTF-8; text of
/// at most `max` bytes is returned unchanged.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    const MARK: &str = "…";
    let mut end = max.saturating_sub(MARK.len());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = s[..end].to_string();
    if max >= MARK.len() {
        out.push_str(MARK);
    }
    out
}

/// `s` with line breaks turned into spaces, every other control character but a tab replaced
/// by `�`, then cut to `max` bytes (see [`truncate`]): one line, no terminal escapes.
///
/// # Guarantees
/// The result holds no control character but tabs and is at most `max` bytes.
pub fn sanitize(s: &str, max: usize) -> String {
    // Bound the work on huge input before mapping: at most `max` chars survive anyway.
    let head: String = s
        .chars()
        .take(max + 1)
        .map(|c| match c {
            '\n' | '\r' => ' ',
            '\t' => c,
            c if c.is_control() => '\u{fffd}',
            c => c,
        })
        .collect();
    truncate(&head, max)
}

/// The last `n` of `lines`, joined by ` | ` (a log's tail in one line of a message).
pub fn last_lines(lines: &[String], n: usize) -> String {
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

#[cfg(test)]
mod tests;
