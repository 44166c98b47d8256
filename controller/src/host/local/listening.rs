//! TCP ports in LISTEN state, from `/proc/net/tcp` and `/proc/net/tcp6` (the kernel's own table,
//! per network namespace): the host's as the agent sees it, a container's through `pct exec`.
//! The planner uses them so that a server never starts on a port another program holds.

use std::collections::BTreeSet;

/// Most lines read from one table (a busy host has thousands of sockets; listeners come first
/// only by chance, so the bound is generous).
const LINES_MAX: usize = 200_000;

/// The LISTEN ports of the tables in `text` (`/proc/net/tcp` and `tcp6` concatenated, headers
/// and all). Lines that do not parse are skipped.
pub fn parse(text: &str) -> BTreeSet<u16> {
    let mut out = BTreeSet::new();
    for line in text.lines().take(LINES_MAX) {
        let mut f = line.split_whitespace();
        let (Some(_sl), Some(local), Some(_remote), Some(state)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if state != "0A" {
            continue; // TCP_LISTEN
        }
        if let Some(port) = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
        {
            out.insert(port);
        }
    }
    out
}

#[cfg(test)]
mod tests;
