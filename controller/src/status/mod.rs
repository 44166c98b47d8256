//! Status conditions computed from the desired state, the final observation and what a
//! converge run saw. Pure: the same function serves the CLI and the controller.

use crate::converge::{Report, Stop, WaitOutcome};
use crate::desired::Desired;
use crate::host::model::{HostState, HttpState, IommuMode, Location};
use crate::p2p::{decide_p2p, P2p};
use crate::plan::{Blocker, PlannedStep};
use crate::resource_key::ResourceKey;
use crate::step::Step;
use gpuplane_crds::condition::{types, Condition, Time};
pub use gpuplane_crds::reason::Reason;
use gpuplane_crds::reason::Standing as Class;
use gpuplane_crds::{set_condition, IommuModeExpectation};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

pub mod confidential;
pub mod gpus;
pub mod health;
pub mod kernel_args;
pub mod refusal;

/// Conditions of one resource (and, for the partition, its GPU table).
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    pub conditions: Vec<Condition>,
    /// The partition's GPUs (`gpus.rs`); empty for a server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<gpuplane_crds::GpuStatus>,
    /// The partition's layout hash (what `accept-layout` takes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout_hash: Option<String>,
}

impl ResourceStatus {
    pub fn condition(&self, t: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == t)
    }

    fn set(
        &mut self,
        type_: &str,
        status: bool,
        reason: Reason,
        message: String,
        now: &Time,
        generation: Option<i64>,
    ) {
        set_condition(
            &mut self.conditions,
            Condition {
                type_: type_.into(),
                status: if status { "True" } else { "False" }.into(),
                reason: reason.as_str().into(),
                message,
                observed_generation: generation,
                last_transition_time: now.clone(),
            },
        );
    }
}

impl ResourceStatus {
    /// Writes the kstatus pair `Reconciling` / `Stalled` for a resource whose standing is named
    /// by `reason`: its standing in the closed list (`gpuplane_crds::reason`) decides which is
    /// true — `Working`: `Reconciling` (kstatus InProgress), `Stuck`: `Stalled` (Failed),
    /// `Done`: neither (kstatus then reads `Ready`).
    ///
    /// # Guarantees
    /// At most one of the two is `True`, so kstatus's "first abnormal-true condition wins" never
    /// depends on the order of the list.
    pub fn progress(
        &mut self,
        reason: Reason,
        message: String,
        now: &Time,
        generation: Option<i64>,
    ) {
        debug_assert!(
            reason.standing() != Class::Detail,
            "{reason} names no standing"
        );
        let (reconciling, stalled) = reason.standing().pair();
        self.set(
            types::RECONCILING,
            reconciling,
            reason,
            message.clone(),
            now,
            generation,
        );
        self.set(types::STALLED, stalled, reason, message, now, generation);
    }
}

/// One condition's status, reason and message.
pub struct Row(pub bool, pub Reason, pub String);

/// What a resource's standing, classified once, writes: `Ready`, `Progressing`, and the reason
/// and message of the kstatus pair ([`ResourceStatus::progress`]).
pub struct Rows {
    pub ready: Row,
    pub progressing: Row,
    pub standing: (Reason, String),
}

impl ResourceStatus {
    /// Writes `rows` (each changed condition at `now`).
    pub fn rows(&mut self, rows: Rows, now: &Time, generation: Option<i64>) {
        let Row(on, reason, message) = rows.ready;
        self.set(types::READY, on, reason, message, now, generation);
        let Row(on, reason, message) = rows.progressing;
        self.set(types::PROGRESSING, on, reason, message, now, generation);
        let (reason, message) = rows.standing;
        self.progress(reason, message, now, generation);
    }
}

fn is_server_step(s: &Step) -> bool {
    matches!(
        s,
        Step::ProbeP2p { .. }
            | Step::WriteUnit { .. }
            | Step::DaemonReload { .. }
            | Step::StartUnit { .. }
            | Step::WaitReady { .. }
    )
}

