//! Reconciling one node's `GpuPartition` and the `InferenceServer`s on it, in phases:
//!
//! 1. [`gather`]: the partition's servers from the API (adding our finalizer), the host observed;
//! 2. [`resolve`]: pure, the desired state, and which servers are invalid and why;
//! 3. converge through the one door ([`super::host_io::run_converge`]);
//! 4. [`release_deleted`]: deleted servers whose unit is gone lose their finalizer;
//! 5. [`write_status`]: conditions computed from the report, written by server-side apply;
//! 6. [`publish_events`]: one event per host change, drift, blockers, failures;
//! 7. [`record_metrics`];
//! 8. [`next_action`]: when to look again.
//!
//! An invalid partition stops after phase 2: [`report_invalid_partition`] writes its condition
//! and waits for a spec change.

use super::budget::gate;
use super::host_io::observe;
use super::kube_io::{
    has_server_finalizer, publish, release_server, servers_of, set_finalizers, SERVER_FINALIZER,
};
use super::write_status::{merge, refuse, write, Refusal};
use super::{Ctx, Error, FINALIZER};
use crate::converge::{Report, Stop};
use crate::desired::{
    check_servers_together, in_claim_order, resolve_partition, resolve_server, Desired,
    DesiredPartition, DesiredServer, SpecError,
};
use crate::host::model::{HostState, UnitRef};
use crate::metrics::ErrorCategory;
use crate::pass::gate::Gated;
use crate::pass::outcome::final_host;
use crate::pass::{Outcome, Pass};
use crate::pool::{Ask, State};
use crate::resource_key::ResourceKey;
use crate::status::refusal;
use crate::status::Reason;
use crate::step::Step;
use gpuplane_crds::condition::{types, Condition, ConditionStatus};
use gpuplane_crds::{
    GpuPartition, GpuPartitionStatus, InferenceServer, InferenceServerStatus, SliceStatus,
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
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
        return Ok(label_mismatch(&p, &ctx).await);
    }
    if !ctx.lease.is_leader() {
        // Another agent holds this node; look again when the lease may have moved.
        return Ok(Action::requeue(Duration::from_secs(3)));
    }
    // Two partitions for this node: the oldest claim wins; a younger one never acts.
    if let Some(action) = super::conflict::settle_partition(&p, &ctx).await? {
        return Ok(action);
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

/// A partition of another node seen by this agent: under node scoping it carries this node's
/// label, so it is this agent (the only one that sees it) that says so on it.
async fn label_mismatch(p: &GpuPartition, ctx: &Ctx) -> Action {
    if ctx.opts.watch_scope != super::scope::WatchScope::Node {
        return Action::await_change();
    }
    if !ctx.lease.is_leader() {
        return Action::requeue(Duration::from_secs(3));
    }
    if p.metadata.deletion_timestamp.is_none() {
        if let Some(problem) = super::scope::partition_problem(p) {
            super::strays::report(ctx, p, &problem).await;
        }
    }
    Action::await_change()
}

async fn reconcile_inner(p: Arc<GpuPartition>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let api: Api<GpuPartition> = Api::all(ctx.client.clone());
    let c = ctx.clone();
    finalizer(&api, FINALIZER, p, |ev| async move {
        match ev {
            Finalized::Apply(p) => apply(p, c).await,
            Finalized::Cleanup(p) => super::cleanup::cleanup(p, c).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// What phase 1 found.
struct Gathered {
    /// Live servers of the partition (each now carries our finalizer).
    servers: Vec<InferenceServer>,
    /// Servers being deleted that still carry our finalizer: their units must go first.
    deleting: Vec<InferenceServer>,
    observed: HostState,
}

/// What phase 2 decided.
struct Resolved<'a> {
    desired: Desired,
    /// Valid servers with their resolved form.
    valid: Vec<(DesiredServer, &'a InferenceServer)>,
    /// Invalid servers with their reason (`InvalidSpec`, or `Conflict` with an older server)
    /// and messages (`field: message`).
    invalid: Vec<(&'a InferenceServer, Reason, Vec<String>)>,
    /// Deleted servers and their unit (an invalid one has no known unit: nothing to remove).
    removed: Vec<(&'a InferenceServer, Option<UnitRef>)>,
}

/// Converges the host to the partition and its servers, then reports.
pub(crate) async fn apply(p: Arc<GpuPartition>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let pass = Pass::begin();
    let g = gather(&p, &ctx).await?;
    let dp = match resolve_partition(&p, &g.observed, &ctx.opts.gpu_vendor, &ctx.opts.gpu_driver) {
        Ok(dp) => dp,
        Err(errs) => return report_invalid_partition(&ctx, &pass, &p, &g.servers, &errs).await,
    };
    let mut dp = dp;
    pass.stamp(&p, true, &mut dp);
    let r = resolve(dp, &g.servers, &g.deleting);
    // A pool member disrupts its host only while it holds a slot of its pool.
    let pool = super::budget::pool_of(&p);
    let desired = r.desired.clone();
    let report = match gate::converge(&pass, &ctx, &p, pool.as_deref(), desired, false, "").await? {
        Gated::Passed(report) => *report,
        Gated::Denied { pool, step, why } => {
            return super::budget::wait::wait(&ctx, &pass, &p, &pool, &step, &why).await
        }
    };
    release_deleted(&ctx, &r.removed, &report).await?;
    let was_ready = nothing_asked_since_ready(&p, &r);
    let node = crate::discovery::select::Node {
        name: &ctx.opts.node,
        address: ctx.opts.sd_node_address.as_deref(),
    };
    let outcome = pass.outcome(&r.desired, &report, &generations(&p, &r), &node);
    let (ready, health) = write_status(&ctx, &pass, &p, &r, &report, &outcome).await?;
    if let Some(pool) = &pool {
        super::budget::ask(&ctx, pool, &p, Ask::Report(health), pass.now).await?;
    }
    let old = p.status.clone().unwrap_or_default();
    publish_events(&ctx, &p, &r, &report, was_ready, &old.conditions).await;
    outcome.record(&ctx.metrics, &report, &ctx.opts.node);
    record_metrics(&ctx, &report, ready, was_ready);
    if let Some(starting) = report.waiting_units(&r.desired) {
        super::wake::probe_until_ready(&ctx, &p.name_any(), starting, ctx.opts.poll_interval);
    }
    super::wake::follow_health(&ctx, &p.name_any());
    Ok(next_action(&ctx, &p.name_any(), &report))
}

/// Phase 1: the partition's servers (live ones get our finalizer) and the observed host.
async fn gather(p: &GpuPartition, ctx: &Arc<Ctx>) -> Result<Gathered, Error> {
    let (deleting, servers): (Vec<InferenceServer>, Vec<InferenceServer>) =
        servers_of(ctx, &p.name_any())
            .await?
            .into_iter()
            .partition(|s| s.metadata.deletion_timestamp.is_some());
    // Live servers carry our finalizer, so deleting one stops and removes its unit first.
    for s in &servers {
        if !has_server_finalizer(s) {
            let mut f = s.finalizers().to_vec();
            f.push(SERVER_FINALIZER.into());
            set_finalizers(ctx, s, f).await?;
        }
    }
    let deleting = deleting.into_iter().filter(has_server_finalizer).collect();
    let observed = observe(ctx).await?;
    Ok(Gathered {
        servers,
        deleting,
        observed,
    })
}

/// Phase 2 (pure): the desired state from a valid partition and its servers.
fn resolve<'a>(
    dp: DesiredPartition,
    servers: &'a [InferenceServer],
    deleting: &'a [InferenceServer],
) -> Resolved<'a> {
    let mut valid: Vec<(DesiredServer, &InferenceServer)> = vec![];
    let mut invalid: Vec<(&InferenceServer, Reason, Vec<String>)> = vec![];
    // The oldest claim first: in a conflict the server already running keeps what it has.
    for s in in_claim_order(servers) {
        match resolve_server(s, &dp) {
            Ok(d) => valid.push((d, s)),
            Err(errs) => invalid.push((s, Reason::InvalidSpec, field_messages(&errs))),
        }
    }
    let together =
        check_servers_together(&valid.iter().map(|(d, _)| d.clone()).collect::<Vec<_>>());
    for e in together {
        if let Some(pos) = valid
            .iter()
            .position(|(d, _)| crate::resource_key::ResourceKey::server_id(&d.id) == e.resource)
        {
            // Servers come oldest claim first, so the one named here is the younger.
            let (_, s) = valid.remove(pos);
            let msg = format!("{}: {}", e.field, e.message);
            invalid.push((s, super::conflict::REASON, vec![msg]));
        }
    }
    let removed: Vec<(&InferenceServer, Option<UnitRef>)> = deleting
        .iter()
        .map(|s| (s, resolve_server(s, &dp).ok().map(|d| d.unit)))
        .collect();
    let desired = Desired {
        partition: dp,
        servers: valid.iter().map(|(d, _)| d.clone()).collect(),
        removed_units: removed.iter().filter_map(|(_, u)| u.clone()).collect(),
    };
    Resolved {
        desired,
        valid,
        invalid,
        removed,
    }
}

/// `field: message` for each error.
fn field_messages(errs: &[SpecError]) -> Vec<String> {
    errs.iter()
        .map(|e| format!("{}: {}", e.field, e.message))
        .collect()
}

/// An invalid partition: its condition and event, its servers waiting; nothing on the host
/// changes, and no retry storm (it waits for a spec change).
async fn report_invalid_partition(
    ctx: &Ctx,
    pass: &Pass,
    p: &GpuPartition,
    servers: &[InferenceServer],
    errs: &[SpecError],
) -> Result<Action, Error> {
    let name = p.name_any();
    let msgs = field_messages(errs);
    // Its servers read PartitionInvalid, not Ready: none is a scrape target.
    ctx.metrics.set_server_sd("[]".into());
    let now = pass.time();
    let slice_count = p.spec.slices.len() as u32;
    let refused = Refusal {
        reason: refusal::INVALID_SPEC,
        status: refusal::invalid(&msgs, p.metadata.generation, &now),
        note: msgs.join("; "),
        action: "Validate",
    };
    refuse(ctx, p, refused, |st| {
        st.slice_count = slice_count;
        st.slices = vec![];
    })
    .await?;
    for s in servers {
        let status = refusal::partition_invalid(&name, &msgs, s.metadata.generation, &now);
        let refused = Refusal {
            reason: refusal::PARTITION_INVALID,
            note: status.conditions[0].message.clone(),
            status,
            action: "Validate",
        };
        refuse(ctx, s, refused, |_| {}).await?;
    }
    ctx.metrics.count_error(ErrorCategory::InvalidSpec);
    Ok(Action::await_change())
}

/// Phase 4: a deleted server is released once its unit is gone from the host.
async fn release_deleted(
    ctx: &Ctx,
    removed: &[(&InferenceServer, Option<UnitRef>)],
    report: &Report,
) -> Result<(), Error> {
    let Some(host) = &report.final_host else {
        return Ok(());
    };
    for (s, unit) in removed {
        let gone = unit.as_ref().is_none_or(|u| {
            host.unit(u)
                .is_none_or(|o| o.file.is_none() && !o.is_active())
        });
        if !gone {
            continue;
        }
        release_server(ctx, s).await?;
        ctx.metrics.forget(
            "InferenceServer",
            &s.namespace().unwrap_or_default(),
            &s.name_any(),
        );
        publish(
            ctx,
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
    Ok(())
}

/// Each resource's `metadata.generation`, as its status's `observedGeneration` reports it.
fn generations(p: &GpuPartition, r: &Resolved<'_>) -> BTreeMap<ResourceKey, i64> {
    let mut generations = BTreeMap::new();
    generations.insert(
        ResourceKey::partition(p.name_any().as_str()),
        p.metadata.generation.unwrap_or(0),
    );
    for (d, s) in &r.valid {
        generations.insert(
            ResourceKey::server_id(&d.id),
            s.metadata.generation.unwrap_or(0),
        );
    }
    generations
}

/// Phase 5: status of the partition, its valid servers and its invalid ones, and the scrape
/// targets; returns how many servers are Ready, and where the host stands for its pool.
async fn write_status(
    ctx: &Ctx,
    pass: &Pass,
    p: &GpuPartition,
    r: &Resolved<'_>,
    report: &Report,
    outcome: &Outcome,
) -> Result<(i64, State), Error> {
    let part_key = ResourceKey::partition(p.name_any().as_str());
    let computed = &outcome.statuses;
    let host = final_host(report);
    let old = p.status.clone().unwrap_or_default();
    let applied = applied_steps(report);
    let pc = computed.get(&part_key).cloned().unwrap_or_default();
    let st = GpuPartitionStatus {
        observed_generation: p.metadata.generation,
        conditions: merge(&old.conditions, &pc.conditions),
        slice_count: r.desired.partition.slices.len() as u32,
        slices: slice_status(&r.desired.partition, host),
        last_applied_plan: if applied.is_empty() {
            old.last_applied_plan.clone()
        } else {
            applied
        },
        gpus: pc.gpus.clone(),
        layout_hash: pc.layout_hash.clone(),
    };
    write(ctx, p, &st).await?;

    let mut ready = 0i64;
    for (d, s) in &r.valid {
        let sc = computed
            .get(&ResourceKey::server_id(&d.id))
            .cloned()
            .unwrap_or_default();
        if is_ready(&sc.conditions) {
            ready += 1;
        }
        let st = server_status(d, s, &sc.conditions, host);
        write(ctx, *s, &st).await?;
    }
    for (s, reason, msgs) in &r.invalid {
        write_invalid_server(ctx, pass, s, *reason, msgs).await?;
    }
    // The SGLang servers for Prometheus (`/sd/servers`): this pass's Ready servers with
    // metrics, the whole list replacing the last (`discovery/`).
    ctx.metrics.set_server_sd(outcome.targets.clone());
    Ok((ready, health(p, r, report, computed)))
}

/// Where the host stands for its pool. Failed only when the partition itself is `Stalled` (what
/// the partition does pauses the pool); whole when nothing is left (the partition and every
/// server `Ready`, smoke-tested where a smoke test is set). With the partition whole, servers
/// are a tenant's business: ones that failed on their own (`Stalled`, a failed smoke test) give
/// the slot back ([`State::ServersFailed`]); ones still starting keep it at most their bound
/// ([`State::ServersPending`]); invalid ones were never planned. Else still working.
fn health(
    p: &GpuPartition,
    r: &Resolved<'_>,
    report: &Report,
    computed: &BTreeMap<crate::resource_key::ResourceKey, crate::status::ResourceStatus>,
) -> State {
    let part_key = crate::resource_key::ResourceKey::partition(p.name_any().as_str());
    let part = computed.get(&part_key);
    if let Some(c) = part
        .and_then(|st| st.condition(types::STALLED))
        .filter(|c| is_true(c))
    {
        let step = report
            .stop
            .as_ref()
            .and_then(|s| s.failure())
            .map(|(step, _)| step)
            .unwrap_or_else(|| part_key.to_string());
        return State::Failed {
            step,
            reason: c.reason.clone(),
            message: c.message.clone(),
        };
    }
    if !part
        .and_then(|st| st.condition(types::READY))
        .is_some_and(is_true)
    {
        return State::Working;
    }
    let mut failed = vec![];
    let mut bound_secs = 0;
    for (d, _) in &r.valid {
        let key = crate::resource_key::ResourceKey::server_id(&d.id);
        let st = computed.get(&key);
        let cond = |t: &str| st.and_then(|st| st.condition(t));
        let smoke = d.spec.smoke_test.is_some();
        let settled = cond(types::READY).is_some_and(is_true)
            && (!smoke || cond(types::SMOKE_TESTED).is_some_and(is_true));
        let smoke_failed = smoke && cond(types::SMOKE_TESTED).is_some_and(|c| !is_true(c));
        if let Some(c) = cond(types::STALLED).filter(|c| is_true(c)) {
            // A server stopped for a quarantined GPU is the agent's handling of a fault, not a
            // failure of the change: the pool neither pauses nor waits for it.
            if c.reason != Reason::GpuQuarantined.as_str() {
                failed.push(format!("{key} ({})", c.reason));
            }
        } else if smoke_failed {
            failed.push(format!("{key} (SmokeTestFailed)"));
        } else if !settled {
            let smoke_budget = if smoke {
                crate::host::local::SMOKE_BUDGET.as_secs()
            } else {
                0
            };
            bound_secs = bound_secs.max(d.spec.startup.deadline_seconds + smoke_budget);
        }
    }
    if bound_secs > 0 {
        State::ServersPending { bound_secs }
    } else if !failed.is_empty() {
        State::ServersFailed { servers: failed }
    } else if report.converged_apart_from(Reason::GpuQuarantined) {
        State::Whole
    } else {
        State::Working
    }
}

fn is_true(c: &gpuplane_crds::condition::Condition) -> bool {
    c.status == ConditionStatus::True.as_str()
}

/// The status of a valid server: conditions, endpoint, and what its unit on the host runs.
fn server_status(
    d: &DesiredServer,
    s: &InferenceServer,
    conditions: &[Condition],
    host: &HostState,
) -> InferenceServerStatus {
    let u = host.unit(&d.unit);
    let old = s.status.clone().unwrap_or_default();
    InferenceServerStatus {
        observed_generation: s.metadata.generation,
        conditions: merge(&old.conditions, conditions),
        endpoint: crate::status::endpoint(d, host),
        unit_hash: u
            .and_then(|u| u.file.as_ref())
            .map(|f| format!("{:x}", Sha256::digest(f.as_bytes()))),
        gpus: d.gpus.clone(),
        command: u
            .and_then(|u| u.file.as_deref())
            .and_then(|f| crate::systemd::unit::parse(f).ok())
            .map(|pu| crate::sglang::command::redacted(&pu.exec_start))
            .unwrap_or_default(),
    }
}

/// An invalid (or conflicting, `reason` `Conflict`) server's condition, and an event once per
/// generation.
async fn write_invalid_server(
    ctx: &Ctx,
    pass: &Pass,
    s: &InferenceServer,
    reason: Reason,
    msgs: &[String],
) -> Result<(), Error> {
    let now = pass.time();
    let status = if reason == refusal::CONFLICT {
        refusal::conflict(&msgs.join("; "), s.metadata.generation, &now)
    } else {
        refusal::invalid(msgs, s.metadata.generation, &now)
    };
    let refused = Refusal {
        reason,
        status,
        note: msgs.join("; "),
        action: "Validate",
    };
    refuse(ctx, s, refused, |_| {}).await?;
    ctx.metrics.count_error(if reason == refusal::CONFLICT {
        ErrorCategory::Conflict
    } else {
        ErrorCategory::InvalidSpec
    });
    Ok(())
}

/// Phase 6: one event per host change (on the server it was for, else the partition), P2P
/// decisions, corrected drift, and why the run stopped.
async fn publish_events(
    ctx: &Ctx,
    p: &GpuPartition,
    r: &Resolved<'_>,
    report: &Report,
    was_ready: bool,
    old_conditions: &[Condition],
) {
    let p_ref = p.object_ref(&());
    host_change_events(ctx, &p_ref, r, report).await;
    if !report.applied.is_empty() {
        note_events(ctx, r, report).await;
    }
    if was_ready && report.writes > 0 {
        let note = format!(
            "the host had drifted from the spec; {} host writes restored it: {}",
            report.writes,
            applied_steps(report).join("; ")
        );
        let warn = EventType::Warning;
        publish(ctx, &p_ref, warn, "DriftCorrected", "Converge", note).await;
    }
    if let Some((kind, reason, note)) = stop_event(report, old_conditions) {
        publish(ctx, &p_ref, kind, &reason, "Converge", note).await;
    }
}

/// One event per host write, on the server it was for (else the partition), and a warning per
/// leftover it removed.
async fn host_change_events(ctx: &Ctx, p_ref: &ObjectReference, r: &Resolved<'_>, report: &Report) {
    for a in report.applied.iter().filter(|a| a.planned.step.is_write()) {
        let target = server_of(&a.planned.step, &r.valid)
            .map(|s| s.object_ref(&()))
            .unwrap_or_else(|| p_ref.clone());
        let note = match &a.detail {
            Some(d) => format!("{}: {} ({d})", a.planned.step, a.planned.why),
            None => format!("{}: {}", a.planned.step, a.planned.why),
        };
        let action = a.planned.step.action();
        // A GPU found at a new address (or gone, or replaced, once acknowledged) says so by its
        // own reason: the ledger write's note is the table of old → new.
        let reason = match &a.planned.step {
            Step::WriteLedger { .. } if a.planned.why.contains("layout changed") => {
                "GpuLayoutChanged"
            }
            _ => "HostChanged",
        };
        publish(ctx, &target, EventType::Normal, reason, &action, note).await;
        for l in &a.leftovers {
            let (warn, removed) = (EventType::Warning, "LeftoverRemoved");
            publish(ctx, &target, warn, removed, &action, l.clone()).await;
        }
    }
}

/// The plan's notes (P2P decisions, a rollback) as warnings on the server each is about.
async fn note_events(ctx: &Ctx, r: &Resolved<'_>, report: &Report) {
    for n in &report.notes {
        let target = r
            .valid
            .iter()
            .find(|(d, _)| n.resource == ResourceKey::server_id(&d.id))
            .map(|(_, s)| s.object_ref(&()));
        if let Some(t) = target {
            let reason = n.reason.as_str();
            let note = n.message.clone();
            publish(ctx, &t, EventType::Warning, reason, "Plan", note).await;
        }
    }
}

/// The event for why the run stopped (its type, reason and note), if it is news: a blocker or a
/// held lock once while `Ready` already says it, a failure every time.
fn stop_event(report: &Report, old: &[Condition]) -> Option<(EventType, String, String)> {
    let said = |reason: Reason| {
        old.iter()
            .any(|c| c.type_ == types::READY && c.reason == reason)
    };
    match &report.stop {
        Some(Stop::Blocked { blockers }) => {
            let known = blockers.iter().any(|b| said(b.reason));
            let msgs: Vec<String> = blockers.iter().map(|b| b.message.clone()).collect();
            (!known).then(|| {
                (
                    EventType::Warning,
                    blockers[0].reason.into(),
                    msgs.join("; "),
                )
            })
        }
        Some(stop @ (Stop::StepFailed { .. } | Stop::ObserveFailed { .. })) => {
            let (step, error) = stop.failure().unwrap_or_default();
            let note = format!("{step}: {error}");
            Some((EventType::Warning, Reason::ApplyFailed.into(), note))
        }
        Some(Stop::WaitingForLock { step, message, .. }) => {
            (!said(Reason::WaitingForLock)).then(|| {
                let note = format!("{step}: {message}");
                (EventType::Normal, Reason::WaitingForLock.into(), note)
            })
        }
        _ => None,
    }
}

/// Phase 7 (beside `Outcome::record`: host writes, GPU rows): corrected drift, Ready
/// servers, errors by reason.
fn record_metrics(ctx: &Ctx, report: &Report, ready: i64, was_ready: bool) {
    let m = &ctx.metrics;
    if was_ready && report.writes > 0 {
        m.drifts_corrected.inc();
    }
    m.servers_ready.set(ready);
    match &report.stop {
        Some(Stop::Blocked { blockers }) => {
            for _ in blockers {
                m.count_error(ErrorCategory::Blocked);
            }
        }
        Some(Stop::StepFailed { .. }) | Some(Stop::ObserveFailed { .. }) => {
            m.count_error(ErrorCategory::ApplyFailed)
        }
        _ => {}
    }
}

/// Phase 8: converged → the drift interval; a server starting → the poll interval; a failure →
/// exponential backoff (blockers at most the drift interval, a not-ready server at least the
/// poll interval).
fn next_action(ctx: &Ctx, name: &str, report: &Report) -> Action {
    match &report.stop {
        None => {
            ctx.succeeded(name);
            Action::requeue(ctx.opts.drift_interval)
        }
        Some(Stop::Waiting { .. })
        | Some(Stop::WaitingForLock { .. })
        | Some(Stop::WaitingForSlot { .. }) => Action::requeue(ctx.opts.poll_interval),
        Some(Stop::Blocked { .. }) => {
            Action::requeue(ctx.backoff(name).min(ctx.opts.drift_interval))
        }
        Some(Stop::StepFailed { .. })
        | Some(Stop::ObserveFailed { .. })
        | Some(Stop::NoProgress { .. }) => Action::requeue(ctx.backoff(name)),
        Some(Stop::NotReady { .. }) => {
            Action::requeue(ctx.backoff(name).max(ctx.opts.poll_interval))
        }
    }
}

/// Whether nothing new was asked since the partition was last Ready: the partition was Ready
/// for its generation, every valid server's status already describes its current generation
/// (a new server has none, an edited one an older one) and no server is being deleted. Only
/// then is a host write a correction of drift; a write for a new or changed object is not.
fn nothing_asked_since_ready(p: &GpuPartition, r: &Resolved<'_>) -> bool {
    let ps = p.status.clone().unwrap_or_default();
    is_ready(&ps.conditions)
        && ps.observed_generation == p.metadata.generation
        && r.removed.is_empty()
        && r.valid.iter().all(|(_, s)| {
            s.status
                .as_ref()
                .is_some_and(|st| st.observed_generation == s.metadata.generation)
        })
}

/// Whether `Ready` is `True` among `conditions`.
fn is_ready(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == types::READY && c.status == ConditionStatus::True.as_str())
}

/// The host writes the run made, as text.
fn applied_steps(report: &Report) -> Vec<String> {
    report
        .applied
        .iter()
        .filter(|a| a.planned.step.is_write())
        .map(|a| a.planned.step.to_string())
        .collect()
}

/// The server a step was for, if any.
fn server_of<'a>(
    step: &Step,
    valid: &'a [(DesiredServer, &InferenceServer)],
) -> Option<&'a InferenceServer> {
    use Step::*;
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
                .map(|g| format!("{g}={}", host.driver_name(g)))
                .collect(),
        })
        .collect()
}
