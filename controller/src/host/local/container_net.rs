//! A container's addresses as the host knows them, never as the container says.
//!
//! The agent GETs a container server's `/health_generate` and `/v1/models` and POSTs its smoke
//! requests there, and copies the answers into status. `hostname -I` inside the container is
//! the container's own text: its root could name the host's loopback or another machine. So the
//! addresses come from the host side:
//! 1. the static `ip=`/`ip6=` of the config's `netN:` lines (`/etc/pve/lxc/<vmid>.conf`, the
//!    admin's file, which the container cannot write);
//! 2. else the addresses the kernel holds for the container's network namespace, read on the
//!    host from `/proc/<init pid>/net/fib_trie` (IPv4 `LOCAL` entries), the PID from
//!    `lxc-info -n <vmid> -p -H` (Proxmox runs containers with LXC).
//!
//! Loopback, link-local, unspecified and multicast addresses are never targets.

use std::net::IpAddr;

/// Whether the agent may send a request to `ip` for a container's server.
pub fn routable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v) => {
            !(v.is_loopback()
                || v.is_link_local()
                || v.is_unspecified()
                || v.is_multicast()
                || v.is_broadcast())
        }
        IpAddr::V6(v) => {
            let link_local = (v.segments()[0] & 0xffc0) == 0xfe80;
            !(v.is_loopback() || v.is_unspecified() || v.is_multicast() || link_local)
                && v.to_ipv4_mapped().is_none_or(|m| routable(IpAddr::V4(m)))
        }
    }
}

/// Static addresses of a container config's `netN:` lines (`ip=10.0.0.5/24`, `ip6=fd00::5/64`);
/// `dhcp`, `auto` and `manual` name none. Only the main section counts (snapshots and pending
/// changes are not what runs).
pub fn config_addresses(config: &str) -> Vec<IpAddr> {
    let mut out = vec![];
    for line in config.lines() {
        if line.starts_with('[') {
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let is_net = key
            .strip_prefix("net")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_net {
            continue;
        }
        for opt in value.trim().split(',') {
            let Some((k, v)) = opt.split_once('=') else {
                continue;
            };
            if k == "ip" || k == "ip6" {
                let addr = v.split('/').next().unwrap_or("");
                if let Ok(ip) = addr.parse() {
                    out.push(ip);
                }
            }
        }
    }
    out
}

/// The IPv4 addresses `/proc/<pid>/net/fib_trie` lists as `LOCAL` to the namespace (the line
/// after an address `|-- A.B.C.D` is `/32 host LOCAL` for an address of an interface).
pub fn fib_trie_local(text: &str) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = vec![];
    let mut last: Option<IpAddr> = None;
    for line in text.lines().take(100_000) {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = a.trim().parse().ok();
        } else if t.starts_with("/32 host LOCAL") {
            if let Some(ip) = last {
                if !out.contains(&ip) {
                    out.push(ip);
                }
            }
        }
    }
    out
}

/// The address to reach a server listening on `listen` among the container's `own` addresses:
/// for a wildcard listen (or loopback, which the agent cannot reach inside the container's
/// namespace anyway) the first routable one, else `listen` itself when it is one of them.
pub fn pick(listen: &str, own: &[IpAddr]) -> Option<String> {
    let wildcard = matches!(listen, "0.0.0.0" | "::" | "127.0.0.1" | "::1" | "localhost");
    let mut ok = own.iter().copied().filter(|ip| routable(*ip));
    if wildcard {
        return ok.next().map(|ip| ip.to_string());
    }
    let want: IpAddr = listen.parse().ok()?;
    ok.find(|ip| *ip == want).map(|ip| ip.to_string())
}

#[cfg(test)]
mod tests;
