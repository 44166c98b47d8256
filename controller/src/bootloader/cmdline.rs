//! A kernel command line as text (`/etc/kernel/cmdline`, `/proc/cmdline`, the decoded value of
//! GRUB's variable): words found the way the kernel splits them (`next_arg` in `lib/cmdline.c`:
//! whitespace separates, double quotes keep whitespace inside one word), and edits that touch
//! only the words they add or remove.

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

/// `text` with each word of `absent` removed wherever it stands (with the blank before it, or
/// after it when it is first on its line) and each word of `present` it does not hold appended
/// after the last word (before the line ending); every other byte kept.
pub fn edit(text: &str, present: &[String], absent: &[String]) -> Result<String, String> {
    let spans = words(text)?;
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
    let kept: Vec<String> = words(&out)?
        .into_iter()
        .map(|(s, e)| out[s..e].to_string())
        .collect();
    let mut add: Vec<&String> = Vec::new();
    for p in present {
        if !kept.contains(p) && !add.contains(&p) {
            add.push(p);
        }
    }
    if add.is_empty() {
        return Ok(out);
    }
    let joined: Vec<&str> = add.iter().map(|s| s.as_str()).collect();
    let joined = joined.join(" ");
    Ok(match words(&out)?.last() {
        Some(&(_, e)) => format!("{} {joined}{}", &out[..e], &out[e..]),
        None => {
            // No word at all: the new words go before whatever line ending there is.
            let body = out.trim_end_matches(['\n', '\r']);
            let ending = &out[body.len()..];
            format!("{body}{joined}{ending}")
        }
    })
}
