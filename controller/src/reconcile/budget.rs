//! Disruption slots in the API server: a pool member's agent asks its `GpuNodePool` for a slot
//! before it disrupts its host, and reports where it stands after each reconcile.
//!
//! Each [`ask`] reads the pool (a quorum read), lists its members (partitions labelled
//! `gpuplane.dev/pool=<pool>`) and the agents' Leases, lets the pure [`crate::pool::decide`]
//! compute the pool's next status, and writes it with a `replace` of the status subresource
//! that carries the `resourceVersion` it read. A write that lost a race (409) is decided again
//! on a fresh read, so no two agents both take the last slot. Anything else that fails (the API
//! server unreachable, a refusal) is an error: the caller then starts no disruption.
//!
//! A slot given back is handed on in the same write to the next member in line
//! ([`crate::pool::next_in_line`]); should the API server refuse that write (a webhook that
//! judges by an older rule, a member it does not know yet), the write is decided again without
//! the hand-on: giving a slot back never waits on handing it on.
//!
//! Reusable: any host change that needs a slot (a reboot for kernel arguments) asks the same
//! way, with its own reason.

pub mod gate;
pub mod wait;

use super::{Ctx, Error};
use crate::kubeapi::lease::{is_live_claim, lease_name};
use crate::pool::{decide_with, Answer, Ask, Member};
use gpuplane_crds::condition::{types, ConditionStatus, Time};
use gpuplane_crds::{GpuNodePool, GpuPartition, NODE_LABEL, POOL_LABEL};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use std::time::Duration;

/// Attempts of one ask before it gives up on a busy pool (each after a 409).
const ATTEMPTS: u32 = 12;

/// The pool a partition is a member of ([`gpuplane_crds::pool_of`]), owned.
pub fn pool_of(p: &GpuPartition) -> Option<String> {
    gpuplane_crds::pool_of(p).map(str::to_string)
}

