//! HTTPS for the webhook: TLS (rustls) over hyper, with bounded requests and connections.

use super::agent::{binding, AgentNode, Agents, Binding};
use super::review::{review, Cluster};
use crate::http::server::{accept_loop, reply, serve_connection, Limits, Reply};
use gpuplane_crds::{GpuPartition, InferenceServer};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
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
    /// The agents (`system:serviceaccount:<ns>:<sa>`): they may only change finalizers and
    /// status, and hold their own node's Lease (see `agent.rs`).
    pub agents: Agents,
    /// Where the agents' Leases live: a partition for a node without a live one is admitted
    /// with a warning. `None`: not checked.
    pub lease_namespace: Option<String>,
}

/// Serves until the process is stopped.
pub async fn serve(opts: WebhookOptions) -> Result<(), String> {
    let tls = Arc::new(tls_config(&opts)?);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    // Without a cluster the review still checks each object alone.
    let client = match crate::kubeapi::client(opts.kubeconfig.as_deref()).await {
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
    let limits = Limits {
        max_connections: MAX_CONNECTIONS,
        header_read: READ_DEADLINE,
        connection: Duration::from_secs(60),
    };
    let agents = Arc::new(opts.agents.clone());
    let lease_ns = Arc::new(opts.lease_namespace.clone());
    accept_loop(listener, limits, move |tcp, peer| {
        let acceptor = acceptor.clone();
        let client = client.clone();
        let agents = agents.clone();
        let lease_ns = lease_ns.clone();
        async move {
            let Ok(Ok(tls)) = tokio::time::timeout(READ_DEADLINE, acceptor.accept(tcp)).await
            else {
                tracing::debug!(%peer, "TLS handshake failed or timed out");
                return;
            };
            serve_connection(
                tls,
                move |req| handle(req, client.clone(), agents.clone(), lease_ns.clone()),
                limits,
            )
            .await;
        }
    })
    .await;
    Ok(())
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

async fn handle(
    req: Request<Incoming>,
    client: Option<Client>,
    agents: Arc<Agents>,
    lease_ns: Arc<Option<String>>,
) -> Result<Reply, std::convert::Infallible> {
    let text = |code: StatusCode, body: String| reply(code, "text/plain; charset=utf-8", body);
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => Ok(text(StatusCode::OK, "ok\n".into())),
        (&Method::POST, "/validate") => {
            let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return Ok(text(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())),
            };
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
                return Ok(text(StatusCode::BAD_REQUEST, "not JSON\n".into()));
            };
            let cluster = match &client {
                Some(c) => cluster(c, lease_ns.as_deref()).await,
                None => Cluster {
                    unreadable: Some(
                        "it has no API access (no kubeconfig, not in a cluster)".into(),
                    ),
                    ..Cluster::default()
                },
            };
            let node = match binding(&v["request"], &agents) {
                Some(b) => agent_node(client.as_ref(), b).await,
                None => AgentNode::Unbound,
            };
            let answer = review(&v, &cluster, &agents, &node);
            Ok(reply(
                StatusCode::OK,
                "application/json",
                answer.to_string(),
            ))
        }
        _ => Ok(text(StatusCode::NOT_FOUND, "not found\n".into())),
    }
}

/// The node of the agent whose token has `binding`: a pod-bound token's pod is read (its UID must
/// be the token's: a pod deleted and created again under the same name is another pod).
async fn agent_node(client: Option<&Client>, binding: Binding) -> AgentNode {
    let (namespace, name, uid) = match binding {
        Binding::Node(n) => return AgentNode::Known(n),
        Binding::Unbound => return AgentNode::Unbound,
        Binding::Pod {
            namespace,
            name,
            uid,
        } => (namespace, name, uid),
    };
    let Some(client) = client else {
        return AgentNode::Unresolved("the webhook has no Kubernetes client".into());
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    match pods.get_opt(&name).await {
        Ok(Some(p)) if p.metadata.uid.as_deref() != Some(uid.as_str()) => AgentNode::Unresolved(
            format!("pod {namespace}/{name} has another UID than the token's"),
        ),
        Ok(Some(p)) => match p.spec.and_then(|s| s.node_name) {
            Some(n) if !n.is_empty() => AgentNode::Known(n),
            _ => AgentNode::Unresolved(format!("pod {namespace}/{name} is not on a node")),
        },
        Ok(None) => AgentNode::Unresolved(format!("pod {namespace}/{name} does not exist")),
        Err(e) => AgentNode::Unresolved(format!("cannot read pod {namespace}/{name}: {e}")),
    }
}

/// The nodes whose agent holds a live, labelled Lease in `ns`; `None` when they cannot be read.
async fn served_nodes(client: &Client, ns: &str) -> Option<std::collections::BTreeSet<String>> {
    use k8s_openapi::api::coordination::v1::Lease;
    let lp = ListParams::default().labels(gpuplane_crds::NODE_LABEL);
    let leases = Api::<Lease>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .map_err(|e| tracing::debug!("cannot list Leases in {ns}: {e}"))
        .ok()?;
    let now = jiff::Timestamp::now();
    Some(
        leases
            .items
            .iter()
            .filter_map(|l| {
                let node = l.metadata.labels.as_ref()?.get(gpuplane_crds::NODE_LABEL)?;
                crate::kubeapi::lease::is_live_claim(l, node, now).then(|| node.clone())
            })
            .collect(),
    )
}

/// The cluster's partitions and servers; empty lists when they cannot be read (each object is
/// then checked alone, never refused for the API's sake).
async fn cluster(client: &Client, lease_ns: Option<&str>) -> Cluster {
    let lp = ListParams::default();
    let partitions = Api::<GpuPartition>::all(client.clone()).list(&lp).await;
    let servers = Api::<InferenceServer>::all(client.clone()).list(&lp).await;
    match (partitions, servers) {
        (Ok(p), Ok(s)) => Cluster {
            partitions: p.items,
            servers: s.items,
            served_nodes: match lease_ns {
                Some(ns) => served_nodes(client, ns).await,
                None => None,
            },
            unreadable: None,
        },
        (p, s) => {
            let why: Vec<String> = [("GpuPartitions", p.err()), ("InferenceServers", s.err())]
                .into_iter()
                .filter_map(|(kind, e)| e.map(|e| format!("listing {kind}: {e}")))
                .collect();
            let why = crate::text::truncate(&why.join("; "), 500);
            tracing::warn!("cannot list objects for the review: {why}");
            Cluster {
                unreadable: Some(why),
                ..Cluster::default()
            }
        }
    }
}
