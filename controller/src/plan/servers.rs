//! Planning of inference server units: P2P decision, unit content, start/restart, readiness.

use super::{Note, Planner, Reason, Step};
use crate::desired::DesiredServer;
use crate::host::model::{HostState, HttpState, Location};
use crate::memo::Recent;
use crate::p2p::{decide_p2p, P2p};
use crate::sglang::command;
use crate::systemd::unit::{self, UnitError, UnitSpec};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// What the partition part of the plan leaves behind, as the server part needs it.
pub(super) struct AfterPartition<'a> {
    /// Driver each partition GPU will have.
    pub targets: &'a BTreeMap<String, String>,
    /// Minors each LXC consumer will have (all known at this point).
    pub container_minors: &'a BTreeMap<u32, Option<BTreeSet<u32>>>,
    /// Containers that are (re)started by this plan: their units are not running.
    pub restarted: &'a BTreeSet<u32>,
    /// GPUs rebound by this plan (cached P2P results for them are void).
    pub rebound: &'a BTreeSet<String>,
}

/// CUDA indices of `gpus` where the unit runs: position among the GPUs visible there, by PCI address
/// (the unit sets `CUDA_DEVICE_ORDER=PCI_BUS_ID`).
pub fn cuda_indices(
    s: &DesiredServer,
    h: &HostState,
    ctx_targets: &BTreeMap<String, String>,
    host_driver: &str,
    container_minors: Option<&BTreeSet<u32>>,
) -> Vec<u32> {
    let driver_of = |a: &str| -> Option<&str> {
        ctx_targets
            .get(a)
            .map(String::as_str)
            .or_else(|| h.pci_devices.get(a).and_then(|d| d.driver.as_deref()))
    };
    let visible: Vec<&String> = h
        .pci_devices
        .iter()
        .filter(|(a, d)| d.is_display() && driver_of(a) == Some(host_driver))
        .filter(|(_, d)| match (s.unit.location, container_minors) {
            (Location::Container(_), Some(m)) => d.nvidia_minor.is_some_and(|n| m.contains(&n)),
            _ => true,
        })
        .map(|(a, _)| a)
        .collect();
    s.gpus
        .iter()
        .filter_map(|g| visible.iter().position(|v| *v == g).map(|i| i as u32))
        .collect()
}

/// A server's unit as the planner writes it: the command and environment, and the file.
#[derive(Debug, Clone)]
pub struct ServerUnit {
    pub spec: UnitSpec,
    pub file: String,
}

/// Renders the unit of `s` for the GPUs visible where it runs once the plan's bindings
/// (`targets`) are in place. The one place a server's unit is built, for the planner and for
/// `gpuplane render`.
pub fn server_unit(
    s: &DesiredServer,
    h: &HostState,
    targets: &BTreeMap<String, String>,
    host_driver: &str,
    container_minors: Option<&BTreeSet<u32>>,
    p2p_disabled: bool,
) -> Result<ServerUnit, UnitError> {
    let indices = cuda_indices(s, h, targets, host_driver, container_minors);
    let spec = command::unit_spec(&s.id, &s.spec, &s.runtime, &indices, p2p_disabled);
    let file = render_unit(&spec)?;
    Ok(ServerUnit { spec, file })
}

/// The unit `s` gets on the host as observed now, with no binding pending: what
/// `gpuplane render` prints. `force_p2p_off` renders it as if P2P were disabled.
pub fn observed_server_unit(
    s: &DesiredServer,
    h: &HostState,
    host_driver: &str,
    force_p2p_off: bool,
) -> Result<ServerUnit, UnitError> {
    let minors = match s.unit.location {
        Location::Container(v) => h.containers.get(&v).map(|c| c.gpu_mounts.minors.clone()),
        Location::Host => None,
    };
    let disabled = force_p2p_off || matches!(decide_p2p(s, h, &BTreeSet::new()), P2p::Off(_));
    server_unit(
        s,
        h,
        &BTreeMap::new(),
        host_driver,
        minors.as_ref(),
        disabled,
    )
}