/// Computes every resource's conditions, keyed by resource;
/// `now` is each changed condition's `lastTransitionTime` (the caller's clock).
pub fn compute(
    desired: &Desired,
    r: &Report,
    generations: &BTreeMap<ResourceKey, i64>,
    now: &Time,
) -> BTreeMap<ResourceKey, ResourceStatus> {
    let now = now.clone();
    let mut out = BTreeMap::new();
    let empty = HostState::default();
    let host = r.final_host.as_ref().unwrap_or(&empty);
    let part_res = ResourceKey::partition(desired.partition.name.as_str());
    let g = generations.get(&part_res).copied();
    let mut ps = partition_status(desired, r, host, &part_res, g, &now);
    confidential::conditions(&mut ps, desired, host, g, &now);
    kernel_args::condition(&mut ps, desired, host, g, &now);
    (ps.gpus, ps.layout_hash) = gpus::table(&desired.partition, host);
    health::condition(&mut ps, g, &now);
    out.insert(part_res.clone(), ps);
    for s in &desired.servers {
        let res = ResourceKey::server_id(&s.id);
        let g = generations.get(&res).copied();
        let mut st = ResourceStatus::default();
        server_readiness(&mut st, s, r, host, &part_res, g, &now);
        p2p_condition(&mut st, s, host, g, &now);
        preflight_condition(&mut st, s, host, g, &now);
        smoke_condition(&mut st, s, host, g, &now);
        degraded_condition(&mut st, s, r, host, g, &now);
        out.insert(res, st);
    }
    out
}

/// The partition's `Ready`, `Progressing` and kstatus pair, from its standing classified
/// first ([`PartitionState`], [`partition_rows`]), and `Degraded` (the IOMMU mode against the
/// spec's expectation).
fn partition_status(
    desired: &Desired,
    r: &Report,
    host: &HostState,
    part_res: &ResourceKey,
    g: Option<i64>,
    now: &Time,
) -> ResourceStatus {
    let mut ps = ResourceStatus::default();
    let state = partition_state(r, part_res);
    ps.rows(partition_rows(state, desired, r), now, g);
    iommu_condition(&mut ps, desired, host, g, now);
    ps
}

/// Where the partition stands after a run, judged in this order.
enum PartitionState<'a> {
    /// The plan is blocked on the partition (its blockers, first one first).
    Blocked(Vec<&'a Blocker>),
    /// A step failed, or the host could not be observed.
    Failed {
        step: String,
        error: String,
    },
    /// Another writer's lock or a pool's disruption slot: a wait that ends by itself.
    Locked {
        reason: Reason,
        wait: String,
    },
    /// Host steps (not a server's) are left.
    Applying(Vec<&'a PlannedStep>),
    Converged,
}

fn partition_state<'a>(r: &'a Report, part_res: &ResourceKey) -> PartitionState<'a> {
    let blockers: Vec<&Blocker> = r
        .final_plan
        .blockers
        .iter()
        .filter(|b| b.resource == *part_res)
        .collect();
    if !blockers.is_empty() {
        return PartitionState::Blocked(blockers);
    }
    if let Some((step, error)) = r.stop.as_ref().and_then(Stop::failure) {
        let error = error.to_string();
        return PartitionState::Failed { step, error };
    }
    if let Some((reason, wait)) = lock_wait(r) {
        return PartitionState::Locked { reason, wait };
    }
    let steps: Vec<&PlannedStep> = r
        .final_plan
        .steps
        .iter()
        .filter(|s| !is_server_step(&s.step))
        .collect();
    if steps.is_empty() {
        PartitionState::Converged
    } else {
        PartitionState::Applying(steps)
    }
}

/// A blocked partition's rows: stuck on the first blocker that needs a person; working when
/// every blocker is a wait that ends by itself (a reboot of `reboot: Auto`).
fn blocked_rows(blockers: &[&Blocker], r: &Report) -> Rows {
    let reason = blockers[0].reason;
    let stuck = blockers
        .iter()
        .map(|b| b.reason)
        .find(|r| r.standing() != Class::Working);
    let all: Vec<String> = blockers.iter().map(|b| b.message.clone()).collect();
    let text = all.join("; ");
    let progressing = if stuck.is_none() {
        let m = format!(
            "waiting for the reboot (reboot: Auto); {} host writes",
            r.writes
        );
        Row(true, reason, m)
    } else {
        Row(false, reason, format!("blocked; {}", nothing_changed(r)))
    };
    Rows {
        ready: Row(false, reason, text.clone()),
        progressing,
        standing: (stuck.unwrap_or(reason), text),
    }
}

