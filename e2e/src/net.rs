//! Loopback networking: free TCP ports and a one-request HTTP GET (the agent's `/metrics`,
//! `/healthz` and `/readyz`).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

/// Loopback TCP ports for the servers a test starts (etcd, kube-apiserver, the agent's metrics,
/// Prometheus, the webhook), free and reserved for this process until it exits.
///
/// # Why not port 0
/// Binding port 0 hands out a port of the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), and once that listener is closed any outgoing
/// connection (etcd's clients, kubectl, another test's thread) may take the same port before
/// the server binds it: the flake of issue 20. These ports come from below (or above) that
/// range, where the kernel never picks a port by itself, so only an explicit bind can take one.
///
/// # Guarantees
/// - No two callers in this process, and no two processes using this function at once, get the
///   same port: each port is claimed by an exclusive `flock` on
///   `$TMPDIR/gpuplane-e2e-ports/<port>.lock`, held until the process exits (the kernel drops it
///   when the process dies, even by SIGKILL).
/// - Each port could be bound on 127.0.0.1 when it was handed out.
pub fn free_ports(n: usize) -> Vec<u16> {
    let (lo, hi) = reserved_range();
    let span = (hi - lo) as u64;
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let seed = std::process::id() as u64 * 7919
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(0);
    let dir = std::env::temp_dir().join("gpuplane-e2e-ports");
    let _ = std::fs::create_dir_all(&dir);
    let mut out = vec![];
    let mut tries = 0u64;
    while out.len() < n {
        assert!(tries < span, "no free loopback port in {lo}..{hi}");
        let port = lo + ((seed + tries * 104_729) % span) as u16;
        tries += 1;
        if held.iter().any(|(p, _)| *p == port) {
            continue;
        }
        let Ok(f) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{port}.lock")))
        else {
            continue;
        };
        if f.try_lock().is_err() || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        held.push((port, f));
        out.push(port);
    }
    out
}

/// Ports this process holds (the lock files keep them ours until exit).
static HELD: std::sync::Mutex<Vec<(u16, std::fs::File)>> = std::sync::Mutex::new(Vec::new());

/// Up to 10000 ports just below the kernel's ephemeral range (or above it when the range starts
/// too low), never inside it.
fn reserved_range() -> (u16, u16) {
    let text =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut w = text
        .split_whitespace()
        .filter_map(|x| x.parse::<u32>().ok());
    let (first, last) = (w.next().unwrap_or(32768), w.next().unwrap_or(60999));
    ports_outside(first, last)
}

/// A range of ports outside `[first, last]`: `[max(first - 10000, 10000), first)` when at
/// least 2000 ports fit there, else `(last, 65535]`.
pub fn ports_outside(first: u32, last: u32) -> (u16, u16) {
    let lo = first.saturating_sub(10_000).max(10_000);
    if first >= lo + 2000 {
        (lo as u16, first as u16)
    } else {
        ((last + 1).min(65_000) as u16, 65_535)
    }
}

/// One-request HTTP GET on loopback: (status code, body).
pub fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect 127.0.0.1:{port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    // HTTP/1.0 without keep-alive: the server closes the connection after its answer.
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).map_err(|e| e.to_string())?;
    let code = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad HTTP response: {resp:?}"))?;
    let body = resp.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    Ok((code, body.to_string()))
}

/// This machine's address towards the outside (what a container's bridge address is on a real
/// host): not loopback, which discovery never lists for a container.
pub fn own_address() -> std::net::IpAddr {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    if s.connect("203.0.113.1:9").is_ok() {
        if let Ok(a) = s.local_addr() {
            if !a.ip().is_unspecified() && !a.ip().is_loopback() {
                return a.ip();
            }
        }
    }
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.parse::<std::net::IpAddr>().ok())
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
        .expect("this machine has no non-loopback IPv4 address for the container's stand-in")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ports_lie_outside_the_ephemeral_range_and_differ() {
        assert_eq!(ports_outside(32768, 60999), (22768, 32768));
        assert_eq!(ports_outside(1024, 65535).0, 65_000);
        assert_eq!(ports_outside(15000, 30000), (10000, 15000));
        assert_eq!(ports_outside(11000, 30000), (30001, 65535));
        let (lo, hi) = reserved_range();
        let ports = free_ports(20);
        let set: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(set.len(), 20, "{ports:?}");
        assert!(ports.iter().all(|p| (lo..hi).contains(p)), "{ports:?}");
        // Still ours: another claim of the same port fails while we hold its lock.
        let again = free_ports(5);
        assert!(again.iter().all(|p| !set.contains(p)));
    }
}
