//! No two servers on one GPU or port: before a server's unit is written or started, every process
//! that holds one of its GPUs and looks like a server (a Python or SGLang process) must be its
//! own unit's, or one the plan stops for good. An older unit the agent wrote for the same server
//! (renamed, or moved between a container and the host) is stopped and removed first. Anything
//! else blocks that server, naming the holder: a unit of another server, a hand-started SGLang.
//!
//! Why a command test: a GPU host also has processes that hold every GPU and are no server
//! (`nvidia-persistenced`, monitoring agents); they do not take GPU memory a server needs and
//! must not block it. Rebinding a GPU is stricter: there every holder counts (`holders.rs`).
//!
//! # Caveats
//! The port: a server whose own unit is not running is blocked (`PortInUse`) when its port is
//! listened on where it runs (the host's network namespace, or its container's), whatever the
//! address. An older unit is found through the GPUs its processes hold, or, stopped, through its
//! file: every managed unit file of the host is observed, but in a container only the units the
//! agent watches there, so a stopped older unit inside a container is found only once it runs
//! again (then through its GPUs). A kill between its stop and its removal (one step) leaves its
//! file, which the next run finds and removes.

use super::{Planner, Reason, Step};
use crate::desired::DesiredServer;
use crate::host::model::{Holder, Location, UnitRef};
use crate::sglang::command;
use crate::systemd::unit;
use std::collections::BTreeMap;

/// Whether a holder looks like an inference server (SGLang's processes are Python, and its
/// schedulers rename themselves `sglang::scheduler...`).
fn looks_like_a_server(h: &Holder) -> bool {
    let c = h.command.to_ascii_lowercase();
    c.starts_with("python") || c.starts_with("sglang")
}

/// `x.service` and `x` are one unit.
fn same_unit(a: &str, b: &str) -> bool {
    a.strip_suffix(".service").unwrap_or(a) == b.strip_suffix(".service").unwrap_or(b)
}