/// The one mapping of the partition's standing to its rows.
fn partition_rows(state: PartitionState<'_>, desired: &Desired, r: &Report) -> Rows {
    match state {
        PartitionState::Blocked(blockers) => blocked_rows(&blockers, r),
        PartitionState::Failed { step, error } => {
            let retry = "the next reconcile retries from the observed state";
            Rows {
                ready: Row(false, Reason::ApplyFailed, format!("{step}: {error}")),
                progressing: Row(false, Reason::ApplyFailed, retry.into()),
                standing: (Reason::ApplyFailed, format!("{step}: {error}")),
            }
        }
        PartitionState::Locked { reason, wait } => {
            // Retried shortly: Reconciling, not Stalled.
            let left = r
                .final_plan
                .steps
                .iter()
                .filter(|s| !is_server_step(&s.step));
            let msg = format!("{wait}; {} host steps left, retried shortly", left.count());
            let what = "waiting for a lock (another writer's, or a disruption slot)";
            Rows {
                ready: Row(false, reason, msg.clone()),
                progressing: Row(true, reason, what.into()),
                standing: (reason, msg),
            }
        }
        PartitionState::Applying(steps) => {
            let next: Vec<String> = steps.iter().take(3).map(|s| s.step.to_string()).collect();
            let n = steps.len();
            Rows {
                ready: Row(
                    false,
                    Reason::Progressing,
                    format!("{n} steps left, next: {}", next.join("; ")),
                ),
                progressing: Row(true, Reason::Applying, format!("{n} steps left")),
                standing: (Reason::Applying, format!("{n} host steps left")),
            }
        }
        PartitionState::Converged => {
            let summary: Vec<String> = desired
                .partition
                .slices
                .iter()
                .map(|s| {
                    let driver = s.driver.sysfs_name();
                    format!("{}: {} GPUs on {driver}", s.name, s.gpus.len())
                })
                .collect();
            let matches = "host matches the spec";
            Rows {
                ready: Row(true, Reason::Converged, summary.join("; ")),
                progressing: Row(false, Reason::Converged, matches.into()),
                standing: (Reason::Converged, matches.into()),
            }
        }
    }
}

/// The reason and words of a run stopped on a lock: a pool member's disruption slot
/// (`WaitingForDisruptionBudget`, "STEP waits for a disruption slot: …") or another writer's
/// Proxmox lock (`WaitingForLock`, "STEP waits for Proxmox's lock: MESSAGE").
fn lock_wait(r: &Report) -> Option<(Reason, String)> {
    match &r.stop {
        Some(Stop::WaitingForSlot { step, slot, why }) => Some((
            WAITING_FOR_DISRUPTION_BUDGET,
            format!("{step} waits for a disruption slot: {why}: this pool member needs a disruption slot first ({slot})"),
        )),
        Some(Stop::WaitingForLock { step, message, .. }) => Some((
            Reason::WaitingForLock,
            format!("{step} waits for Proxmox's lock: {message}"),
        )),
        _ => None,
    }
}

/// The reason a pool member's resources give while it waits for a disruption slot.
pub const WAITING_FOR_DISRUPTION_BUDGET: Reason = Reason::WaitingForDisruptionBudget;

/// What a stopped run changed, truthfully: nothing, or nothing after its writes.
fn nothing_changed(r: &Report) -> String {
    match r.writes {
        0 => "nothing was changed".into(),
        n => format!("nothing more was changed after {n} host writes"),
    }
}

/// The partition's `Degraded`: whether the IOMMU mode is what the spec expects.
fn iommu_condition(
    st: &mut ResourceStatus,
    desired: &Desired,
    host: &HostState,
    g: Option<i64>,
    now: &Time,
) {
    let mode = host.iommu.mode();
    let expect_ok = match desired.partition.iommu {
        IommuModeExpectation::Any => true,
        IommuModeExpectation::Translated => mode == IommuMode::Translated,
        IommuModeExpectation::Passthrough => mode == IommuMode::Passthrough,
    };
    if expect_ok {
        st.set(
            types::DEGRADED,
            false,
            Reason::AsExpected,
            format!("IOMMU mode {mode:?}"),
            now,
            g,
        );
    } else {
        st.set(
            types::DEGRADED,
            true,
            Reason::IommuMismatch,
            format!("spec expects IOMMU {:?} but the host runs {mode:?} (kernel command line: {}); changing it needs a reboot", desired.partition.iommu, host.iommu.cmdline.join(" ")),
            now,
            g,
        );
    }
}

