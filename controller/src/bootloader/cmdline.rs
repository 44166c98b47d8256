//! A kernel command line as text (`/etc/kernel/cmdline`, `/proc/cmdline`, the decoded value of
//! GRUB's variable): words found the way the kernel splits them (`next_arg` in `lib/cmdline.c`:
//! whitespace separates, double quotes keep whitespace inside one word), and edits that touch
//! only the words they add or remove.
//!
//! A lone `--` ends the kernel's arguments (`parse_args` in `kernel/params.c`): the words after
//! it are init's. The editor reads, removes and adds only the kernel's words, before it.

/// The byte spans of the words of `text`, in order. An unterminated double quote is an error:
/// where the word ends would be a guess.
pub fn words(text: &str) -> Result<Vec<(usize, usize)>, String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let mut quoted = false;
        while i < b.len() && (quoted || !b[i].is_ascii_whitespace()) {
            if b[i] == b'"' {
                quoted = !quoted;
            }
            i += 1;
        }
        if quoted {
            return Err(format!(
                "an unterminated double quote in the kernel command line at byte {start}"
            ));
        }
        out.push((start, i));
    }
    Ok(out)
}

/// Whether word `w` ends the kernel's arguments: a lone `--` (quoted too: the kernel takes the
/// quotes off before it compares).
pub fn is_separator(w: &str) -> bool {
    w == "--" || w == "\"--\""
}

/// The byte spans of the kernel's words of `text` (those before the first lone `--`), and the
/// span of that `--` when there is one.
pub fn kernel_words(text: &str) -> Result<KernelWords, String> {
    let mut spans = words(text)?;
    match spans.iter().position(|&(s, e)| is_separator(&text[s..e])) {
        Some(i) => {
            let sep = spans[i];
            spans.truncate(i);
            Ok((spans, Some(sep)))
        }
        None => Ok((spans, None)),
    }
}

/// The kernel's words' spans and the separator's span (see [`kernel_words`]).
pub type KernelWords = (Vec<(usize, usize)>, Option<(usize, usize)>);

/// `text` with each of the kernel's words (before a lone `--`) that `absent` lists removed
/// wherever it stands (with the blank before it, or after it when it is first on its line) and
/// each word of `present` the kernel's words lack added after the last of them — so before the
/// `--` when there is one, where the kernel (not init) reads it; every other byte kept.
pub fn edit(text: &str, present: &[String], absent: &[String]) -> Result<String, String> {
    let (spans, _) = kernel_words(text)?;
    let b = text.as_bytes();
    // Byte ranges to cut, each a word with one run of blanks (space or tab) on one side.
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for &(s, e) in &spans {
        if !absent.iter().any(|a| a.as_bytes() == &b[s..e]) {
            continue;
        }
        let mut from = s;
        while from > 0 && matches!(b[from - 1], b' ' | b'\t') {
            from -= 1;
        }
        let at_line_start = from == 0 || b[from - 1] == b'\n';
        let mut to = e;
        if at_line_start {
            from = s;
            while to < b.len() && matches!(b[to], b' ' | b'\t') {
                to += 1;
            }
        }
        cuts.push((from, to));
    }
    let mut out = String::with_capacity(text.len() + 64);
    let mut at = 0;
    for (from, to) in cuts {
        let from = from.max(at);
        out.push_str(&text[at..from]);
        at = to.max(at);
    }
    out.push_str(&text[at..]);
    let (kept_spans, separator) = kernel_words(&out)?;
    let kept: Vec<&str> = kept_spans.iter().map(|&(s, e)| &out[s..e]).collect();
    let mut add: Vec<&String> = Vec::new();
    for p in present {
        if !kept.contains(&p.as_str()) && !add.contains(&p) {
            add.push(p);
        }
    }
    if add.is_empty() {
        return Ok(out);
    }
    let joined: Vec<&str> = add.iter().map(|s| s.as_str()).collect();
    let joined = joined.join(" ");
    Ok(match (kept_spans.last(), separator) {
        (Some(&(_, e)), _) => format!("{} {joined}{}", &out[..e], &out[e..]),
        // Only init's words: the new ones go before the `--`.
        (None, Some((s, _))) => format!("{}{joined} {}", &out[..s], &out[s..]),
        (None, None) => {
            // No word at all: the new words go before whatever line ending there is.
            let body = out.trim_end_matches(['\n', '\r']);
            let ending = &out[body.len()..];
            format!("{body}{joined}{ending}")
        }
    })
}
