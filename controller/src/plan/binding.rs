//! Driver binding the way the kernel intends: load the driver if needed, `driver_override`,
//! `unbind`, `drivers_probe` (never `new_id`, which would capture every GPU with the same ID).
//! GPUs that stay are pinned with `driver_override` so a VM start cannot take them.

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
                let why = if wants_rebind {
                    format!("slice {} wants {}; driver_override makes the probe pick exactly this driver for this device (new_id would capture every GPU with the same ID)", t.slice, t.driver)
                } else {
                    format!(
                        "pins {addr} to {} for slice {}, so a VM start cannot take it",
                        t.driver, t.slice
                    )
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
                        format!(
                            "{addr} is bound to {cur}, slice {} wants {}",
                            t.slice, t.driver
                        ),
                    );
                }
                self.push(
                    Step::Probe {
                        address: addr.clone(),
                    },
                    format!("bind {addr} to {} through its driver_override", t.driver),
                );
            }
        }
    }
}
