//! HTTPS for the webhook: TLS (rustls) over hyper, with bounded requests and connections.

use super::agent::{binding, AgentNode, Agents, Binding};
use super::review::{review, review_agent, Cluster};
use crate::http::server::{accept_loop, reply, serve_connection, Limits, Reply};
use futures::{FutureExt, StreamExt};
use gpuplane_crds::{GpuPartition, InferenceServer};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_rustls::rustls;

/// The largest AdmissionReview read. A `GpuPartition` or `InferenceServer` is a few KiB (its
/// lists are short: slices, GPUs, flags), a review carries it twice (`object`, `oldObject`)
/// with its managed fields, and a Lease or an Event is smaller still: 512 KiB is many times what
/// these objects need. The API server's own 3 MiB request limit was the cap before: eight such
/// bodies and their parse took the pod past its 128 Mi limit.
pub const MAX_BODY: usize = 512 * 1024;
/// Bodies read and reviewed at once: with [`MAX_BODY`] a bound on the memory requests take
/// (8 × 512 KiB and their parse, a few MiB), whatever the number of connections.
pub const BODIES_IN_FLIGHT: usize = 8;
/// How long a request may wait for one of the [`BODIES_IN_FLIGHT`] slots, and then how long its
/// body may take: a slow body cannot hold a slot past the API server's own timeout (5 s).
const BODY_DEADLINE: Duration = Duration::from_secs(3);
/// Connections served at once; more are closed at once.
const MAX_CONNECTIONS: usize = 256;
/// Connections served at once from one peer address: a pod opening hundreds of idle connections
/// holds at most these, and the API server (another address) is still served.
const MAX_PER_PEER: usize = 64;
/// Connections served at once from one /24 (/64) of untrusted peers: five pods of one node's
/// pod network hold half the slots at most.
const MAX_PER_PREFIX: usize = 128;
/// Slots kept for the trusted networks (`--trusted-peers`: the API server's addresses), so
/// reviews are answered however many networks flood the webhook (issue 37).
const RESERVED: usize = 64;
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
    /// The networks the API server calls from (`--trusted-peers`): they have slots of their own
    /// and are not held to the per-network cap. Empty: every peer is alike.
    pub trusted_peers: Vec<ipnet::IpNet>,
}

/// What every request of the server shares.
struct State {
    client: Option<Client>,
    caches: Option<Caches>,
    agents: Agents,
    /// The [`BODIES_IN_FLIGHT`] slots.
    bodies: Semaphore,
}

/// The cluster's objects as the webhook's informers hold them (watched, not listed at each
/// review).
#[derive(Clone)]
struct Caches {
    partitions: Store<GpuPartition>,
    servers: Store<InferenceServer>,
    /// The agents' labelled Leases, when their namespace is known.
    leases: Option<Store<Lease>>,
}

impl Caches {
    /// Starts the watches; the stores fill as the API server answers.
    fn start(client: &Client, lease_ns: Option<&str>) -> Caches {
        let all = watcher::Config::default();
        let partitions = watch(Api::all(client.clone()), all.clone(), "GpuPartitions");
        let servers = watch(Api::all(client.clone()), all, "InferenceServers");
        let leases = lease_ns.map(|ns| {
            let labelled = watcher::Config::default().labels(gpuplane_crds::NODE_LABEL);
            watch(Api::namespaced(client.clone(), ns), labelled, "Leases")
        });
        Caches {
            partitions,
            servers,
            leases,
        }
    }

    /// The cluster now; unreadable while a store has not synced (its first list not answered:
    /// no access, RBAC it lacks), as a failed list was before.
    fn cluster(&self) -> Cluster {
        let mut missing = vec![];
        if !synced(&self.partitions) {
            missing.push("GpuPartitions");
        }
        if !synced(&self.servers) {
            missing.push("InferenceServers");
        }
        if !missing.is_empty() {
            let why = format!(
                "its cache of {} has not synced (can it list and watch them?)",
                missing.join(" and ")
            );
            tracing::warn!("review without the cluster's objects: {why}");
            return Cluster {
                unreadable: Some(why),
                ..Cluster::default()
            };
        }
        let now = crate::clock::timestamp();
        Cluster {
            partitions: self
                .partitions
                .state()
                .iter()
                .map(|p| (**p).clone())
                .collect(),
            servers: self.servers.state().iter().map(|s| (**s).clone()).collect(),
            served_nodes: self.leases.as_ref().filter(|l| synced(l)).map(|l| {
                l.state()
                    .iter()
                    .filter_map(|l| {
                        let node = l.metadata.labels.as_ref()?.get(gpuplane_crds::NODE_LABEL)?;
                        crate::kubeapi::lease::is_live_claim(l, node, now).then(|| node.clone())
                    })
                    .collect()
            }),
            unreadable: None,
        }
    }
}