/// Units of deleted servers, then each server's unit: write, reload, (re)start, wait, roll back.
pub(super) fn plan_servers(p: &mut Planner<'_>, ctx: &AfterPartition<'_>) {
    plan_removed_units(p);
    for s in &p.d.servers {
        if let Some(file) = p.h.unit(&s.unit).and_then(|u| u.file.as_deref()) {
            if !s.adopt && !unit::is_managed(file) {
                p.block(
                    crate::resource_key::ResourceKey::server_id(&s.id),
                    Reason::UnitNotManaged,
                    format!("{} was not written by gpuplane (no `{}` header); the agent never writes over, restarts or removes such a unit: rename the server's unit, or the slice's admin may adopt it (servers.adoptUnits)", s.unit, unit::HEADER),
                );
                continue;
            }
            if s.adopt && !unit::is_managed(file) {
                if let Some(runs) = not_an_sglang_launch(file) {
                    p.block(
                        crate::resource_key::ResourceKey::server_id(&s.id),
                        Reason::UnitNotSGLang,
                        format!("{} runs {runs}, not an SGLang server (`python -m sglang.launch_server`); the agent adopts only SGLang units and leaves this one as it is: name the server's unit differently, or the slice's admin removes it from servers.adoptUnits", s.unit),
                    );
                    continue;
                }
            }
        }
        if let Some(why) = root_in_privileged_container(s, p.h) {
            p.block(
                crate::resource_key::ResourceKey::server_id(&s.id),
                Reason::RootInPrivilegedContainer,
                why,
            );
            continue;
        }
        if p.block_if_occupied(s) {
            continue;
        }
        let Some(content) = unit_content(p, ctx, s) else {
            continue;
        };
        let chosen = choose_unit(p, s, content);
        plan_unit(p, ctx, s, chosen);
    }
}

/// Why `s` may not run: its unit would run as root (the slice names no `servers.user`) in a
/// privileged container, whose root is the host's root, so a tenant's server would be root on
/// the host. The slice's admin accepts that only by writing `user: root`.
fn root_in_privileged_container(s: &DesiredServer, h: &HostState) -> Option<String> {
    let Location::Container(vmid) = s.unit.location else {
        return None;
    };
    let privileged = h.containers.get(&vmid).is_some_and(|c| c.privileged);
    (privileged && s.runtime.user.is_none()).then(|| {
        format!("{} would run as root in container {vmid}, which is privileged (its config has no `unprivileged: 1`): its root is the host's root. The slice's admin sets servers.user to a user of the container, or writes `user: root` to accept it", s.unit)
    })
}

/// What a unit file the agent did not write runs, when it is not an SGLang launch
/// (`<python> -m sglang.launch_server ...`); `None` when it is one. A file that does not parse
/// is not one. Remembered per text ([`JUDGED`]).
fn not_an_sglang_launch(file: &str) -> Option<String> {
    if file.len() > MEMO_TEXT_MAX {
        return judge_launch(file);
    }
    JUDGED
        .with_borrow_mut(|m| m.get(file, |f| Some(judge_launch(f))))
        .flatten()
}

/// The longest unit text the planner's memos keep (a longer one is computed every time): with
/// their `max`, a bound on what a host's unit files can make the agent hold.
const MEMO_TEXT_MAX: usize = 64 * 1024;

thread_local! {
    /// [`judge_launch`]'s verdicts on the last unit texts: a plan judges an adopted unit on
    /// every pass and, within a converge, after every step, while the file rarely changes;
    /// parsing it was a quarter of a plan's time.
    static JUDGED: RefCell<Recent<String, Option<String>>> = const { RefCell::new(Recent::new(8)) };
    /// [`unit::render`]'s units by their spec: a converged reconcile renders every server's
    /// unit to compare it with the file, a converge again after every step; a sixth of a
    /// converged reconcile's time.
    static RENDERED: RefCell<Recent<UnitSpec, String>> = const { RefCell::new(Recent::new(8)) };
}

