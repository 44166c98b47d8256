//! Processes holding devices that must be rebound: our own consumers are stopped first; anything
//! else (a VM, a foreign container, a host process) refuses the whole plan with `GpuInUse`.

use super::Planner;
use crate::host::model::{Location, UnitRef};
use std::collections::{BTreeMap, BTreeSet};

/// Units to stop, by key: the unit and why.
pub(super) type StopUnits = BTreeMap<String, (UnitRef, String)>;

impl Planner<'_> {
    /// Checks every holder of every device in `moving` (address, destination, slice).
    pub(super) fn check_holders(
        &mut self,
        moving: &[(String, String, String)],
        stop_containers: &BTreeMap<u32, String>,
    ) -> StopUnits {
        let h = self.h;
        let server_units: BTreeSet<String> = self.d.servers.iter().map(|s| s.unit.key()).collect();
        let mut stop_units: BTreeMap<String, (UnitRef, String)> = BTreeMap::new();
        for (addr, to, slice) in moving {
            let Some(dev) = h.pci_devices.get(addr) else {
                continue;
            };
            if dev.driver.is_none() {
                continue;
            }
            for holder in &dev.holders {
                let ok = match (holder.container, holder.vm, &holder.unit) {
                    (Some(c), _, _) => stop_containers.contains_key(&c),
                    (None, None, Some(u)) => {
                        let r = UnitRef {
                            location: Location::Host,
                            name: u.clone(),
                        };
                        if server_units.contains(&r.key()) {
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
                        format!("container {c} is not a consumer in this partition; stop it or remove the GPU from it")
                    } else {
                        "stop that process first".to_string()
                    };
                    let msg = format!("{addr} must move from {} to {to} for slice {slice}, but {holder} holds it; {fix}", dev.driver.as_deref().unwrap_or("none"));
                    self.block(self.resource(), "GpuInUse", msg);
                }
            }
        }
        stop_units
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
