//! Processes holding devices that must be rebound: our own servers are stopped first (on the
//! host, or inside a consumer container that stops); anything else (a VM, a foreign container,
//! a host process, a tenant's process inside a consumer container) refuses the whole plan with
//! `GpuInUse`.
//!
//! # Why a process inside our own consumer container still blocks
//! Stopping the container would end it, and with it whatever a tenant runs there (a notebook, a
//! training job) on a GPU it was given. The agent ends only what it runs: a server unit of this
//! partition (or one its slice adopts). A holder is found through the host's `/proc` across
//! the container's PID namespace; its cgroup names the container and, under the container's own
//! systemd, its unit.

use super::{Planner, Reason};
use crate::host::model::{Location, UnitRef};
use std::collections::{BTreeMap, BTreeSet};

/// Units to stop, by key: the unit and why.
pub(super) type StopUnits = BTreeMap<String, (UnitRef, String)>;

impl Planner<'_> {
    /// Checks every holder of every device in `moving` (address, destination, slice).
    pub(super) fn check_holders(
        &mut self,
        moving: &[(&str, &str, &str)],
        stop_containers: &BTreeMap<u32, String>,
    ) -> StopUnits {
        let h = self.h;
        // Made only when a unit on the host holds a moving GPU (the rare case), not every plan.
        let server_units = std::cell::OnceCell::<BTreeSet<String>>::new();
        let server_units =
            || server_units.get_or_init(|| self.d.servers.iter().map(|s| s.unit.key()).collect());
        let mut stop_units: BTreeMap<String, (UnitRef, String)> = BTreeMap::new();
        for (addr, to, slice) in moving {
            let Some(dev) = h.pci_devices.get(*addr) else {
                continue;
            };
            if dev.driver.is_none() {
                continue;
            }
            for holder in &dev.holders {
                let ok = match (holder.container, holder.vm, &holder.unit) {
                    (Some(c), _, _) => {
                        stop_containers.contains_key(&c) && self.is_our_server(holder)
                    }
                    (None, None, Some(u)) => {
                        let r = UnitRef {
                            location: Location::Host,
                            name: u.clone(),
                        };
                        if server_units().contains(&r.key()) {
                            stop_units.insert(
                                r.key(),
                                (r, format!("it holds {addr}, which moves to {to}")),
                            );
                            true
                        } else {
                            false
                        }
                    }
                    _ => false,
                };
                if !ok {
                    let fix = if let Some(v) = holder.vm {
                        format!("stop VM {v} first (the agent never stops VMs)")
                    } else if let Some(c) = holder.container {
                        if stop_containers.contains_key(&c) {
                            format!("that process is not a server the agent runs; stop it inside container {c} first (the agent stops only its own servers, never a tenant's process)")
                        } else {
                            format!("container {c} is not a consumer in this partition; stop it or remove the GPU from it")
                        }
                    } else {
                        "stop that process first".to_string()
                    };
                    let msg = format!("{addr} must move from {} to {to} for slice {slice}, but {holder} holds it; {fix}", dev.driver.as_deref().unwrap_or("none"));
                    self.block(self.resource(), Reason::GpuInUse, msg);
                }
            }
        }
        stop_units
    }

    /// Whether `holder` runs in a server unit the agent may stop where it runs (the host's
    /// systemd or its container's own): a server's unit, a unit the agent wrote, or one the
    /// admin of the slice that consumes the container lets it adopt (`servers.adoptUnits`).
    fn is_our_server(&self, holder: &crate::host::model::Holder) -> bool {
        let Some(r) = holder.unit_ref() else {
            return false;
        };
        let key = r.key();
        if self.d.servers.iter().any(|s| s.unit.key() == key)
            || self
                .h
                .units
                .get(&key)
                .is_some_and(|u| self.may_touch(&key, u))
        {
            return true;
        }
        let Location::Container(vmid) = r.location else {
            return false;
        };
        self.d.partition.slices.iter().any(|s| {
            matches!(s.consumer, Some(crate::desired::ResolvedConsumer::Lxc(v)) if v == vmid)
                && crate::desired::tenancy::adopted(s, &r.name)
        })
    }

    /// Whether the agent may stop or change unit `key`: it wrote the file (header), or a
    /// server's slice adopts it.
    fn may_touch(&self, key: &str, u: &crate::host::model::Unit) -> bool {
        u.file
            .as_deref()
            .is_some_and(crate::systemd::unit::is_managed)
            || self
                .d
                .servers
                .iter()
                .any(|s| s.adopt && s.unit.key() == key)
    }

    /// Active units inside containers that stop are stopped first, gracefully: those the agent
    /// wrote (header) or was let adopt. Any other unit is left to the container's own shutdown.
    pub(super) fn stop_units_in(
        &self,
        stop_containers: &BTreeMap<u32, String>,
        stop_units: &mut StopUnits,
    ) {
        for vmid in stop_containers.keys() {
            for (key, u) in &self.h.units {
                if key.starts_with(&format!("lxc-{vmid}/"))
                    && u.is_active()
                    && self.may_touch(key, u)
                {
                    if let Some(name) = key.split_once('/').map(|(_, n)| n.to_string()) {
                        let r = UnitRef {
                            location: Location::Container(*vmid),
                            name,
                        };
                        stop_units.insert(
                            r.key(),
                            (
                                r,
                                format!("container {vmid} must stop, so its server stops first"),
                            ),
                        );
                    }
                }
            }
        }
    }
}