/// [`unit::render`], remembered per spec ([`RENDERED`]; a spec is a validated server's, its
/// size bounded by the CRD's limits); an error is rendered again to say it (rare).
fn render_unit(spec: &UnitSpec) -> Result<String, UnitError> {
    match RENDERED.with_borrow_mut(|m| m.get(spec, |s| unit::render(s).ok())) {
        Some(file) => Ok(file),
        None => unit::render(spec),
    }
}

/// [`not_an_sglang_launch`], computed.
fn judge_launch(file: &str) -> Option<String> {
    let argv = match unit::parse(file) {
        Ok(u) => u.exec_start,
        Err(e) => return Some(format!("a unit file that does not parse ({e})")),
    };
    let sglang = argv
        .windows(2)
        .any(|w| w[0] == "-m" && w[1] == "sglang.launch_server");
    if sglang {
        return None;
    }
    Some(if argv.is_empty() {
        "no ExecStart".to_string()
    } else {
        let shown = argv.iter().take(4).cloned().collect::<Vec<_>>().join(" ");
        format!("`{}`", crate::text::truncate(&shown, 200))
    })
}

/// Units of deleted servers go away (unless a live server uses the same unit), but only
/// units the agent wrote: a file with its header. Any other unit is left exactly as it is.
fn plan_removed_units(p: &mut Planner<'_>) {
    let h = p.h;
    for u in &p.d.removed_units {
        if p.d.servers.iter().any(|s| &s.unit == u) {
            continue;
        }
        let Some(obs) = h.unit(u) else { continue };
        if !obs.file.as_deref().is_some_and(unit::is_managed) {
            continue;
        }
        if obs.is_active() {
            p.push(
                Step::StopUnit { unit: u.clone() },
                "its InferenceServer was deleted",
            );
        }
        if obs.file.is_some() {
            p.push(
                Step::RemoveUnit { unit: u.clone() },
                "its InferenceServer was deleted",
            );
        }
    }
}

/// The unit the spec renders to, with P2P decided. `None` when the plan cannot go on for this
/// server yet: a P2P probe must run first, or the unit cannot be rendered (blocked).
fn unit_content(
    p: &mut Planner<'_>,
    ctx: &AfterPartition<'_>,
    s: &DesiredServer,
) -> Option<String> {
    let h = p.h;
    let res = crate::resource_key::ResourceKey::server_id(&s.id);
    let container_minors = match s.unit.location {
        Location::Container(v) => ctx.container_minors.get(&v).and_then(|m| m.as_ref()),
        Location::Host => None,
    };
    let disabled = match decide_p2p(s, h, ctx.rebound) {
        P2p::On => false,
        P2p::Off(why) => {
            p.plan.notes.push(Note {
                resource: res.clone(),
                reason: Reason::P2PDisabled,
                message: format!("P2P disabled: {why}"),
            });
            true
        }
        P2p::Probe(why) => {
            let indices = cuda_indices(
                s,
                h,
                ctx.targets,
                &p.d.partition.host_driver,
                container_minors,
            );
            p.push(
                Step::ProbeP2p {
                    location: s.unit.location,
                    python: s.spec.python.clone(),
                    user: s.runtime.user.clone(),
                    gpus: s.gpus.clone(),
                    cuda_indices: indices,
                },
                why,
            );
            p.plan.continues_after = Some(format!(
                "the P2P probe for {}: its result decides the unit's NCCL settings",
                s.id
            ));
            return None;
        }
    };
    match server_unit(
        s,
        h,
        ctx.targets,
        &p.d.partition.host_driver,
        container_minors,
        disabled,
    ) {
        Ok(u) => Some(u.file),
        Err(e) => {
            p.block(
                res,
                Reason::InvalidSpec,
                format!("the unit cannot be rendered: {e}"),
            );
            None
        }
    }
}

