//! Preflight as a gate: a server whose preflight failed stops the whole plan before its first
//! step that would stop, rebind or restart anything it needs, so the old server keeps serving.
//!
//! # Guarantees
//! - When a server the plan touches (stops or restarts its unit, stops its container, unbinds
//!   or re-targets one of its GPUs) failed preflight, the plan has no steps at all and carries
//!   a `PreflightFailed` blocker for the server (and the partition) naming every problem.
//! - A server the plan does not touch (it runs as specified) is never stopped because of its
//!   preflight: a note says what is wrong.
//! - Going back to the last unit that reached Ready (`rollback: Auto`) is never held up by the
//!   failing spec's preflight.
//! - Without facts (the backend cannot look: the container is stopped, the simulated host does
//!   not describe files) nothing is blocked, except by the driver versions below.
//! - Driver versions (issue 25): a container server whose container's NVIDIA userspace is not
//!   the host's loaded module version (`PreflightFailed`, naming both), or a host server on a
//!   host whose installed userspace is newer than the loaded module (`RebootRequired`), is
//!   blocked like a failed preflight: read while the old server still runs.

use super::{Blocker, Note, Plan, Reason, Step};
use crate::desired::preflight::judge;
use crate::desired::{Desired, DesiredServer};
use crate::host::model::{HostState, Location};

/// Blocks `plan` when a server it touches failed preflight or would meet a driver version that
/// is not its own.
pub(super) fn gate(d: &Desired, h: &HostState, plan: &mut Plan) {
    let mut failed = vec![];
    for s in &d.servers {
        let reboot = crate::desired::preflight::host_driver_stale(s, h);
        let drivers: Vec<String> = crate::desired::preflight::container_driver_mismatch(s, h)
            .into_iter()
            .chain(reboot.clone())
            .collect();
        let facts = h.preflight.get(&s.id);
        if facts.is_none() && drivers.is_empty() {
            // Said up front: the checks run only once the backend can look (a stopped
            // container's files are read through the container), after the teardown.
            if container_stopped(h, s) && plan.steps.iter().any(|p| p.step.is_write()) {
                plan.notes.push(Note {
                    resource: crate::resource_key::ResourceKey::server_id(&s.id),
                    reason: Reason::PreflightNotChecked,
                    message: "preflight could not be checked before the first write (its container is stopped, so its model and interpreter cannot be read yet); it is checked once the container runs, and a failure then stops the plan after the steps already made".into(),
                });
            }
            continue;
        }
        let mut problems = facts.map(|f| judge(s, f).problems).unwrap_or_default();
        problems.extend(drivers);
        if problems.is_empty() {
            continue;
        }
        let res = crate::resource_key::ResourceKey::server_id(&s.id);
        let message = format!(
            "preflight failed; the plan stops before any step that would stop, rebind or restart what this server needs: {}",
            problems.join("; ")
        );
        // A stale module is the host's, and only a reboot ends it: its own reason.
        let reason = if reboot.is_some() && problems.len() == 1 {
            Reason::RebootRequired
        } else {
            Reason::PreflightFailed
        };
        let rolling_back = plan
            .notes
            .iter()
            .any(|n| n.resource == res && n.reason == Reason::RolledBack);
        if touches(plan, s) && !rolling_back {
            failed.push(Blocker {
                resource: res,
                reason,
                message,
            });
        } else {
            plan.notes.push(Note {
                resource: res,
                reason,
                message: format!("{message} (the server runs as specified and is left alone)"),
            });
        }
    }
    if failed.is_empty() {
        return;
    }
    let names: Vec<String> = failed.iter().map(|b| b.resource.to_string()).collect();
    plan.steps.clear();
    plan.continues_after = None;
    // The servers' own blockers first: a server's status reads the first blocker that names it
    // or its partition.
    failed.append(&mut plan.blockers);
    plan.blockers = failed;
    plan.blockers.push(Blocker {
        resource: crate::resource_key::ResourceKey::partition(d.partition.name.as_str()),
        reason: Reason::PreflightFailed,
        message: format!(
            "{} failed preflight: the plan stops before changing what it needs",
            names.join(", ")
        ),
    });
}

/// Whether `s` runs in a container that is not running (its files cannot be read yet).
fn container_stopped(h: &HostState, s: &DesiredServer) -> bool {
    match s.unit.location {
        Location::Container(v) => h
            .containers
            .get(&v)
            .is_some_and(|c| c.state != crate::host::model::RunState::Running),
        Location::Host => false,
    }
}

/// Whether a step of `plan` stops, rebinds or restarts something `s` needs.
fn touches(plan: &Plan, s: &DesiredServer) -> bool {
    plan.steps.iter().any(|p| match &p.step {
        Step::StopUnit { unit } | Step::StartUnit { unit, .. } | Step::WriteUnit { unit, .. } => {
            *unit == s.unit
        }
        Step::StopContainer { vmid } => s.unit.location == Location::Container(*vmid),
        Step::Unbind { address, .. } | Step::SetDriverOverride { address, .. } => {
            s.gpus.contains(address)
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests;
