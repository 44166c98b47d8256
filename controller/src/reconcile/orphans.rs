//! Servers whose `partitionRef` names no `GpuPartition`: they are never dropped in silence.
//!
//! The controller maps every `InferenceServer` event to its partition; when that partition
//! does not exist, kube-runtime reports `ObjectNotFound` instead of calling the reconciler.
//! This module answers that report: each server naming the missing partition gets
//! `Ready=False` with reason `PartitionNotFound` and a message naming the field.
//!
//! # Caveats
//! No node owns such a server, so every agent that sees the event writes the same status
//! (server-side apply by one field manager: identical writes change nothing). A server whose
//! partition is deleted later keeps its last status until the server itself changes.

use super::kube_io::servers_of;
use super::scope::{partition_problem, server_problem, LabelProblem};
use super::write_status::{refuse, Refusal};
use super::Ctx;
use crate::status::refusal;
use gpuplane_crds::GpuPartition;
use kube::{Api, ResourceExt};

/// Marks the servers that name the missing partition `partition`. Under node scoping the
/// partition may exist but not be this node's (the server's label is wrong) or lack the label
/// itself: those servers are told so instead ([`label_report`]).
pub(super) async fn report(ctx: &Ctx, partition: &str) {
    if ctx.opts.watch_scope == super::scope::WatchScope::Node {
        let api: Api<GpuPartition> = Api::all(ctx.client.clone());
        match api.get_opt(partition).await {
            Ok(Some(p)) => return label_report(ctx, &p).await,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("cannot look up partition {partition}: {e}");
                return;
            }
        }
    }
    let servers = match servers_of(ctx, partition).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot list the servers of missing partition {partition}: {e}");
            return;
        }
    };
    for s in servers {
        let status =
            refusal::partition_not_found(partition, s.metadata.generation, &crate::clock::now());
        let refusal = Refusal {
            reason: refusal::PARTITION_NOT_FOUND,
            note: status.conditions[0].message.clone(),
            status,
            action: "Resolve",
        };
        if let Err(e) = refuse(ctx, &s, refusal, |_| {}).await {
            tracing::warn!("cannot report PartitionNotFound on {}: {e}", s.name_any());
        }
    }
}

/// The servers labelled for this node that name `p`, which exists but is not in this agent's
/// watch: `p` is another node's (the servers' label is wrong), or this node's without the label.
async fn label_report(ctx: &Ctx, p: &GpuPartition) {
    if !ctx.lease.is_leader() {
        return;
    }
    let servers = match servers_of(ctx, &p.name_any()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot list the servers of partition {}: {e}", p.name_any());
            return;
        }
    };
    for s in servers {
        let problem = server_problem(&s, p).or_else(|| {
            partition_problem(p).map(|pp| LabelProblem {
                reason: pp.reason,
                message: format!("its GpuPartition {}: {}", p.name_any(), pp.message),
            })
        });
        if let Some(problem) = problem {
            super::strays::report(ctx, &s, &problem).await;
        }
    }
}