/// Which unit a server gets: the one its spec renders to, or (rollback: Auto) the last unit
/// that reached Ready when the spec's unit is known to have failed.
struct ChosenUnit {
    /// The unit to have on the host.
    content: String,
    /// The unit the spec renders to.
    spec_content: String,
    /// The spec's unit is recorded as failed.
    spec_failed: bool,
    /// The last unit that reached Ready, when rollback is Auto and it differs from the spec's.
    rollback_to: Option<String>,
}

/// rollback: Auto: a spec whose unit failed is not written again while the last unit that
/// reached Ready runs instead; a new spec (another unit) is tried.
fn choose_unit(p: &mut Planner<'_>, s: &DesiredServer, content: String) -> ChosenUnit {
    let observed = p.h.unit(&s.unit);
    // Hashed only when a failure was recorded: a SHA-256 of the unit was a sixth of a
    // converged reconcile's plan.
    let spec_failed = observed
        .and_then(|u| u.failed_hash.as_deref())
        .is_some_and(|failed| failed == unit_hash(&content));
    let rollback_to = (s.spec.rollback == gpuplane_crds::RollbackPolicy::Auto)
        .then(|| observed.and_then(|u| u.last_ready.clone()))
        .flatten()
        .filter(|r| *r != content);
    let spec_content = content.clone();
    let content = match (&rollback_to, spec_failed) {
        (Some(r), true) => {
            p.plan.notes.push(Note {
                resource: crate::resource_key::ResourceKey::server_id(&s.id),
                reason: Reason::RolledBack,
                message: format!("Rolled back: the unit rendered from this spec failed to start, so {} runs the last unit that reached Ready; change the spec to try again", s.unit),
            });
            r.clone()
        }
        _ => content,
    };
    ChosenUnit {
        content,
        spec_content,
        spec_failed,
        rollback_to,
    }
}

/// The step that waits for server `s` to answer, and why.
fn wait_ready(s: &DesiredServer) -> (Step, String) {
    let wait = Step::WaitReady {
        unit: s.unit.clone(),
        served_name: s.spec.model.served_name.clone(),
        stall_after_seconds: s.spec.startup.stall_after_seconds,
        deadline_seconds: s.spec.startup.deadline_seconds,
        smoke_test: s.spec.smoke_test.is_some(),
    };
    let why = format!(
        "SGLang opens its port only after loading weights and capturing CUDA graphs; Ready means /health_generate answers 200 and /v1/models lists {}",
        s.spec.model.served_name
    );
    (wait, why)
}