/// A server's `Ready` and `Progressing`: ready, stalled, crashed, past its deadline, blocked, or
/// starting (with its startup phase).
///
/// (Its messages name the server's [`endpoint`].)
fn server_readiness(
    st: &mut ResourceStatus,
    s: &crate::desired::DesiredServer,
    r: &Report,
    host: &HostState,
    part_res: &ResourceKey,
    g: Option<i64>,
    now: &Time,
) {
    let state = server_state(s, r, host, part_res);
    st.rows(server_rows(state, s, host, r), now, g);
}

/// Where a server stands after a run.
enum ServerState<'a> {
    /// Serving with the unit of the previous spec: this generation is blocked.
    ServingBlocked(&'a Blocker),
    /// Serving its model.
    Serving(Option<&'a WaitOutcome>),
    /// Not serving: why (reason, message) and the startup phase its unit is in.
    NotReady {
        reason: Reason,
        message: String,
        phase: Reason,
    },
}

fn server_state<'a>(
    s: &crate::desired::DesiredServer,
    r: &'a Report,
    host: &'a HostState,
    part_res: &ResourceKey,
) -> ServerState<'a> {
    let res = ResourceKey::server_id(&s.id);
    let obs = host.unit(&s.unit).and_then(|u| u.server.as_ref());
    let ready = obs.is_some_and(|o| {
        o.http == HttpState::Healthy && o.models.iter().any(|m| m == &s.spec.model.served_name)
    });
    let wait = r.waits.get(&s.unit.key());
    let blocked = r
        .final_plan
        .blockers
        .iter()
        .find(|b| b.resource == res || b.resource == *part_res);
    match (ready, blocked) {
        // A blocker of this server while it serves: the unit running is the previous spec's,
        // and the new generation cannot be applied (kstatus must not read it Current).
        (true, Some(b)) if b.resource == res => ServerState::ServingBlocked(b),
        (true, _) => ServerState::Serving(wait),
        (false, _) => {
            let phase = obs
                .and_then(|o| o.phase)
                .map(phase_reason)
                .unwrap_or(Reason::NotStarted);
            let (reason, message) = not_ready_reason(r, wait, blocked, &res, phase);
            ServerState::NotReady {
                reason,
                message,
                phase,
            }
        }
    }
}

/// Why a server is not ready, in the order that decides: its startup's outcome, a blocker (its
/// own, the host's reboot, the partition's), a lock, else still starting.
fn not_ready_reason(
    r: &Report,
    wait: Option<&WaitOutcome>,
    blocked: Option<&Blocker>,
    res: &ResourceKey,
    phase: Reason,
) -> (Reason, String) {
    let last3 = |t: &[String]| crate::text::last_lines(t, 3);
    match (wait, blocked) {
        (Some(WaitOutcome::Stalled { phase, stalled_seconds, gpu_memory_mib, log_tail }), _) => (
            Reason::StartupStalled,
            format!(
                "no startup progress for {stalled_seconds} s in phase {phase} while the unit is active; GPU memory per device: {} MiB; last log lines: {}",
                gpu_memory_mib.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
                last3(log_tail)
            ),
        ),
        (Some(WaitOutcome::Crashed { exit_status, log_tail }), _) => (
            Reason::Crashed,
            format!(
                "the unit failed (exit status {}); last log lines: {}",
                exit_status.map(|e| e.to_string()).unwrap_or_else(|| "?".into()),
                last3(log_tail)
            ),
        ),
        (Some(WaitOutcome::DeadlineExceeded { phase, after_seconds }), _) => {
            (Reason::DeadlineExceeded, format!("not ready {after_seconds} s after start, in phase {phase}"))
        }
        (_, Some(b)) if b.resource == *res => (b.reason, b.message.clone()),
        // The partition's host reboots by itself (reboot: Auto): the server waits for it, as
        // work in progress (a pool must not read the member as failed).
        (_, Some(b)) if crate::plan::kernel_args::is_reboot_wait(b.reason) => {
            (b.reason, format!("the server starts after the host's reboot: {}", b.message))
        }
        (_, Some(b)) => (Reason::WaitingForGpus, format!("the partition is blocked: {}", b.message)),
        _ => match lock_wait(r) {
            Some((reason, w)) => (reason, format!("the host change it needs waits for a lock: {w}")),
            None => (Reason::Starting, format!("phase {phase}")),
        },
    }
}