/// A store kept by a watch of `api` on its own task, retried with backoff.
fn watch<K>(api: Api<K>, config: watcher::Config, what: &'static str) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let stream = watcher(api, config).default_backoff().reflect(writer);
    tokio::spawn(stream.for_each(move |e| {
        if let Err(e) = e {
            tracing::warn!("watching {what}: {e}");
        }
        std::future::ready(())
    }));
    store
}

/// Whether `store` has had its first list.
fn synced<K>(store: &Store<K>) -> bool
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
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
    tracing::info!(listen = %opts.listen, "gpuplane webhook serving /validate and /validate-agent");
    let limits = Limits {
        max_connections: MAX_CONNECTIONS,
        max_per_peer: MAX_PER_PEER,
        max_per_prefix: MAX_PER_PREFIX,
        reserved: if opts.trusted_peers.is_empty() {
            0
        } else {
            RESERVED
        },
        header_read: READ_DEADLINE,
        connection: Duration::from_secs(60),
    };
    let state = Arc::new(State {
        caches: client
            .as_ref()
            .map(|c| Caches::start(c, opts.lease_namespace.as_deref())),
        client,
        agents: opts.agents.clone(),
        bodies: Semaphore::new(BODIES_IN_FLIGHT),
    });
    accept_loop(
        listener,
        limits,
        opts.trusted_peers.clone(),
        move |tcp, peer| {
            let acceptor = acceptor.clone();
            let state = state.clone();
            async move {
                let Ok(Ok(tls)) = tokio::time::timeout(READ_DEADLINE, acceptor.accept(tcp)).await
                else {
                    tracing::debug!(%peer, "TLS handshake failed or timed out");
                    return;
                };
                serve_connection(tls, move |req| handle(req, state.clone()), limits).await;
            }
        },
    )
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
    state: Arc<State>,
) -> Result<Reply, std::convert::Infallible> {
    let text = |code: StatusCode, body: String| reply(code, "text/plain; charset=utf-8", body);
    let agent_only = match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => return Ok(text(StatusCode::OK, "ok\n".into())),
        (&Method::POST, "/validate") => false,
        (&Method::POST, "/validate-agent") => true,
        _ => return Ok(text(StatusCode::NOT_FOUND, "not found\n".into())),
    };
    // One of the body slots for the read, the parse and the review.
    let Ok(Ok(_slot)) = tokio::time::timeout(BODY_DEADLINE, state.bodies.acquire()).await else {
        return Ok(text(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many reviews in flight\n".into(),
        ));
    };
    let read = Limited::new(req.into_body(), MAX_BODY).collect();
    let body = match tokio::time::timeout(BODY_DEADLINE, read).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => return Ok(text(StatusCode::PAYLOAD_TOO_LARGE, format!("{e}\n"))),
        Err(_) => return Ok(text(StatusCode::REQUEST_TIMEOUT, "body too slow\n".into())),
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return Ok(text(StatusCode::BAD_REQUEST, "not JSON\n".into()));
    };
    drop(body);
    let agent = binding(&v["request"], &state.agents);
    // The agent rules answer anyone else at once, without looking at the cluster.
    let cluster = if agent_only && agent.is_none() {
        Cluster::default()
    } else {
        match &state.caches {
            Some(c) => c.cluster(),
            None => Cluster {
                unreadable: Some("it has no API access (no kubeconfig, not in a cluster)".into()),
                ..Cluster::default()
            },
        }
    };
    let node = match agent {
        Some(b) => agent_node(state.client.as_ref(), b).await,
        None => AgentNode::Unbound,
    };
    let answer = if agent_only {
        review_agent(&v, &cluster, &state.agents, &node)
    } else {
        review(&v, &cluster, &state.agents, &node)
    };
    Ok(reply(
        StatusCode::OK,
        "application/json",
        answer.to_string(),
    ))
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