/// The steps that take the server's unit from what is observed to `chosen`, running and Ready.
fn plan_unit(p: &mut Planner<'_>, ctx: &AfterPartition<'_>, s: &DesiredServer, chosen: ChosenUnit) {
    let observed = p.h.unit(&s.unit);
    let restarted = matches!(s.unit.location, Location::Container(v) if ctx.restarted.contains(&v));
    let active = !restarted && observed.is_some_and(|u| u.is_active());
    let current = observed.and_then(|u| u.file.as_deref());
    let (wait, wait_why) = wait_ready(s);
    let start_why = format!("its {} GPUs are in place ({})", s.gpus.len(), place(s));
    // A failure counts only if it happened with the unit installed now.
    let failed = observed.is_some_and(|u| u.active_state == "failed" && !u.running_stale);
    let ChosenUnit {
        content,
        spec_content,
        spec_failed,
        rollback_to,
    } = chosen;
    if current != Some(content.as_str()) {
        let why = match current {
            None => "the unit does not exist yet".to_string(),
            Some(old) => format!(
                "the installed unit differs from the spec: {}",
                describe_change(old, &content)
            ),
        };
        p.push(
            Step::WriteUnit {
                unit: s.unit.clone(),
                content,
            },
            why,
        );
        let why = "systemd reads unit files only on daemon-reload";
        reload_start_wait(p, s, why, active, start_why, wait, wait_why);
    } else if observed.is_some_and(|u| u.needs_reload) {
        let why = "the unit file on disk is newer than what systemd loaded";
        reload_start_wait(p, s, why, active, start_why, wait, wait_why);
    } else if failed && content == spec_content && rollback_to.is_some() && !spec_failed {
        p.push(
            Step::MarkUnitFailed { unit: s.unit.clone(), hash: unit_hash(&spec_content) },
            "the new unit failed to start and rollback is Auto: remember it failed, then go back to the last unit that reached Ready",
        );
    } else if failed {
        // Same unit, and it failed: starting it again would fail the same way. A spec
        // change (new unit) or a manual `systemctl reset-failed` lets it go on.
        let u = observed.cloned().unwrap_or_default();
        p.block(
            crate::resource_key::ResourceKey::server_id(&s.id),
            Reason::Crashed,
            crash_message(s, &u),
        );
    } else if !active {
        p.push(
            Step::StartUnit {
                unit: s.unit.clone(),
                restart: false,
            },
            format!("the server is not running; {start_why}"),
        );
        p.push(wait, wait_why);
    } else if observed.is_some_and(|u| u.running_stale) {
        p.push(
            Step::StartUnit {
                unit: s.unit.clone(),
                restart: true,
            },
            "the running process was started from an older unit",
        );
        p.push(wait, wait_why);
    } else {
        let keep = content == spec_content;
        plan_running(p, s, content, keep, wait, wait_why);
    }
}

/// A running server: wait until it is Ready; once it is (rollback: Auto, running the spec's own
/// unit, `spec_unit`), keep a copy of its unit as the one to go back to.
fn plan_running(
    p: &mut Planner<'_>,
    s: &DesiredServer,
    content: String,
    spec_unit: bool,
    wait: Step,
    wait_why: String,
) {
    let observed = p.h.unit(&s.unit);
    let ready = observed.and_then(|u| u.server.as_ref()).is_some_and(|o| {
        o.http == HttpState::Healthy && o.models.iter().any(|m| m == &s.spec.model.served_name)
    });
    let auto = s.spec.rollback == gpuplane_crds::RollbackPolicy::Auto;
    let last_ready = observed.and_then(|u| u.last_ready.as_deref());
    // With a smoke test, a unit is good only once its answers were as expected.
    let smoke = observed
        .and_then(|u| u.server.as_ref())
        .and_then(|o| o.smoke.as_ref())
        .filter(|r| r.unit_hash == unit_hash(&content));
    let smoke_failures = smoke.map(|r| r.failures.clone()).unwrap_or_default();
    let good = s.spec.smoke_test.is_none() || smoke.is_some_and(|r| r.failures.is_empty());
    if !ready {
        p.push(wait, wait_why);
    } else if s.spec.smoke_test.is_some() && smoke.is_none() {
        p.push(
            wait,
            "the server is Ready; its smoke test runs beside the agent's observation (no host lock held) and decides whether this unit is good",
        );
    } else if !smoke_failures.is_empty() {
        if auto && spec_unit && last_ready.is_some_and(|r| r != content) {
            p.push(
                Step::MarkUnitFailed { unit: s.unit.clone(), hash: unit_hash(&content) },
                format!("the new unit failed its smoke test ({}) and rollback is Auto: remember it failed, then go back to the last unit that reached Ready", smoke_failures.join("; ")),
            );
        }
    } else if good && auto && spec_unit && last_ready != Some(content.as_str()) {
        let why = if s.spec.smoke_test.is_some() {
            "this unit reached Ready and passed its smoke test: keep it as the one to go back to"
        } else {
            "this unit reached Ready: keep it as the one to go back to"
        };
        p.push(
            Step::SaveReadyUnit {
                unit: s.unit.clone(),
                content,
            },
            why,
        );
    }
}

