//! Reconciling one node's `GpuPartition` and the `InferenceServer`s on it.

use super::status::{invalid, merge, patch_partition, patch_server, waiting_for_partition};
use super::{Ctx, Error, FINALIZER};
use crate::apply::Door;
use crate::converge::{converge_with, Options, Report, Stop};
use crate::desired::{
    check_servers_together, resolve_partition, resolve_server, Desired, DesiredPartition,
    DesiredServer,
};
use crate::host::model::HostState;
use gpuplane_crds::{
    GpuPartition, GpuPartitionStatus, InferenceServer, InferenceServerStatus, SliceStatus,
};
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{finalizer, Event as Finalized};
use kube::{Api, Resource, ResourceExt};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Entry point: only this node's partition, only while holding the node's lease.
pub async fn reconcile(p: Arc<GpuPartition>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.api_ok.store(true, std::sync::atomic::Ordering::SeqCst);
    if p.spec.node_name != ctx.opts.node {
        return Ok(Action::await_change());
    }
    if !ctx.lease.is_leader() {
        // Another agent holds this node; look again when the lease may have moved.
        return Ok(Action::requeue(Duration::from_secs(3)));
    }
    let started = Instant::now();
    let span = tracing::info_span!("reconcile", partition = %p.name_any(), node = %ctx.opts.node);
    let result = reconcile_inner(p, ctx.clone()).instrument(span).await;
    ctx.metrics
        .reconciles
        .with_label_values(&["GpuPartition"])
        .inc();
    ctx.metrics
        .reconcile_duration
        .with_label_values(&["GpuPartition"])
        .observe(started.elapsed().as_secs_f64());
    result
}

