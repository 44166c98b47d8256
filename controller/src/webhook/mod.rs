//! The validating admission webhook: `kubectl apply` of a wrong spec fails at once, with the
//! message the CLI prints, instead of becoming an `InvalidSpec` condition later.
//!
//! `gpuplane webhook --listen ADDR --tls-cert FILE --tls-key FILE` serves `POST /validate`
//! (AdmissionReview v1) for `GpuPartition` and `InferenceServer`, and `GET /healthz`. The review
//! runs the host-independent validation the CLI runs ([`crate::desired::offline`]), over the
//! object and the cluster's other objects (listed at each review), so it also refuses what a
//! schema cannot express: tensor parallel size against a slice, two servers on one slice or
//! unit, two partitions for one node.
//!
//! # Failure policy
//! The chart registers the webhook with `failurePolicy: Ignore`: when the webhook is down, the
//! API server admits the object and the agent, which always validates again against the real
//! host before its first write, reports the problem as an `InvalidSpec` condition. `Fail` would
//! make a webhook outage block every change to these objects, including deleting a broken
//! partition and the agent's own finalizer updates; the chart lets an admin choose it.
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
