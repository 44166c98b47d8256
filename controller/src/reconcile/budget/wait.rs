//! What a pool member says while it waits for a disruption slot: its partition reads
//! `Ready=False`, `Reconciling=True`, reason `WaitingForDisruptionBudget`, naming the step it
//! waits to take and who holds the slots; one event when the wait begins. Nothing disruptive
//! happens on the host meanwhile: the pass's converge stopped before its first step when its
//! plan needed a slot (`budget/gate.rs`), or right before the disruption that showed later.

use super::super::kube_io::publish;
use super::super::write_status::{merge, write};
use super::super::{Ctx, Error};
use crate::status::{ResourceStatus, WAITING_FOR_DISRUPTION_BUDGET};
use gpuplane_crds::condition::{types, Condition};
use gpuplane_crds::{set_condition, GpuPartition};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::Resource;

/// Writes the wait on `p` (only when it changed) and looks again after the poll interval, or
/// sooner: a change of the pool (a slot given back) reconciles a waiting member at once
/// (`budget::waiting_members`, the pools' watch in `reconcile/mod.rs`).
pub async fn wait(
    ctx: &Ctx,
    pass: &crate::pass::Pass,
    p: &GpuPartition,
    pool: &str,
    step: &str,
    why: &str,
) -> Result<Action, Error> {
    let old = p.status.clone().unwrap_or_default();
    let g = p.metadata.generation;
    let now = pass.time();
    let msg = crate::text::sanitize(
        &format!("{step} needs a disruption slot of GpuNodePool {pool}: {why}"),
        1024,
    );
    let mut st = ResourceStatus::default();
    let cond = |t: &str, on: bool, m: &str| Condition {
        type_: t.into(),
        status: if on { "True" } else { "False" }.into(),
        reason: WAITING_FOR_DISRUPTION_BUDGET.into(),
        message: m.into(),
        observed_generation: g,
        last_transition_time: now.clone(),
    };
    set_condition(&mut st.conditions, cond(types::READY, false, &msg));
    set_condition(
        &mut st.conditions,
        cond(types::PROGRESSING, true, "waiting for a disruption slot"),
    );
    st.progress(WAITING_FOR_DISRUPTION_BUDGET, msg.clone(), &now, g);
    let mut next = old.clone();
    next.observed_generation = g;
    next.conditions = merge(&old.conditions, &st.conditions);
    if next != old {
        write(ctx, p, &next).await?;
    }
    let said = old
        .conditions
        .iter()
        .any(|c| c.type_ == types::READY && c.reason == WAITING_FOR_DISRUPTION_BUDGET);
    if !said {
        publish(
            ctx,
            &p.object_ref(&()),
            EventType::Normal,
            WAITING_FOR_DISRUPTION_BUDGET.as_str(),
            "Converge",
            msg,
        )
        .await;
    }
    Ok(Action::requeue(ctx.opts.poll_interval))
}
