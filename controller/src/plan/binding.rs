//! Driver binding the way the kernel intends: load the driver if needed, `driver_override`,
//! `unbind`, `drivers_probe` (never `new_id`, which would capture every GPU with the same ID).
//! GPUs that stay are pinned with `driver_override` so a VM start cannot take them.
//!
//! The steps' reasons are joined with `concat` rather than `format!`: up to three per GPU and
//! plan, and `format!`'s machinery cost several times the copy (issue 41, part 3).

use super::{GpuTarget, Planner, Step};
use std::collections::{BTreeMap, BTreeSet};

impl Planner<'_> {
    pub(super) fn plan_bindings(
        &mut self,
        targets: &BTreeMap<String, GpuTarget>,
        rebind: &[(&String, &GpuTarget)],
    ) {
        let h = self.h;
        let needed: BTreeSet<&str> = rebind.iter().map(|(_, t)| t.driver.as_str()).collect();
        for driver in needed {
            if !h.pci_drivers.contains(driver) {
                self.push(
                    Step::LoadDriver {
                        driver: driver.into(),
                    },
                    format!("no PCI driver {driver} is registered, and GPUs must bind to it"),
                );
            }
        }
        for (addr, t) in targets {
            let Some(dev) = h.pci_devices.get(addr) else {
                continue;
            };
            let wants_rebind = dev.driver.as_deref() != Some(t.driver.as_str());
            if dev.driver_override.as_deref() != Some(t.driver.as_str()) {
                let (slice, driver) = (t.slice.as_str(), t.driver.as_str());
                let why = if wants_rebind {
                    ["slice ", slice, " wants ", driver, "; driver_override makes the probe pick exactly this driver for this device (new_id would capture every GPU with the same ID)"].concat()
                } else {
                    [
                        "pins ",
                        addr,
                        " to ",
                        driver,
                        " for slice ",
                        slice,
                        ", so a VM start cannot take it",
                    ]
                    .concat()
                };
                self.push(
                    Step::SetDriverOverride {
                        address: addr.clone(),
                        driver: Some(t.driver.clone()),
                    },
                    why,
                );
            }
            if wants_rebind {
                if let Some(cur) = &dev.driver {
                    self.push(
                        Step::Unbind {
                            address: addr.clone(),
                            driver: cur.clone(),
                        },
                        [
                            addr,
                            " is bound to ",
                            cur,
                            ", slice ",
                            &t.slice,
                            " wants ",
                            &t.driver,
                        ]
                        .concat(),
                    );
                }
                self.push(
                    Step::Probe {
                        address: addr.clone(),
                    },
                    [
                        "bind ",
                        addr,
                        " to ",
                        &t.driver,
                        " through its driver_override",
                    ]
                    .concat(),
                );
            }
        }
    }
}
