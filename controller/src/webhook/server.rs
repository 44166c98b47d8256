//! HTTPS for the webhook: TLS (rustls) over hyper, with bounded requests and connections.

use super::review::{review, Cluster};
use bytes::Bytes;
use gpuplane_crds::{GpuPartition, InferenceServer};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::api::ListParams;
use kube::{Api, Client};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_rustls::rustls;

/// The largest AdmissionReview accepted (the API server's own request limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;
/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 64;
/// Time for a TLS handshake or for a request's headers.
const READ_DEADLINE: Duration = Duration::from_secs(10);

/// Settings of `gpuplane webhook`.
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    pub listen: String,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    pub kubeconfig: Option<PathBuf>,
}

/// Serves until the process is stopped.
pub async fn serve(opts: WebhookOptions) -> Result<(), String> {
    let tls = Arc::new(tls_config(&opts)?);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    // Without a cluster the review still checks each object alone.
    let client = match crate::reconcile::client(opts.kubeconfig.as_deref()).await {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!("no Kubernetes client ({e}); objects are checked one by one");
            None
        }
    };
    let listener = tokio::net::TcpListener::bind(&opts.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", opts.listen))?;
    tracing::info!(listen = %opts.listen, "gpuplane webhook serving /validate");
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return Ok(());
        };
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // A failed accept (EMFILE, a reset) ends one connection, never the server.
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let client = client.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let Ok(Ok(tls)) = tokio::time::timeout(READ_DEADLINE, acceptor.accept(tcp)).await
            else {
                tracing::debug!(%peer, "TLS handshake failed or timed out");
                return;
            };
            let svc = hyper::service::service_fn(move |req| handle(req, client.clone()));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(READ_DEADLINE)
                .serve_connection(TokioIo::new(tls), svc);
            if let Err(e) = tokio::time::timeout(Duration::from_secs(60), conn).await {
                tracing::debug!(%peer, "connection closed after its deadline: {e}");
            }
        });
    }
}

/// The server's certificate chain and key, from PEM files.
fn tls_config(opts: &WebhookOptions) -> Result<rustls::ServerConfig, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&opts.tls_cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("--tls-cert {}: {e}", opts.tls_cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&opts.tls_key)
        .map_err(|e| format!("--tls-key {}: {e}", opts.tls_key.display()))?;
    rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("--tls-cert/--tls-key: {e}"))
}

type Reply = Response<Full<Bytes>>;

async fn handle(req: Request<Incoming>, client: Option<Client>) -> Result<Reply, hyper::Error> {
    let reply = |code: StatusCode, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = code;
        r
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => Ok(reply(StatusCode::OK, "ok\n".into())),
        (&Method::POST, "/validate") => {
            let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return Ok(reply(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())),
            };
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
                return Ok(reply(StatusCode::BAD_REQUEST, "not JSON\n".into()));
            };
            let cluster = match &client {
                Some(c) => cluster(c).await,
                None => Cluster::default(),
            };
            let answer = review(&v, &cluster);
            let mut r = reply(StatusCode::OK, answer.to_string());
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            Ok(r)
        }
        _ => Ok(reply(StatusCode::NOT_FOUND, "not found\n".into())),
    }
}

/// The cluster's partitions and servers; empty lists when they cannot be read (each object is
/// then checked alone, never refused for the API's sake).
async fn cluster(client: &Client) -> Cluster {
    let lp = ListParams::default();
    let partitions = Api::<GpuPartition>::all(client.clone()).list(&lp).await;
    let servers = Api::<InferenceServer>::all(client.clone()).list(&lp).await;
    match (partitions, servers) {
        (Ok(p), Ok(s)) => Cluster {
            partitions: p.items,
            servers: s.items,
        },
        (p, s) => {
            tracing::warn!(
                "cannot list objects for the review (partitions: {:?}, servers: {:?})",
                p.err().map(|e| e.to_string()),
                s.err().map(|e| e.to_string())
            );
            Cluster::default()
        }
    }
}
