//! The quoting of one word, in both directions: [`quote_word`] writes a word so that systemd
//! reads it back unchanged, [`extract_word`] reads a word the way systemd's
//! `extract_first_word()` does, with the C unescaping of `cunescape_one()`.
//!
//! The renderer uses the first and the parser the second. They live together so that each
//! quoting rule (systemd.syntax(7) "Quoting") sits next to the code that undoes it.

use std::fmt::Write as _;

use super::WS;

pub(super) fn is_control(c: char) -> bool {
    (c as u32) < 0x20 || c == '\x7f'
}

/// Characters that need no quoting in any context we render a word into.
fn is_bare_safe(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':' | ',' | '=' | '+' | '@')
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum WordContext {
    /// An `ExecStart=` argument: `$` is doubled, a lone `;` is escaped.
    Exec,
    /// An `Environment=` assignment: `$` is literal.
    Env,
}

/// Renders one word so that systemd's `extract_first_word(EXTRACT_UNQUOTE |
/// EXTRACT_CUNESCAPE)` followed by specifier (and, for [`WordContext::Exec`],
/// variable) resolution yields exactly `s`. `s` must not contain NUL.
pub(super) fn quote_word(s: &str, ctx: WordContext) -> String {
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

/// Result of one successful `cunescape_one()`.
pub(super) enum Unescaped {
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
pub(super) fn cunescape_one(s: &[u8]) -> Option<(usize, Unescaped)> {
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
pub(super) fn extract_word(
    s: &[u8],
    pos: &mut usize,
    relax: bool,
) -> Result<Option<Vec<u8>>, &'static str> {
    while s.get(*pos).is_some_and(|b| WS.contains(b)) {
        *pos += 1;
    }
    if *pos >= s.len() {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut quote: Option<u8> = None;
    loop {
        // A run of bytes that stand for themselves is copied at once (the byte-by-byte
        // branches below would push each of them unchanged).
        let run = s[*pos..]
            .iter()
            .position(|&b| {
                b == b'\\'
                    || match quote {
                        Some(q) => b == q,
                        None => b == b'\'' || b == b'"' || WS.contains(&b),
                    }
            })
            .unwrap_or(s.len() - *pos);
        out.extend_from_slice(&s[*pos..*pos + run]);
        *pos += run;
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