async fn reconcile_inner(p: Arc<GpuPartition>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let api: Api<GpuPartition> = Api::all(ctx.client.clone());
    let c = ctx.clone();
    let result = finalizer(&api, FINALIZER, p, |ev| async move {
        match ev {
            Finalized::Apply(p) => apply(p, c).await,
            Finalized::Cleanup(p) => super::cleanup::cleanup(p, c).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(e.to_string()));
    result
}

pub(super) async fn observe(ctx: &Arc<Ctx>) -> Result<HostState, Error> {
    let host = ctx.host.clone();
    tokio::task::spawn_blocking(move || host.lock().unwrap_or_else(|e| e.into_inner()).observe())
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
        .map_err(|e| Error::Host(e.to_string()))
}

pub(super) async fn run_converge(
    ctx: &Arc<Ctx>,
    desired: Desired,
    block: bool,
) -> Result<Report, Error> {
    let c = ctx.clone();
    tokio::task::spawn_blocking(move || {
        let mut host = c.host.lock().unwrap_or_else(|e| e.into_inner());
        let units: Vec<_> = desired
            .servers
            .iter()
            .map(|s| s.unit.clone())
            .chain(desired.removed_units.iter().cloned())
            .collect();
        host.watch_units(&units);
        let mut progress = c.progress.lock().unwrap_or_else(|e| e.into_inner());
        let opts = Options {
            poll_seconds: c.opts.poll_interval.as_secs().max(1),
            block_on_ready: block,
            ..Options::default()
        };
        let mut door = Door::new(host.as_mut());
        converge_with(&desired, &mut door, &opts, &mut progress)
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))
}

pub(super) async fn publish(
    ctx: &Ctx,
    obj_ref: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    // Events of cluster-scoped objects live in "default"; API servers before 1.22 insist that the
    // regarding object's namespace equals the event's.
    let mut obj_ref = obj_ref.clone();
    if obj_ref.namespace.as_deref().unwrap_or("").is_empty() {
        obj_ref.namespace = Some("default".into());
    }
    let obj_ref = &obj_ref;
    let mut note = note;
    note.truncate(1000);
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, obj_ref).await {
        tracing::warn!("cannot publish event {reason}: {e}");
    }
}

/// Finalizer on InferenceServers: their unit is stopped and removed before they go.
pub const SERVER_FINALIZER: &str = "gpuplane.dev/unit-cleanup";

pub(super) async fn set_finalizers(
    ctx: &Ctx,
    s: &InferenceServer,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let api: Api<InferenceServer> =
        Api::namespaced(ctx.client.clone(), &s.namespace().unwrap_or_default());
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": s.resource_version()}});
    api.patch(
        &s.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

pub(crate) async fn apply(p: Arc<GpuPartition>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = p.name_any();
    let api: Api<GpuPartition> = Api::all(ctx.client.clone());
    let all: Api<InferenceServer> = Api::all(ctx.client.clone());
    let (deleting, servers): (Vec<InferenceServer>, Vec<InferenceServer>) = all
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|s| s.spec.partition_ref.name == name)
        .partition(|s| s.metadata.deletion_timestamp.is_some());
    // Live servers carry our finalizer, so deleting one stops and removes its unit first.
    for s in &servers {
        if !s.finalizers().iter().any(|f| f == SERVER_FINALIZER) {
            let mut f = s.finalizers().to_vec();
            f.push(SERVER_FINALIZER.into());
            set_finalizers(&ctx, s, f).await?;
        }
    }
    let deleting: Vec<InferenceServer> = deleting
        .into_iter()
        .filter(|s| s.finalizers().iter().any(|f| f == SERVER_FINALIZER))
        .collect();
    let p_ref = p.object_ref(&());
    let observed = observe(&ctx).await?;

    let dp = match resolve_partition(&p, &observed, &ctx.opts.gpu_vendor, &ctx.opts.gpu_driver) {
        Ok(dp) => dp,
        Err(errs) => {
            let msgs: Vec<String> = errs
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect();
            let computed = invalid(&msgs, p.metadata.generation);
            let st = GpuPartitionStatus {
                observed_generation: p.metadata.generation,
                conditions: merge(
                    &p.status.clone().unwrap_or_default().conditions,
                    &computed.conditions,
                ),
                slice_count: p.spec.slices.len() as u32,
                slices: vec![],
                last_applied_plan: p.status.clone().unwrap_or_default().last_applied_plan,
            };
            patch_partition(&api, &name, &st).await?;
            publish(
                &ctx,
                &p_ref,
                EventType::Warning,
                "InvalidSpec",
                "Validate",
                msgs.join("; "),
            )
            .await;
            for s in &servers {
                let sapi: Api<InferenceServer> =
                    Api::namespaced(ctx.client.clone(), &s.namespace().unwrap_or_default());
                let w = waiting_for_partition(
                    "PartitionInvalid",
                    format!("GpuPartition {name} is invalid: {}", msgs.join("; ")),
                    s.metadata.generation,
                );
                let st = InferenceServerStatus {
                    observed_generation: s.metadata.generation,
                    conditions: merge(
                        &s.status.clone().unwrap_or_default().conditions,
                        &w.conditions,
                    ),
                    ..s.status.clone().unwrap_or_default()
                };
                patch_server(&sapi, &s.name_any(), &st).await?;
            }
            ctx.metrics.errors.with_label_values(&["InvalidSpec"]).inc();
            // No retry storm: an invalid spec waits for a change.
            return Ok(Action::await_change());
        }
    };

    let mut valid: Vec<(DesiredServer, &InferenceServer)> = vec![];
    let mut invalid_servers: Vec<(&InferenceServer, Vec<String>)> = vec![];
    for s in &servers {
        match resolve_server(s, &dp) {
            Ok(d) => valid.push((d, s)),
            Err(errs) => invalid_servers.push((
                s,
                errs.iter()
                    .map(|e| format!("{}: {}", e.field, e.message))
                    .collect(),
            )),
        }
    }
    let together =
        check_servers_together(&valid.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>());
    for e in together {
        if let Some(pos) = valid
            .iter()
            .position(|(d, _)| format!("InferenceServer/{}", d.id) == e.resource)
        {
            let (_, s) = valid.remove(pos);
            invalid_servers.push((s, vec![format!("{}: {}", e.field, e.message)]));
        }
    }
    // Units of deleted servers (an invalid one has no known unit: nothing to remove).
    let removed: Vec<(&InferenceServer, Option<crate::host::model::UnitRef>)> = deleting
        .iter()
        .map(|s| (s, resolve_server(s, &dp).ok().map(|d| d.unit)))
        .collect();
    let desired = Desired {
        partition: dp,
        servers: valid.iter().map(|(d, _)| d.clone()).collect(),
        removed_units: removed.iter().filter_map(|(_, u)| u.clone()).collect(),
    };
    let report = run_converge(&ctx, desired.clone(), false).await?;
    // A deleted server is released once its unit is gone from the host.
    if let Some(host) = &report.final_host {
        for (s, unit) in &removed {
            let gone = unit.as_ref().is_none_or(|u| {
                host.unit(u)
                    .is_none_or(|o| o.file.is_none() && !o.is_active())
            });
            if gone {
                let f: Vec<String> = s
                    .finalizers()
                    .iter()
                    .filter(|f| *f != SERVER_FINALIZER)
                    .cloned()
                    .collect();
                set_finalizers(&ctx, s, f).await?;
                publish(
                    &ctx,
                    &s.object_ref(&()),
                    EventType::Normal,
                    "UnitRemoved",
                    "Delete",
                    format!(
                        "the server was deleted; its unit {} is stopped and removed",
                        unit.as_ref()
                            .map(|u| u.to_string())
                            .unwrap_or_else(|| "(none)".into())
                    ),
                )
                .await;
            }
        }
    }

    let mut generations = BTreeMap::new();
    generations.insert(
        format!("GpuPartition/{name}"),
        p.metadata.generation.unwrap_or(0),
    );
    for (d, s) in &valid {
        generations.insert(
            format!("InferenceServer/{}", d.id),
            s.metadata.generation.unwrap_or(0),
        );
    }
    let computed = crate::status::compute(&desired, &report, &generations);
    let host = report.final_host.clone().unwrap_or_default();

    // Partition status.
    let old = p.status.clone().unwrap_or_default();
    let was_ready = old
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
        && old.observed_generation == p.metadata.generation;
    let applied: Vec<String> = report
        .applied
        .iter()
        .filter(|a| a.planned.step.is_write())
        .map(|a| a.planned.step.to_string())
        .collect();
    let pc = computed
        .get(&format!("GpuPartition/{name}"))
        .cloned()
        .unwrap_or_default();
    let st = GpuPartitionStatus {
        observed_generation: p.metadata.generation,
        conditions: merge(&old.conditions, &pc.conditions),
        slice_count: desired.partition.slices.len() as u32,
        slices: slice_status(&desired.partition, &host),
        last_applied_plan: if applied.is_empty() {
            old.last_applied_plan.clone()
        } else {
            applied.clone()
        },
    };
    patch_partition(&api, &name, &st).await?;

    // Server statuses.
    let mut ready = 0i64;
    for (d, s) in &valid {
        let sc = computed
            .get(&format!("InferenceServer/{}", d.id))
            .cloned()
            .unwrap_or_default();
        if sc.condition("Ready").is_some_and(|c| c.status == "True") {
            ready += 1;
        }
        let u = host.unit(&d.unit);
        let old = s.status.clone().unwrap_or_default();
        let st = InferenceServerStatus {
            observed_generation: s.metadata.generation,
            conditions: merge(&old.conditions, &sc.conditions),
            endpoint: Some(format!(
                "http://{}:{}",
                d.spec.listen.host, d.spec.listen.port
            )),
            unit_hash: u
                .and_then(|u| u.file.as_ref())
                .map(|f| format!("{:x}", Sha256::digest(f.as_bytes()))),
            gpus: d.gpus.clone(),
            command: u
                .and_then(|u| u.file.as_deref())
                .and_then(|f| crate::systemd::unit::parse(f).ok())
                .map(|pu| pu.exec_start)
                .unwrap_or_default(),
        };
        let sapi: Api<InferenceServer> =
            Api::namespaced(ctx.client.clone(), &s.namespace().unwrap_or_default());
        patch_server(&sapi, &s.name_any(), &st).await?;
    }
    for (s, msgs) in &invalid_servers {
        let sapi: Api<InferenceServer> =
            Api::namespaced(ctx.client.clone(), &s.namespace().unwrap_or_default());
        let computed = invalid(msgs, s.metadata.generation);
        let old = s.status.clone().unwrap_or_default();
        let st = InferenceServerStatus {
            observed_generation: s.metadata.generation,
            conditions: merge(&old.conditions, &computed.conditions),
            ..old
        };
        patch_server(&sapi, &s.name_any(), &st).await?;
        if old_reason(s) != Some("InvalidSpec".into()) {
            publish(
                &ctx,
                &s.object_ref(&()),
                EventType::Warning,
                "InvalidSpec",
                "Validate",
                msgs.join("; "),
            )
            .await;
        }
        ctx.metrics.errors.with_label_values(&["InvalidSpec"]).inc();
    }

    // Events: every host change, and drift corrected.
    for a in report.applied.iter().filter(|a| a.planned.step.is_write()) {
        let target = server_of(&a.planned.step, &valid)
            .map(|s| s.object_ref(&()))
            .unwrap_or_else(|| p_ref.clone());
        let note = match &a.detail {
            Some(d) => format!("{}: {} ({d})", a.planned.step, a.planned.why),
            None => format!("{}: {}", a.planned.step, a.planned.why),
        };
        publish(
            &ctx,
            &target,
            EventType::Normal,
            "HostChanged",
            &a.planned.step.action(),
            note,
        )
        .await;
    }
    for n in &report.notes {
        let target = valid
            .iter()
            .find(|(d, _)| n.resource == format!("InferenceServer/{}", d.id))
            .map(|(_, s)| s.object_ref(&()));
        if let Some(t) = target {
            if !report.applied.is_empty() {
                publish(
                    &ctx,
                    &t,
                    EventType::Warning,
                    "P2PDisabled",
                    "DecideP2P",
                    n.message.clone(),
                )
                .await;
            }
        }
    }
    if was_ready && report.writes > 0 {
        ctx.metrics.drifts_corrected.inc();
        publish(
            &ctx,
            &p_ref,
            EventType::Warning,
            "DriftCorrected",
            "Converge",
            format!(
                "the host had drifted from the spec; {} host writes restored it: {}",
                report.writes,
                applied.join("; ")
            ),
        )
        .await;
    }
    for (kind, n) in &report.writes_by_kind {
        ctx.metrics
            .host_writes
            .with_label_values(&[kind])
            .inc_by(*n);
    }
    ctx.metrics.gpus.reset();
    for s in &desired.partition.slices {
        for g in &s.gpus {
            let driver = host
                .pci_devices
                .get(g)
                .and_then(|d| d.driver.clone())
                .unwrap_or_else(|| "none".into());
            ctx.metrics
                .gpus
                .with_label_values(&[s.name.as_str(), driver.as_str()])
                .inc();
        }
    }
    ctx.metrics.servers_ready.set(ready);

    Ok(match &report.stop {
        None => {
            ctx.succeeded(&name);
            Action::requeue(ctx.opts.drift_interval)
        }
        Some(Stop::Waiting { .. }) => Action::requeue(ctx.opts.poll_interval),
        Some(Stop::Blocked { blockers }) => {
            for b in blockers {
                ctx.metrics
                    .errors
                    .with_label_values(&[b.reason.as_str()])
                    .inc();
            }
            if !old
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && blockers.iter().any(|b| b.reason == c.reason))
            {
                let msgs: Vec<String> = blockers.iter().map(|b| b.message.clone()).collect();
                publish(
                    &ctx,
                    &p_ref,
                    EventType::Warning,
                    &blockers[0].reason,
                    "Converge",
                    msgs.join("; "),
                )
                .await;
            }
            Action::requeue(ctx.backoff(&name).min(ctx.opts.drift_interval))
        }
        Some(Stop::StepFailed { step, error }) => {
            ctx.metrics.errors.with_label_values(&["ApplyFailed"]).inc();
            publish(
                &ctx,
                &p_ref,
                EventType::Warning,
                "ApplyFailed",
                "Converge",
                format!("{step}: {error}"),
            )
            .await;
            Action::requeue(ctx.backoff(&name))
        }
        Some(Stop::NotReady { .. }) => {
            Action::requeue(ctx.backoff(&name).max(ctx.opts.poll_interval))
        }
        Some(Stop::NoProgress { .. }) => Action::requeue(ctx.backoff(&name)),
    })
}

fn old_reason(s: &InferenceServer) -> Option<String> {
    s.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.clone())
}

fn server_of<'a>(
    step: &crate::plan::Step,
    valid: &'a [(DesiredServer, &InferenceServer)],
) -> Option<&'a InferenceServer> {
    use crate::plan::Step::*;
    let unit = match step {
        WriteUnit { unit, .. }
        | StartUnit { unit, .. }
        | StopUnit { unit }
        | WaitReady { unit, .. } => unit,
        ProbeP2p { gpus, .. } => {
            return valid.iter().find(|(d, _)| &d.gpus == gpus).map(|(_, s)| *s)
        }
        _ => return None,
    };
    valid.iter().find(|(d, _)| &d.unit == unit).map(|(_, s)| *s)
}

fn slice_status(dp: &DesiredPartition, host: &HostState) -> Vec<SliceStatus> {
    dp.slices
        .iter()
        .map(|s| SliceStatus {
            name: s.name.clone(),
            gpus: s.gpus.clone(),
            drivers: s
                .gpus
                .iter()
                .map(|g| {
                    format!(
                        "{g}={}",
                        host.pci_devices
                            .get(g)
                            .and_then(|d| d.driver.clone())
                            .unwrap_or_else(|| "none".into())
                    )
                })
                .collect(),
        })
        .collect()
}
