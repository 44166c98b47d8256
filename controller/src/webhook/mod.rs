//! The validating admission webhook: `kubectl apply` of a wrong spec fails at once, with the
//! message the CLI prints, instead of becoming an `InvalidSpec` condition later.
//!
//! `gpuplane webhook --listen ADDR --tls-cert FILE --tls-key FILE` serves `POST /validate`
//! (AdmissionReview v1) for `GpuPartition`, `InferenceServer` and `GpuNodePool` (its spec: a
//! pool's status is the agents', judged by no webhook yet), `POST /validate-agent` (the
//! agent rules alone, [`agent`]) and `GET /healthz`. The review runs the host-independent
//! validation the CLI runs ([`crate::desired::offline`]), over the object and the cluster's
//! other objects (held by informer caches, watched, not listed per review), so it also refuses
//! what a schema cannot express: tensor parallel size against a slice, two servers on one slice
//! or unit, two partitions for one node.
//!
//! # Failure policy
//! Two walls, two policies. Spec validation (`/validate`) is registered with `failurePolicy:
//! Ignore` by default: when the webhook is down, the API server admits the object and the agent,
//! which always validates again against the real host before its first write, reports the
//! problem as an `InvalidSpec` condition. The agent rules (`/validate-agent`: the agent's
//! updates, status writes and Leases) are always `Fail`: a webhook that cannot answer (down,
//! starved) must not let a stolen agent token through. Before Kubernetes 1.28 (no
//! matchConditions) that entry sees every user's updates, so while no replica answers nobody
//! updates these objects (the chart runs two replicas and a PodDisruptionBudget); creates and
//! deletes never wait on it (the agent's RBAC grants neither). Where the API server has
//! ValidatingAdmissionPolicy the chart ships the same rules as policies too.
//!
//! # Bounds
//! Connections: 256, 64 per peer address (the API server is another address than a flooding
//! pod). Bodies: 512 KiB each (`server::MAX_BODY`), 8 at once (`server::BODIES_IN_FLIGHT`).
//!
//! # Caveats
//! The API server drops unknown fields before admission, so a misspelt field never reaches the
//! webhook: `kubectl apply` refuses it itself from the CRD's published schema (and the CLI does
//! the same). Only what the host decides (GPUs present, containers existing, GPUs in use) is
//! left to the agent.

pub mod agent;
pub mod review;
mod server;

pub use agent::{AgentNode, Agents};
pub use review::review;
pub use server::{serve, WebhookOptions};
