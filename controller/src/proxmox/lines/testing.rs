/// Lines of `text` without their terminators (`\n` or `\r\n`).
pub(in crate::proxmox) fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n')
        .map(|l| l.trim_end_matches('\n').trim_end_matches('\r'))
        .collect()
}

/// True if `sub` is a subsequence of `all`.
pub(in crate::proxmox) fn is_subsequence(sub: &[&str], all: &[&str]) -> bool {
    let mut it = all.iter();
    sub.iter().all(|s| it.any(|a| a == s))
}
