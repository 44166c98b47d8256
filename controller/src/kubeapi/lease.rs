//! A per-node Lease (`coordination.k8s.io/v1`), so two agents for one node never both act.
//!
//! # Guarantees
//! - Taking or renewing the lease is a `replace` with the observed `resourceVersion`: two agents
//!   racing for it cannot both win (the API server rejects the stale write with 409).
//! - An agent acts only while `is_leader()` is true; it turns false as soon as a renewal fails
//!   or another holder is seen, and at the latest `duration` after the start of the last
//!   successful renewal, the earliest moment another agent can see the lease expired: a renewal
//!   that never answers (a network that drops packets without a reset) cannot leave two
//!   leaders (found by `e2e/tests/kube_faults.rs`, where the old leader kept acting for as long
//!   as its request hung).
//!
//! - The Lease carries the label `gpuplane.dev/node: <node>`, so the webhook (registered for
//!   Leases with that label only) judges every write to it: an agent's credential cannot take
//!   another node's labelled Lease. A Lease of our name *without* that label was written past
//!   the webhook by someone else; it is no claim, and is taken over at once.
//!
//! # Caveats
//! - A holder that stops renewing is replaced after `duration` seconds; a reconcile that was
//!   already running when the lease was lost finishes its current host step.

use gpuplane_crds::NODE_LABEL;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The name of a node's Lease.
pub fn lease_name(node: &str) -> String {
    format!("gpuplane-node-{node}")
}

/// Whether an existing Lease is a claim to respect: labelled with its node (so the webhook has
/// judged its writes) and held by someone whose renewal has not run out.
pub fn is_live_claim(l: &Lease, node: &str, now: jiff::Timestamp) -> bool {
    let labelled = l
        .metadata
        .labels
        .as_ref()
        .and_then(|m| m.get(NODE_LABEL))
        .is_some_and(|v| v == node);
    let spec = l.spec.clone().unwrap_or_default();
    let held = !spec.holder_identity.unwrap_or_default().is_empty();
    let fresh = spec.renew_time.as_ref().is_some_and(|t| {
        let dur = spec.lease_duration_seconds.unwrap_or(15) as i64;
        t.0.as_second() + dur >= now.as_second()
    });
    labelled && held && fresh
}

/// The lease of one node.
#[derive(Clone)]
pub struct NodeLease {
    api: Api<Lease>,
    pub name: String,
    node: String,
    pub identity: String,
    pub duration: Duration,
    leader: Arc<AtomicBool>,
    /// When the lease we hold can expire for the others: the start of our last successful
    /// renewal (its `renewTime` is taken then) plus `duration`.
    valid_until: Arc<Mutex<Option<Instant>>>,
}

impl NodeLease {
    pub fn new(
        client: kube::Client,
        namespace: &str,
        node: &str,
        identity: &str,
        duration: Duration,
    ) -> NodeLease {
        NodeLease {
            api: Api::namespaced(client, namespace),
            name: lease_name(node),
            node: node.to_string(),
            identity: identity.to_string(),
            duration,
            leader: Arc::new(AtomicBool::new(false)),
            valid_until: Arc::new(Mutex::new(None)),
        }
    }

    /// Whether this agent may act for the node now: it holds the lease and the lease cannot
    /// have expired for the others yet.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::SeqCst)
            && self
                .valid_until
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|t| Instant::now() < t)
    }

    /// Stops acting for the node (a renewal failed or did not answer in time).
    pub fn let_go(&self, why: &str) {
        if self.leader.swap(false, Ordering::SeqCst) {
            tracing::warn!(lease = %self.name, identity = %self.identity, "lease state changed: not acting for the node ({why})");
        }
    }

    /// One attempt to take or renew the lease. Returns whether we hold it; an error lets go.
    pub async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let started = Instant::now();
        let held = self
            .attempt()
            .await
            .inspect_err(|e| self.let_go(&e.to_string()))?;
        if held {
            *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(started + self.duration);
        }
        let was = self.leader.swap(held, Ordering::SeqCst);
        if was != held {
            tracing::info!(lease = %self.name, identity = %self.identity, leader = held, "lease state changed");
        }
        Ok(held)
    }

    async fn attempt(&self) -> Result<bool, kube::Error> {
        let now = crate::clock::timestamp();
        let mine = |rv: Option<String>, transitions: i32, acquired: Option<MicroTime>| Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some([(NODE_LABEL.to_string(), self.node.clone())].into()),
                resource_version: rv,
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.duration.as_secs() as i32),
                acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            }),
        };
        let held = match self.api.get_opt(&self.name).await? {
            None => match self
                .api
                .create(&PostParams::default(), &mine(None, 0, None))
                .await
            {
                Ok(_) => true,
                Err(kube::Error::Api(e)) if e.code == 409 => false,
                Err(e) => return Err(e),
            },
            Some(l) => {
                let spec = l.spec.clone().unwrap_or_default();
                let holder = spec.holder_identity.clone().unwrap_or_default();
                if holder == self.identity || !is_live_claim(&l, &self.node, now) {
                    let transitions =
                        spec.lease_transitions.unwrap_or(0) + i32::from(holder != self.identity);
                    let acquired = if holder == self.identity {
                        spec.acquire_time.clone()
                    } else {
                        None
                    };
                    match self
                        .api
                        .replace(
                            &self.name,
                            &PostParams::default(),
                            &mine(l.metadata.resource_version.clone(), transitions, acquired),
                        )
                        .await
                    {
                        Ok(_) => true,
                        Err(kube::Error::Api(e)) if e.code == 409 => false,
                        Err(e) => return Err(e),
                    }
                } else {
                    false
                }
            }
        };
        Ok(held)
    }
}

#[cfg(test)]
mod tests;