/// The `Progressing` reason of a startup phase.
fn phase_reason(p: crate::sglang::phase::StartupPhase) -> Reason {
    use crate::sglang::phase::StartupPhase as P;
    match p {
        P::Launching => Reason::Launching,
        P::LoadingWeights => Reason::LoadingWeights,
        P::AllocatingKvCache => Reason::AllocatingKvCache,
        P::CapturingCudaGraphs => Reason::CapturingCudaGraphs,
        P::WarmingUp => Reason::WarmingUp,
        P::Ready => Reason::Ready,
    }
}

/// The one mapping of a server's standing to its rows.
fn server_rows(
    state: ServerState<'_>,
    s: &crate::desired::DesiredServer,
    host: &HostState,
    r: &Report,
) -> Rows {
    let endpoint = endpoint_words(s, host);
    let model = &s.spec.model.served_name;
    match state {
        ServerState::ServingBlocked(b) => Rows {
            ready: Row(
                true,
                Reason::ServerReady,
                format!("{endpoint} serves {model} with the unit of the previous spec; the new spec is blocked ({})", b.reason),
            ),
            progressing: Row(
                false,
                b.reason,
                format!("the new spec is blocked; {}", nothing_changed(r)),
            ),
            standing: (
                b.reason,
                format!("this generation is blocked: {}; the unit of the previous spec keeps serving", b.message),
            ),
        },
        ServerState::Serving(wait) => {
            let startup = match wait {
                Some(w @ WaitOutcome::Ready { .. }) => format!("startup finished: {}", w.summary()),
                _ => "startup finished".to_string(),
            };
            let gpus = s.gpus.len();
            Rows {
                ready: Row(true, Reason::ServerReady, format!("{endpoint} serves {model} on {gpus} GPUs")),
                progressing: Row(false, Reason::Ready, startup.clone()),
                standing: (Reason::ServerReady, startup),
            }
        }
        ServerState::NotReady {
            reason,
            message,
            phase,
        } => {
            // Starting: work in progress, named by its startup phase; a wait that ends by
            // itself (a lock, a disruption slot, the host's reboot): work in progress, named by
            // its reason; anything else needs a person.
            let standing = if reason != Reason::Starting {
                (reason, message.clone())
            } else if phase.standing() == Class::Working {
                (phase, format!("the server is starting: {message}"))
            } else {
                (reason, format!("the server is starting: {message}"))
            };
            let working = reason.standing() == Class::Working;
            Rows {
                ready: Row(false, reason, message),
                progressing: Row(working, phase, format!("startup phase {phase}")),
                standing,
            }
        }
    }
}

/// A server's `P2PSafe`: whether GPU peer-to-peer is safe for it, and why.
fn p2p_condition(
    st: &mut ResourceStatus,
    s: &crate::desired::DesiredServer,
    host: &HostState,
    g: Option<i64>,
    now: &Time,
) {
    let (p2p_ok, p2p_reason, p2p_msg) = match decide_p2p(s, host, &BTreeSet::new()) {
        P2p::On => match s.spec.p2p {
            gpuplane_crds::P2pPolicy::Enabled => (true, Reason::PolicyEnabled, "p2p: Enabled; not checked".to_string()),
            _ if host.iommu.mode() == IommuMode::Translated => (true, Reason::P2PVerified, "the P2P probe copied correctly between every GPU pair".to_string()),
            _ => (true, Reason::NotTranslated, format!("IOMMU mode {:?}: GPU DMA is not translated", host.iommu.mode())),
        },
        P2p::Off(why) if s.spec.p2p == gpuplane_crds::P2pPolicy::Disabled => (true, Reason::PolicyDisabled, why),
        P2p::Off(why) => (false, Reason::P2PCorruption, format!("{why}; P2P is disabled for this server (NCCL_P2P_DISABLE=1, --disable-custom-all-reduce)")),
        P2p::Probe(why) => (false, Reason::ProbePending, why),
    };
    st.set(types::P2P_SAFE, p2p_ok, p2p_reason, p2p_msg, now, g);
}

