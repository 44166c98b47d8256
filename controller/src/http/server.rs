//! Serving HTTP/1.1 with hyper: the accept loop and one connection, shared by the metrics
//! endpoint and the admission webhook.
//!
//! # Guarantees
//! - At most `max_connections` connections are served at once, at most `max_per_peer` from one
//!   peer address and at most `max_per_prefix` from one network prefix (a /24 of IPv4, a /64 of
//!   IPv6; an IPv4-mapped IPv6 address counts as its IPv4): one client (a pod opening hundreds
//!   of idle connections), or several addresses of one network (aliases, a pod's neighbours),
//!   cannot hold every slot, so another peer (the API server, Prometheus) is still served.
//! - `reserved` of the slots are kept for the trusted networks (the API server's addresses,
//!   given to the webhook): however many networks flood the listener, a trusted peer finds a
//!   slot; trusted peers are held to the per-address cap, not the per-prefix one.
//! - A connection over any cap is accepted and closed at once: the loop keeps accepting, so a
//!   flood never leaves another's connection waiting in the kernel's backlog, and memory stays
//!   bounded.
//! - A client gets `header_read` to send a request's headers and `connection` for the whole
//!   connection (keep-alive included): a slow or silent client cannot hold a slot for ever.
//! - A failed `accept` (EMFILE, a reset) ends one connection, never the loop.
//!
//! # Caveats
//! Request bodies are not read here: a handler that needs one reads it through
//! `http_body_util::Limited` with its own cap (the webhook does).

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Bounds of a served listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    /// Connections served at once from one peer IP address.
    pub max_per_peer: usize,
    /// Connections served at once from one network prefix (/24, /64) of untrusted peers.
    pub max_per_prefix: usize,
    /// Of `max_connections`, slots only trusted peers may take.
    pub reserved: usize,
    /// Time for a request's headers (and for a TLS handshake, where there is one).
    pub header_read: Duration,
    /// Time for a whole connection.
    pub connection: Duration,
}

/// A response with a body in memory.
pub type Reply = Response<Full<Bytes>>;

/// A reply with `code`, `content_type` and `body`.
pub fn reply(code: hyper::StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    r
}

/// Accepts connections for ever, handing each to `conn` on its own task while it holds a slot
/// (one of the general ones, or for a peer in `trusted` a reserved one when those are taken),
/// one of its address's `limits.max_per_peer` and, untrusted, one of its prefix's
/// `limits.max_per_prefix`; a connection over any cap is closed at once.
pub async fn accept_loop<F, Fut>(
    listener: TcpListener,
    limits: Limits,
    trusted: Vec<ipnet::IpNet>,
    conn: F,
) where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let reserved = limits.reserved.min(limits.max_connections);
    let general = Arc::new(Semaphore::new(limits.max_connections - reserved));
    let reserve = Arc::new(Semaphore::new(reserved));
    let peers = Peers::default();
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let ip = canonical(peer.ip());
        let is_trusted = trusted.iter().any(|n| n.contains(&ip));
        let prefix_cap = (!is_trusted).then_some(limits.max_per_prefix);
        let Some(share) = peers.take(ip, limits.max_per_peer, prefix_cap) else {
            tracing::debug!(%peer, "connection refused: the peer or its network holds its share");
            drop(tcp);
            continue;
        };
        let permit = match general.clone().try_acquire_owned() {
            Ok(p) => Ok(p),
            Err(_) if is_trusted => reserve.clone().try_acquire_owned(),
            Err(e) => Err(e),
        };
        let Ok(permit) = permit else {
            tracing::debug!(%peer, "connection refused: all {} slots are held", limits.max_connections);
            drop(tcp);
            continue;
        };
        let fut = conn(tcp, peer);
        tokio::spawn(async move {
            let _held = (permit, share);
            fut.await
        });
    }
}

/// The address a peer is counted as: an IPv4-mapped IPv6 address as its IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The network prefix a peer is counted in: its /24 (IPv4) or /64 (IPv6).
fn prefix_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, 0))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
    }
}

/// What a connection is counted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Addr(IpAddr),
    Prefix(IpAddr),
}

/// Connections held per peer address and per network prefix.
#[derive(Debug, Default, Clone)]
struct Peers(Arc<Mutex<HashMap<Key, usize>>>);

/// One connection of a peer; dropping it gives its counts back.
struct Share {
    peers: Peers,
    keys: Vec<Key>,
}

impl Peers {
    /// One of `ip`'s `cap` slots and, when `prefix_cap` is given, one of its prefix's, if both
    /// have one free.
    fn take(&self, ip: IpAddr, cap: usize, prefix_cap: Option<usize>) -> Option<Share> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut keys = vec![(Key::Addr(ip), cap)];
        if let Some(pc) = prefix_cap {
            keys.push((Key::Prefix(prefix_of(ip)), pc));
        }
        if keys
            .iter()
            .any(|(k, c)| m.get(k).copied().unwrap_or(0) >= *c)
        {
            return None;
        }
        for (k, _) in &keys {
            *m.entry(*k).or_insert(0) += 1;
        }
        Some(Share {
            peers: self.clone(),
            keys: keys.into_iter().map(|(k, _)| k).collect(),
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut m = self.peers.0.lock().unwrap_or_else(|p| p.into_inner());
        for k in &self.keys {
            if let Some(n) = m.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    m.remove(k);
                }
            }
        }
    }
}

/// Serves one connection with `handler` under `limits`' header and connection deadlines.
pub async fn serve_connection<I, H, Fut, E>(io: I, handler: H, limits: Limits)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Reply, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let svc = hyper::service::service_fn(handler);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .serve_connection(TokioIo::new(io), svc);
    match tokio::time::timeout(limits.connection, conn).await {
        Ok(Err(e)) => tracing::debug!("connection: {e}"),
        Err(_) => tracing::debug!("connection closed after {:?}", limits.connection),
        Ok(Ok(())) => {}
    }
}

#[cfg(test)]
mod tests;
