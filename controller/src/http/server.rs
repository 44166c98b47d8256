//! Serving HTTP/1.1 with hyper: the accept loop and one connection, shared by the metrics
//! endpoint and the admission webhook.
//!
//! # Guarantees
//! - At most `max_connections` connections are served at once, and at most `max_per_peer` from
//!   one peer address: one client (a pod opening hundreds of idle connections) cannot hold every
//!   slot, so another peer (the API server, Prometheus) is still served. A connection over
//!   either cap is accepted and closed at once: the loop keeps accepting, so a flood from one
//!   peer never leaves another's connection waiting in the kernel's backlog, and memory stays
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

/// Accepts connections for ever, handing each to `conn` on its own task while it holds one of
/// `limits.max_connections` slots and one of its peer's `limits.max_per_peer`; a connection
/// over either cap is closed at once.
pub async fn accept_loop<F, Fut>(listener: TcpListener, limits: Limits, conn: F)
where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
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
        let Some(share) = peers.take(peer.ip(), limits.max_per_peer) else {
            tracing::debug!(%peer, "connection refused: the peer holds its {} slots", limits.max_per_peer);
            drop(tcp);
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
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

/// Connections held per peer address.
#[derive(Debug, Default, Clone)]
struct Peers(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One connection of a peer; dropping it gives the slot back.
struct Share {
    peers: Peers,
    ip: IpAddr,
}

impl Peers {
    /// One of `ip`'s `cap` slots, if it has one free.
    fn take(&self, ip: IpAddr, cap: usize) -> Option<Share> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(Share {
            peers: self.clone(),
            ip,
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut m = self.peers.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
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
