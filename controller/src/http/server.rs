//! Serving HTTP/1.1 with hyper: the accept loop and one connection, shared by the metrics
//! endpoint and the admission webhook.
//!
//! # Guarantees
//! - At most `max_connections` connections are served at once; more wait in the kernel's
//!   backlog, so a flood cannot grow memory without bound.
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
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Bounds of a served listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
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

/// Accepts connections for ever, handing each to `conn` on its own task while holding one of
/// `limits.max_connections` slots.
pub async fn accept_loop<F, Fut>(listener: TcpListener, limits: Limits, conn: F)
where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let fut = conn(tcp, peer);
        tokio::spawn(async move {
            let _permit = permit;
            fut.await
        });
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
