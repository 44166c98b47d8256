//! What deleting a `GpuPartition` does to the host, by `spec.deletionPolicy`.

use super::partition::{observe, publish, run_converge};
use super::{Ctx, Error};
use crate::desired::{
    resolve_partition, Desired, DesiredPartition, ResolvedConsumer, ResolvedSlice,
};
use gpuplane_crds::{DeletionPolicy, GpuDriver, GpuPartition};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::Resource;
use std::sync::Arc;

/// The desired host when a partition with `deletionPolicy: Restore` goes away: every GPU back on
/// nvidia, no GPU lines in its containers, no GPUs in any mapping of this node.
pub fn restore_desired(dp: &DesiredPartition) -> Desired {
    let mut slices = vec![ResolvedSlice {
        name: "restore".into(),
        gpus: dp.slices.iter().flat_map(|s| s.gpus.clone()).collect(),
        driver: GpuDriver::Nvidia,
        consumer: None,
    }];
    for s in &dp.slices {
        if let Some(ResolvedConsumer::Lxc(v)) = &s.consumer {
            slices.push(ResolvedSlice {
                name: format!("restore-lxc-{v}"),
                gpus: vec![],
                driver: GpuDriver::Nvidia,
                consumer: Some(ResolvedConsumer::Lxc(*v)),
            });
        }
    }
    Desired {
        partition: DesiredPartition {
            slices,
            ..dp.clone()
        },
        servers: vec![],
    }
}

pub(super) async fn cleanup(p: Arc<GpuPartition>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let p_ref = p.object_ref(&());
    if p.spec.deletion_policy == DeletionPolicy::Retain {
        publish(
            &ctx,
            &p_ref,
            EventType::Normal,
            "Retained",
            "Delete",
            "deletionPolicy Retain: the host is left as it is".into(),
        )
        .await;
        return Ok(Action::await_change());
    }
    let observed = observe(&ctx).await?;
    let dp = match resolve_partition(&p, &observed, &ctx.opts.gpu_vendor) {
        Ok(mut dp) => {
            dp.host_driver = ctx.opts.gpu_driver.clone();
            dp
        }
        Err(errs) => {
            let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            publish(
                &ctx,
                &p_ref,
                EventType::Warning,
                "RestoreSkipped",
                "Delete",
                format!(
                    "the spec is invalid, so its GPUs are unknown; the host is left as it is: {}",
                    msgs.join("; ")
                ),
            )
            .await;
            return Ok(Action::await_change());
        }
    };
    let report = run_converge(&ctx, restore_desired(&dp), true).await?;
    if report.converged() {
        publish(
            &ctx,
            &p_ref,
            EventType::Normal,
            "Restored",
            "Delete",
            format!(
                "GPUs returned to nvidia and our lines removed ({} host writes)",
                report.writes
            ),
        )
        .await;
        Ok(Action::await_change())
    } else {
        let why = format!("{:?}", report.stop);
        publish(
            &ctx,
            &p_ref,
            EventType::Warning,
            "RestoreBlocked",
            "Delete",
            why.clone(),
        )
        .await;
        Err(Error::Host(format!("restore did not finish: {why}")))
    }
}