impl Planner<'_> {
    /// Blocks `s` when another server holds one of its GPUs; `true` when it did.
    pub(super) fn block_if_occupied(&mut self, s: &DesiredServer) -> bool {
        let h = self.h;
        // Who holds which of the server's GPUs: by unit where known, else by process.
        let mut by_who: BTreeMap<String, (Vec<u32>, Vec<&str>)> = BTreeMap::new();
        let mut old_units: Vec<UnitRef> = Vec::new();
        for g in &s.gpus {
            let Some(dev) = h.pci_devices.get(g) else {
                continue;
            };
            for holder in dev.holders.iter().filter(|x| looks_like_a_server(x)) {
                if self.own(s, holder) || self.goes_away(holder) {
                    continue;
                }
                if let Some(r) = self.older_unit_of(s, holder) {
                    if !old_units.contains(&r) {
                        old_units.push(r);
                    }
                    continue;
                }
                let e = by_who.entry(who(holder)).or_default();
                if !e.0.contains(&holder.pid) {
                    e.0.push(holder.pid);
                }
                if !e.1.contains(&g.as_str()) {
                    e.1.push(g);
                }
            }
        }
        for r in self.older_units_of(s) {
            if !old_units.contains(&r) {
                old_units.push(r);
            }
        }
        if by_who.is_empty() && old_units.is_empty() && self.port_taken(s) {
            return true;
        }
        if by_who.is_empty() {
            for r in old_units {
                let why = format!(
                    "it is an older unit of InferenceServer {} (renamed or moved): it would run on the GPUs {} needs",
                    s.id, s.unit.name
                );
                // One step: the unit is observed through the GPUs it holds, so once stopped
                // it would be out of sight; removing stops it first.
                self.push(Step::RemoveUnit { unit: r }, why);
            }
            return false;
        }
        let said: Vec<String> = by_who
            .iter()
            .take(4)
            .map(|(who, (pids, gpus))| {
                let pids: Vec<String> = pids.iter().take(8).map(u32::to_string).collect();
                format!("{who} (pid {}) holds {}", pids.join(", "), gpus.join(", "))
            })
            .collect();
        self.block(
            crate::resource_key::ResourceKey::server_id(&s.id),
            Reason::GpuInUse,
            format!(
                "another server runs on this server's GPUs: {}; the agent starts {} only once it has them alone: stop and disable that server (an old unit left after a rename, or one in a container that no longer consumes the slice), or delete the InferenceServer that runs it",
                said.join("; "),
                s.unit.name
            ),
        );
        true
    }

    /// Blocks `s` when its port is listened on where it runs while its own unit is not running
    /// (so another program holds it: SGLang would fail to bind, or a client would reach the
    /// other program). `true` when it did.
    fn port_taken(&mut self, s: &DesiredServer) -> bool {
        let h = self.h;
        let port = s.spec.listen.port;
        let own_runs = h.unit(&s.unit).is_some_and(|u| u.is_active());
        let taken = h
            .listening
            .get(&s.unit.location.key())
            .is_some_and(|p| p.contains(&port));
        if own_runs || !taken {
            return false;
        }
        self.block(
            crate::resource_key::ResourceKey::server_id(&s.id),
            Reason::PortInUse,
            format!(
                "port {port} is already listened on ({}), and not by {}, which is not running: stop the program that holds it, or give this server another spec.listen.port",
                s.unit.location, s.unit.name
            ),
        );
        true
    }

    /// The holder's unit, when it is one the agent wrote for `s` itself under another name or
    /// in another place (its header, and `s`'s id in its description): the agent removes it.
    fn older_unit_of(&self, s: &DesiredServer, holder: &Holder) -> Option<UnitRef> {
        let r = holder.unit_ref()?;
        let file = self.h.unit(&r)?.file.as_deref()?;
        self.is_older_unit(s, &r, file).then_some(r)
    }

    /// Whether unit `r`, whose file is `file`, is one the agent wrote for `s` (its header, and
    /// `s`'s id in its description) that is no server's desired unit now.
    fn is_older_unit(&self, s: &DesiredServer, r: &UnitRef, file: &str) -> bool {
        // The unit file is parsed last: most units are some server's desired unit.
        unit::is_managed(file)
            && !self.d.servers.iter().any(|o| o.unit == *r)
            && command::written_for(file, &s.id)
    }

    /// Every older unit of `s` whose file the observation shows, holding GPUs or not (a unit
    /// of a deleted server is left to its own removal): one that holds none (stopped, failed)
    /// would start beside the new unit at the next boot or container start. Seen where the
    /// observation lists unit files: every managed unit file of the host, and the watched units
    /// of running containers.
    fn older_units_of(&self, s: &DesiredServer) -> Vec<UnitRef> {
        self.h
            .units
            .iter()
            .filter_map(|(key, u)| {
                let r = UnitRef::from_key(key)?;
                let older = self.is_older_unit(s, &r, u.file.as_deref()?);
                (older && !self.d.removed_units.contains(&r)).then_some(r)
            })
            .collect()
    }

    /// The holder is a process of `s`'s own unit, where it runs.
    fn own(&self, s: &DesiredServer, holder: &Holder) -> bool {
        holder
            .unit_ref()
            .is_some_and(|r| r.location == s.unit.location && same_unit(&r.name, &s.unit.name))
    }

    /// The plan stops the holder for good: its host unit is stopped, or its container is
    /// stopped and not started again.
    fn goes_away(&self, holder: &Holder) -> bool {
        let steps = &self.plan.steps;
        match (holder.container, &holder.unit) {
            (Some(c), _) => {
                steps.iter().any(|p| p.step == Step::StopContainer { vmid: c })
                    && !steps.iter().any(|p| p.step == Step::StartContainer { vmid: c })
            }
            (None, Some(u)) => steps.iter().any(|p| {
                matches!(&p.step, Step::StopUnit { unit } if unit.location == Location::Host && same_unit(&unit.name, u))
            }),
            (None, None) => false,
        }
    }
}

/// A holder's unit and place (`unit sglang-qwen.service in container 129`), or its command.
fn who(h: &Holder) -> String {
    let place = match (h.container, h.vm) {
        (Some(c), _) => format!(" in container {c}"),
        (None, Some(v)) => format!(" of VM {v}"),
        (None, None) => " on the host".to_string(),
    };
    match &h.unit {
        Some(u) => format!("unit {u}{place}"),
        None => format!("{}{place}", h.command),
    }
}
