//! What deleting a `GpuPartition` does to the host, by `spec.deletionPolicy`.

use super::budget::gate;
use super::host_io::observe;
use super::kube_io::{has_server_finalizer, publish, release_server, servers_of};
use super::{Ctx, Error};
use crate::desired::{
    resolve_partition, resolve_server, Desired, DesiredPartition, ResolvedConsumer, ResolvedSlice,
};
use crate::pass::gate::Gated;
use crate::pass::Pass;
use crate::pool::{Ask, State};
use gpuplane_crds::{DeletionPolicy, GpuDriver, GpuPartition, InferenceServer};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::Resource;
use kube::ResourceExt;
use std::sync::Arc;

/// The desired host when a partition with `deletionPolicy: Restore` goes away: every GPU back on
/// nvidia, no GPU lines in its containers, no GPUs in any mapping of this node.
pub fn restore_desired(dp: &DesiredPartition) -> Desired {
    let mut slices = vec![ResolvedSlice {
        name: "restore".into(),
        gpus: dp.slices.iter().flat_map(|s| s.gpus.clone()).collect(),
        driver: GpuDriver::Nvidia,
        consumer: None,
        servers: None,
    }];
    for s in &dp.slices {
        if let Some(ResolvedConsumer::Lxc(v)) = &s.consumer {
            slices.push(ResolvedSlice {
                name: format!("restore-lxc-{v}"),
                gpus: vec![],
                driver: GpuDriver::Nvidia,
                consumer: Some(ResolvedConsumer::Lxc(*v)),
                servers: None,
            });
        }
    }
    Desired {
        partition: DesiredPartition {
            slices,
            // Giving everything back is no new owner: the guard has nothing to keep.
            layout: None,
            // The kernel arguments stay as they are: a deleted partition neither writes them
            // nor waits for a reboot.
            kernel_args: None,
            ..dp.clone()
        },
        servers: vec![],
        removed_units: vec![],
    }
}

/// Lets the partition's servers go: they are reconciled through their partition, which is leaving.
async fn release_servers(ctx: &Ctx, servers: &[InferenceServer]) -> Result<(), Error> {
    for s in servers {
        release_server(ctx, s).await?;
    }
    Ok(())
}

/// A member leaving its pool gives back any slot it holds (its host is restored, or retained
/// as it is by the person's choice).
async fn leave_pool(
    ctx: &Ctx,
    pass: &Pass,
    pool: Option<&str>,
    p: &GpuPartition,
) -> Result<(), Error> {
    if let Some(pool) = pool {
        super::budget::ask(ctx, pool, p, Ask::Report(State::Leaving), pass.now).await?;
    }
    Ok(())
}

/// Applies `spec.deletionPolicy` to the host before the partition goes: `Retain` leaves the
/// host as it is; `Restore` returns every GPU to nvidia, removes our lines and the units of the
/// partition's servers, and releases the servers once that converged.
pub(super) async fn cleanup(p: Arc<GpuPartition>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let pass = Pass::begin();
    let name = p.name_any();
    // The partition is going: its condition series go with it.
    ctx.metrics.forget("GpuPartition", "", &name);
    // Nothing of a partition being deleted is watched any more: no scrape targets either.
    ctx.metrics.set_server_sd("[]".into());
    let servers: Vec<InferenceServer> = servers_of(&ctx, &name)
        .await?
        .into_iter()
        .filter(has_server_finalizer)
        .collect();
    let going = Going {
        ctx: &ctx,
        pass: &pass,
        p: &p,
        pool: super::budget::pool_of(&p),
        servers: &servers,
    };
    if p.spec.deletion_policy == DeletionPolicy::Retain {
        let note = "deletionPolicy Retain: the host is left as it is";
        return going.let_go("Retained", note.into()).await;
    }
    going.restore().await
}

/// A partition being deleted, and what it leaves behind.
struct Going<'a> {
    ctx: &'a Arc<Ctx>,
    pass: &'a Pass,
    p: &'a GpuPartition,
    pool: Option<String>,
    /// Its servers that still carry our finalizer.
    servers: &'a [InferenceServer],
}

impl Going<'_> {
    /// The partition lets go: its servers are released, its pool slot given back, and one
    /// event (`reason`, `note`) says how the host was left.
    async fn let_go(&self, reason: &str, note: String) -> Result<Action, Error> {
        release_servers(self.ctx, self.servers).await?;
        leave_pool(self.ctx, self.pass, self.pool.as_deref(), self.p).await?;
        self.event(EventType::Normal, reason, note).await;
        Ok(Action::await_change())
    }

    async fn event(&self, kind: EventType, reason: &str, note: String) {
        let p_ref = self.p.object_ref(&());
        publish(self.ctx, &p_ref, kind, reason, "Delete", note).await;
    }

    /// `Restore`: every GPU back on nvidia, our lines and the servers' units removed, behind
    /// the pool's gate; let go once that converged.
    async fn restore(&self) -> Result<Action, Error> {
        let (ctx, p) = (self.ctx, self.p);
        let observed = observe(ctx).await?;
        let dp = match resolve_partition(p, &observed, &ctx.opts.gpu_vendor, &ctx.opts.gpu_driver) {
            Ok(dp) => dp,
            Err(errs) => {
                let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
                let note = format!(
                    "the spec is invalid, so its GPUs are unknown; the host is left as it is: {}",
                    msgs.join("; ")
                );
                self.event(EventType::Warning, "RestoreSkipped", note).await;
                return Ok(Action::await_change());
            }
        };
        // Restore also stops and removes the units of the partition's servers.
        let mut desired = restore_desired(&dp);
        desired.removed_units = self
            .servers
            .iter()
            .filter_map(|s| resolve_server(s, &dp).ok().map(|d| d.unit))
            .collect();
        // A pool member restores its host (a disruption) only with a slot of its pool.
        let why = "restore on deletion: ";
        let pool = self.pool.as_deref();
        let report = match gate::converge(self.pass, ctx, p, pool, desired, true, why).await? {
            Gated::Passed(report) => *report,
            Gated::Denied { pool, step, why } => {
                let note = format!("restoring the host ({step}) needs a disruption slot of GpuNodePool {pool}: {why}");
                let reason = crate::status::WAITING_FOR_DISRUPTION_BUDGET;
                self.event(EventType::Normal, reason.as_str(), note).await;
                return Ok(Action::requeue(ctx.opts.poll_interval));
            }
        };
        if report.converged() {
            let note = format!(
                "GPUs returned to nvidia and our lines removed ({} host writes)",
                report.writes
            );
            return self.let_go("Restored", note).await;
        }
        let why = report
            .stop
            .as_ref()
            .map(|s| s.to_string().replace('\n', "; "))
            .unwrap_or_else(|| format!("{} steps left", report.final_plan.steps.len()));
        self.event(EventType::Warning, "RestoreBlocked", why.clone())
            .await;
        Err(Error::RestoreUnfinished(why))
    }
}