/// `Crashed`: the unit, its exit status and its last three log lines.
fn crash_message(s: &DesiredServer, u: &crate::host::model::Unit) -> String {
    format!(
        "{} failed (exit status {}); last log lines: {}",
        s.unit,
        u.exit_status
            .map(|e| e.to_string())
            .unwrap_or_else(|| "?".into()),
        crate::text::last_lines(&u.log_tail, 3)
    )
}

/// `daemon-reload`, then start (or restart what runs the old unit), then wait for readiness.
fn reload_start_wait(
    p: &mut Planner<'_>,
    s: &DesiredServer,
    reload_why: &str,
    active: bool,
    start_why: String,
    wait: Step,
    wait_why: String,
) {
    p.push(
        Step::DaemonReload {
            location: s.unit.location,
        },
        reload_why,
    );
    let why = if active {
        "the running server uses the old unit".to_string()
    } else {
        start_why
    };
    p.push(
        Step::StartUnit {
            unit: s.unit.clone(),
            restart: active,
        },
        why,
    );
    p.push(wait, wait_why);
}

/// SHA-256 of a unit's text, hex.
pub fn unit_hash(content: &str) -> String {
    crate::digest::sha256(content)
}

fn place(s: &DesiredServer) -> String {
    match s.unit.location {
        Location::Container(v) => format!("on nvidia, in container {v}"),
        Location::Host => "on nvidia".into(),
    }
}

/// A short description of how two rendered units differ: flags and environment changed, added,
/// removed. It goes into events and status, so an environment value (a token) is shown only
/// for the agent's own variables (`CUDA_VISIBLE_DEVICES`, ...); any other reads `(value hidden)`.
pub(super) fn describe_change(old: &str, new: &str) -> String {
    let pairs = |t: &str| -> Vec<(String, String)> {
        match unit::parse(t) {
            Ok(u) => {
                let mut v = flag_pairs(&u.exec_start);
                v.extend(
                    u.environment
                        .iter()
                        .map(|(k, val)| (format!("env {k}"), val.clone())),
                );
                v
            }
            Err(_) => vec![],
        }
    };
    let (o, n) = (pairs(old), pairs(new));
    let get = |v: &[(String, String)], k: &str| {
        v.iter().find(|(x, _)| x == k).map(|(_, val)| val.clone())
    };
    let mut parts = Vec::new();
    for (k, val) in &n {
        match get(&o, k) {
            Some(old_val) if &old_val != val && value_shown(k) => {
                parts.push(format!("{k} {old_val} -> {val}"))
            }
            Some(old_val) if &old_val != val => parts.push(format!("{k} changed")),
            Some(_) => {}
            None if value_shown(k) => parts.push(format!("added {k} {val}").trim_end().to_string()),
            None => parts.push(format!("added {k}")),
        }
    }
    for (k, _) in &o {
        if get(&n, k).is_none() {
            parts.push(format!("removed {k}"));
        }
    }
    if parts.is_empty() {
        "unit text changed".into()
    } else {
        parts.join("; ")
    }
}

/// Whether the plan may show the value of `key` (`--flag` or `env NAME`): flags and the
/// agent's own variables, never another variable's value.
fn value_shown(key: &str) -> bool {
    !command::is_secret_flag(key)
        && key
            .strip_prefix("env ")
            .is_none_or(|name| command::MANAGED_ENV.contains(&name))
}

/// argv as (`--flag`, value) pairs; switches have an empty value, the interpreter is `python`.
fn flag_pairs(argv: &[String]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, w) in argv.iter().enumerate() {
        if i == 0 {
            out.push(("python".into(), w.clone()));
        } else if w.starts_with("--") {
            out.push((w.clone(), String::new()));
        } else if let Some(last) = out
            .last_mut()
            .filter(|l| l.0.starts_with("--") && l.1.is_empty())
        {
            last.1 = w.clone();
        }
    }
    out
}