/// A server's `PreflightPassed`, when the backend could look: what was found (versions, memory,
/// KV headroom), or every problem.
fn preflight_condition(
    st: &mut ResourceStatus,
    s: &crate::desired::DesiredServer,
    host: &HostState,
    g: Option<i64>,
    now: &Time,
) {
    use crate::desired::preflight::{container_driver_mismatch, host_driver_stale};
    let drivers: Vec<String> = container_driver_mismatch(s, host)
        .into_iter()
        .chain(host_driver_stale(s, host))
        .collect();
    let mut v = match host.preflight.get(&s.id) {
        Some(f) => crate::desired::preflight::judge(s, f),
        None if drivers.is_empty() => return,
        None => Default::default(),
    };
    v.problems.extend(drivers);
    if v.problems.is_empty() {
        st.set(
            types::PREFLIGHT_PASSED,
            true,
            Reason::PreflightPassed,
            v.summary,
            now,
            g,
        );
    } else {
        st.set(
            types::PREFLIGHT_PASSED,
            false,
            Reason::PreflightFailed,
            crate::text::truncate(&v.problems.join("; "), 2000),
            now,
            g,
        );
    }
}

/// A server's `SmokeTested`, once its smoke test ran against the unit running now.
fn smoke_condition(
    st: &mut ResourceStatus,
    s: &crate::desired::DesiredServer,
    host: &HostState,
    g: Option<i64>,
    now: &Time,
) {
    if s.spec.smoke_test.is_none() {
        return;
    }
    let Some(r) = host
        .unit(&s.unit)
        .and_then(|u| u.server.as_ref())
        .and_then(|o| o.smoke.as_ref())
    else {
        return;
    };
    if r.failures.is_empty() {
        let msg = format!("{} chat requests answered as expected", r.requests);
        st.set(
            types::SMOKE_TESTED,
            true,
            Reason::SmokeTestPassed,
            msg,
            now,
            g,
        );
    } else {
        let msg = format!(
            "{} of {} requests failed: {}",
            r.failures.len(),
            r.requests,
            r.failures.join("; ")
        );
        let msg = crate::text::truncate(&msg, 2000);
        st.set(
            types::SMOKE_TESTED,
            false,
            Reason::SmokeTestFailed,
            msg,
            now,
            g,
        );
    }
}

/// A server's `Degraded`: the most actionable of a driver mismatch, a rollback, or a running
/// configuration that differs from the spec.
fn degraded_condition(
    st: &mut ResourceStatus,
    s: &crate::desired::DesiredServer,
    r: &Report,
    host: &HostState,
    g: Option<i64>,
    now: &Time,
) {
    let res = ResourceKey::server_id(&s.id);
    let obs = host.unit(&s.unit).and_then(|u| u.server.as_ref());
    // Driver mismatch: container userspace vs host kernel module.
    let mismatch = match s.unit.location {
        Location::Container(v) => host.containers.get(&v).and_then(|c| {
            match (&c.nvidia_userspace_version, &host.nvidia.module_version) {
                (Some(u), Some(k)) if u != k => Some(format!("container {v} has NVIDIA userspace {u} but the host kernel module is {k}; install the {k} userspace libraries in the container")),
                _ => None,
            }
        }),
        Location::Host => None,
    };
    let note = |reason: Reason| {
        r.notes
            .iter()
            .find(|n| n.resource == res && n.reason == reason)
            .map(|n| n.message.clone())
    };
    let rolled_back = note(crate::plan::Reason::RolledBack);
    // A server shrunk onto its remaining GPUs runs another size than its spec on purpose.
    let shrunk = note(Reason::ShrunkForQuarantine);
    let drift = obs.and_then(|o| effective_config_drift(&s.spec, &o.server_info));
    // The most actionable problem wins.
    let degraded = mismatch
        .map(|m| (Reason::DriverMismatch, m))
        .or_else(|| shrunk.map(|m| (Reason::ShrunkForQuarantine, m)))
        .or_else(|| rolled_back.map(|m| (crate::plan::Reason::RolledBack, m)))
        .or_else(|| drift.map(|m| (Reason::EffectiveConfigDrift, m)));
    match degraded {
        Some((reason, m)) => st.set(types::DEGRADED, true, reason, m, now, g),
        None => st.set(
            types::DEGRADED,
            false,
            Reason::AsExpected,
            "no known problem".into(),
            now,
            g,
        ),
    }
}