/// Asks `pool` for `ask` on behalf of partition `p`, decided at `now` (the pass's time). A pool
/// that does not exist answers `Denied` (a member never disrupts without its pool), not an
/// error.
pub async fn ask(
    ctx: &Ctx,
    pool: &str,
    p: &GpuPartition,
    ask: Ask,
    now: jiff::Timestamp,
) -> Result<Answer, Error> {
    let pools: Api<GpuNodePool> = Api::all(ctx.client.clone());
    let who = p.name_any();
    let node = p.spec.node_name.clone();
    let mut hand_on = true;
    for attempt in 0..ATTEMPTS {
        let Some(current) = pools.get_opt(pool).await? else {
            return Ok(Answer::Denied(format!(
                "the GpuNodePool {pool} named by the label {POOL_LABEL} does not exist"
            )));
        };
        // A slot this member holds, as its entry says (granted or handed on): held, on this
        // fresh read, without listing the members or writing (`pool::already_held`).
        if matches!(ask, Ask::Slot { .. }) && crate::pool::already_held(&current, &who, &node) {
            record(ctx, pool, &Answer::Held);
            return Ok(Answer::Held);
        }
        let members = members(ctx, pool, now).await?;
        let (st, answer) = decide_with(&current, &members, &who, &node, &ask, &Time(now), hand_on);
        let handed = handed_to(current.status.as_ref(), &st, &who);
        let held = |s: Option<&gpuplane_crds::GpuNodePoolStatus>| {
            s.is_some_and(|s| crate::pool::holds(s, &who))
        };
        let waits = |s: Option<&gpuplane_crds::GpuNodePoolStatus>| {
            s.is_some_and(|s| {
                s.members
                    .iter()
                    .any(|e| e.name == who && e.state == crate::pool::WAITING)
            })
        };
        let change = match (held(current.status.as_ref()), held(Some(&st))) {
            (false, true) => Some("granted"),
            (true, false) => Some("released"),
            _ if !waits(current.status.as_ref()) && waits(Some(&st)) => Some("waited for"),
            _ => None,
        };
        show_members(ctx, pool, &st);
        let paused = |on: bool| i64::from(on);
        let m = &ctx.metrics.pool_paused;
        m.with_label_values(&[pool, "MemberFailed"])
            .set(paused(st.failure.is_some()));
        m.with_label_values(&[pool, "Paused"])
            .set(paused(current.spec.paused));
        if current.status.as_ref() == Some(&st) {
            record(ctx, pool, &answer);
            return Ok(answer);
        }
        // Said once the write took (below): the timestamps of slot handoffs, for a person
        // reading the log and for the pool benchmark (`e2e/tests/kube_pool.rs`).
        let said = |c: &str| tracing::info!(pool, member = %who, "pool slot {c}");
        let mut next = current.clone();
        next.status = Some(st);
        // The resourceVersion read above travels in the body: a write in between answers 409.
        match pools
            .replace_status(pool, &PostParams::default(), &next)
            .await
        {
            Ok(_) => {
                if let Some(c) = change {
                    said(c);
                }
                for to in &handed {
                    tracing::info!(pool, member = %who, to = %to, "pool slot handed on");
                    ctx.metrics
                        .pool_slots
                        .with_label_values(&[pool, "handed_on"])
                        .inc();
                }
                record(ctx, pool, &answer);
                return Ok(answer);
            }
            Err(e) if !handed.is_empty() => {
                tracing::warn!(pool, member = %who, error = %e, "handing the slot on was refused; giving it back only");
                hand_on = false;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                ctx.metrics.pool_write_conflicts.inc();
                // Spread the retries of many agents that lost to the same write.
                let jitter = (std::process::id() as u64 * 37 + attempt as u64 * 53) % 200;
                tokio::time::sleep(Duration::from_millis(20 + jitter)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Answer::Denied(format!(
        "the pool's status changed under this agent {ATTEMPTS} times in a row; asking again shortly"
    )))
}

/// The members other than `who` that hold a slot in `new` and held none in `old`: the slot
/// `who` gave back, handed on.
fn handed_to(
    old: Option<&gpuplane_crds::GpuNodePoolStatus>,
    new: &gpuplane_crds::GpuNodePoolStatus,
    who: &str,
) -> Vec<String> {
    let before = |m: &str| old.is_some_and(|o| crate::pool::holds(o, m));
    new.slots
        .iter()
        .filter(|s| s.member != who && !before(&s.member))
        .map(|s| s.member.clone())
        .collect()
}

/// `gpuplane_pool_members{pool,state}` from a status.
fn show_members(ctx: &Ctx, pool: &str, st: &gpuplane_crds::GpuNodePoolStatus) {
    for state in ["Updated", "Waiting", "Updating", "Degraded", "Pending"] {
        let n = st.members.iter().filter(|m| m.state == state).count();
        ctx.metrics
            .pool_members
            .with_label_values(&[pool, state])
            .set(n as i64);
    }
}

/// The metrics of an answer.
fn record(ctx: &Ctx, pool: &str, answer: &Answer) {
    match answer {
        Answer::Granted => ctx
            .metrics
            .pool_slots
            .with_label_values(&[pool, "granted"])
            .inc(),
        Answer::Denied(_) => ctx
            .metrics
            .pool_slots
            .with_label_values(&[pool, "denied"])
            .inc(),
        _ => {}
    }
}

/// The partitions labelled for `pool`, each with what its partition and its agent's Lease say.
async fn members(ctx: &Ctx, pool: &str, now: jiff::Timestamp) -> Result<Vec<Member>, Error> {
    let parts: Api<GpuPartition> = Api::all(ctx.client.clone());
    let listed = parts
        .list(&ListParams::default().labels(&format!("{POOL_LABEL}={pool}")))
        .await?;
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), &ctx.opts.lease_namespace);
    let leases = leases
        .list(&ListParams::default().labels(NODE_LABEL))
        .await?;
    let is = |p: &GpuPartition, t: &str| {
        p.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == t && c.status == ConditionStatus::True.as_str())
        })
    };
    Ok(listed
        .items
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                || p.finalizers().iter().any(|f| f == super::FINALIZER)
        })
        .map(|p| {
            let node = p.spec.node_name.clone();
            let lease = leases
                .items
                .iter()
                .find(|l| l.metadata.name.as_deref() == Some(lease_name(&node).as_str()));
            Member {
                name: p.name_any(),
                ready: is(p, types::READY),
                stalled: is(p, types::STALLED),
                agent_gone: lease.is_some_and(|l| !is_live_claim(l, &node, now)),
                node,
            }
        })
        .collect())
}

/// This agent's partitions (`partitions`: its watch's cache) that wait for a slot of `pool`
/// (their `Ready` says `WaitingForDisruptionBudget`) and that the pool's change can help
/// ([`crate::pool::may_help`]: a slot free for them): a change of the pool (a slot given back,
/// its budget raised) reconciles them at once, instead of after the poll interval. Members not
/// waiting, and waiters behind the free slots, are left alone: a slot given back wakes the
/// member next in line, not the whole pool.
pub fn waiting_members(
    partitions: &[std::sync::Arc<GpuPartition>],
    pool: &gpuplane_crds::GpuNodePool,
) -> Vec<kube::runtime::reflector::ObjectRef<GpuPartition>> {
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    partitions
        .iter()
        .filter(|p| gpuplane_crds::pool_of(p) == Some(name))
        .filter(|p| {
            p.status.as_ref().is_some_and(|st| {
                st.conditions.iter().any(|c| {
                    c.type_ == gpuplane_crds::condition::types::READY
                        && c.reason == crate::status::WAITING_FOR_DISRUPTION_BUDGET.as_str()
                })
            })
        })
        .filter(|p| crate::pool::may_help(pool, &p.name_any()))
        .map(|p| kube::runtime::reflector::ObjectRef::from_obj(p.as_ref()))
        .collect()
}
