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
mod tests {
    use super::parse;

    #[test]
    fn listen_ports_are_read_from_the_kernel_s_tables() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n   1: 0100007F:7530 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 4243 1\n  sl  local_address                         remote_address                        st\n   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 0\n garbage\n";
        assert_eq!(parse(t).into_iter().collect::<Vec<_>>(), vec![22, 30000]);
        assert!(parse("").is_empty());
    }
}