/// Differences between what the server reports it runs (`/server_info`) and the spec.
/// SGLang's own rewrites are expected, not drift: NEXTN runs as EAGLE.
pub fn effective_config_drift(
    spec: &gpuplane_crds::InferenceServerSpec,
    info: &BTreeMap<String, String>,
) -> Option<String> {
    let mut diffs = Vec::new();
    let mut check = |key: &str, want: String| {
        if let Some(have) = info.get(key) {
            let have = have.trim_matches('"');
            let same = match (have.parse::<f64>(), want.parse::<f64>()) {
                (Ok(a), Ok(b)) => (a - b).abs() < 1e-9,
                _ => have.eq_ignore_ascii_case(&want),
            };
            if !same {
                diffs.push(format!("{key} is {have}, the spec says {want}"));
            }
        }
    };
    check("tp_size", spec.tensor_parallel_size.to_string());
    if let Some(sp) = &spec.speculative {
        let algo = sp.algorithm.to_ascii_uppercase();
        check(
            "speculative_algorithm",
            if algo == "NEXTN" {
                "EAGLE".into()
            } else {
                algo
            },
        );
        if let Some(v) = sp.num_steps {
            check("speculative_num_steps", v.to_string());
        }
        if let Some(v) = sp.eagle_topk {
            check("speculative_eagle_topk", v.to_string());
        }
        if let Some(v) = sp.num_draft_tokens {
            check("speculative_num_draft_tokens", v.to_string());
        }
    }
    if let Some(f) = spec.mem_fraction_static {
        check("mem_fraction_static", f.to_string());
    }
    if diffs.is_empty() {
        None
    } else {
        Some(format!(
            "the running server differs from the spec: {}",
            diffs.join("; ")
        ))
    }
}

/// Where users reach the server: for a server in a container that listens on every address
/// (`0.0.0.0`, `::`), the container's address as the agent reached it from the host side
/// (`reached_at`: its config's static address, or its network namespace's); otherwise the
/// address of `spec.listen` as written. `None` while such a container's address is not known
/// (DHCP, not reached yet): `0.0.0.0` is no address a client can use.
pub fn endpoint(s: &crate::desired::DesiredServer, host: &HostState) -> Option<String> {
    let listen = s.spec.listen.host.as_str();
    let in_container = matches!(s.unit.location, crate::host::model::Location::Container(_));
    let wildcard = matches!(listen, "0.0.0.0" | "::");
    let reached = host
        .unit(&s.unit)
        .and_then(|u| u.server.as_ref())
        .and_then(|o| o.reached_at.as_deref())
        .filter(|_| in_container && wildcard);
    let addr = match reached {
        Some(a) => a,
        None if in_container && wildcard => return None,
        None => listen,
    };
    Some(if addr.contains(':') && !addr.starts_with('[') {
        format!("http://[{addr}]:{}", s.spec.listen.port)
    } else {
        format!("http://{addr}:{}", s.spec.listen.port)
    })
}

/// [`endpoint`] in a message's words: the URL, or what is known when the address is not.
fn endpoint_words(s: &crate::desired::DesiredServer, host: &HostState) -> String {
    endpoint(s, host).unwrap_or_else(|| {
        format!(
            "the server on port {} of {} (its address is unknown from the host side, e.g. DHCP: a static ip= in the container's config names it)",
            s.spec.listen.port, s.unit.location
        )
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod kstatus_table;
