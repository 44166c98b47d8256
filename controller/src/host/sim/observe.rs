//! Observing the simulated host: the description read as the kernel, Proxmox and systemd would
//! show it, with the processes that hold each device.

use super::{parse_unit_key, server, SimHost};
use crate::host::model::*;
use crate::proxmox::lxc_conf::LxcConfig;
use crate::proxmox::pci_cfg::PciCfg;
use std::collections::{BTreeMap, BTreeSet};

impl SimHost {
    /// GPU addresses visible at `loc` on nvidia, sorted by address (CUDA PCI_BUS_ID order).
    pub(crate) fn visible_gpus(&self, loc: Location) -> Vec<String> {
        let mounted: Option<BTreeSet<u32>> = match loc {
            Location::Host => None,
            Location::Container(v) => Some(
                self.file
                    .containers
                    .get(&v)
                    .map(|c| LxcConfig::parse(&c.config).gpu_mounts().minors)
                    .unwrap_or_default(),
            ),
        };
        let mut v: Vec<String> = self
            .file
            .pci_devices
            .iter()
            .filter(|d| d.class.starts_with("03") && d.driver.as_deref() == Some("nvidia"))
            .filter(|d| match (&mounted, d.minor) {
                (None, _) => true,
                (Some(m), Some(n)) => m.contains(&n),
                (Some(_), None) => false,
            })
            .map(|d| d.address.clone())
            .collect();
        v.sort();
        v
    }

    pub(super) fn holders_of(&self, addr: &str) -> Vec<Holder> {
        let st = self.observe_inner();
        st.pci_devices
            .get(addr)
            .map(|d| d.holders.clone())
            .unwrap_or_default()
    }

    pub(super) fn observe_inner(&self) -> HostState {
        let f = &self.file;
        let mut st = HostState {
            node_name: f.node_name.clone(),
            pci_drivers: f.pci_drivers.clone(),
            iommu: f.iommu.clone(),
            nvidia: f.nvidia.clone(),
            vms: f.vms.clone(),
            p2p_probes: f.p2p_probes.clone(),
            ..HostState::default()
        };
        for d in &f.pci_devices {
            let on_nvidia = d.driver.as_deref() == Some("nvidia");
            st.pci_devices.insert(
                d.address.clone(),
                PciDevice {
                    address: d.address.clone(),
                    vendor: d.vendor.clone(),
                    device: d.device.clone(),
                    class: d.class.clone(),
                    subsystem: d.subsystem.clone(),
                    numa_node: d.numa_node,
                    iommu_group: d.iommu_group,
                    driver: d.driver.clone(),
                    driver_override: d.driver_override.clone(),
                    nvidia_minor: if on_nvidia { d.minor } else { None },
                    holders: vec![],
                },
            );
        }
        for (vmid, c) in &f.containers {
            st.containers.insert(
                *vmid,
                Container {
                    vmid: *vmid,
                    state: c.state,
                    gpu_mounts: LxcConfig::parse(&c.config).gpu_mounts(),
                    nvidia_userspace_version: c.nvidia_userspace_version.clone(),
                },
            );
        }
        let cfg = PciCfg::parse(&f.pci_cfg);
        for (name, entries) in cfg.mappings() {
            let mine: Vec<_> = entries
                .into_iter()
                .filter(|e| e.node == f.node_name)
                .collect();
            if !mine.is_empty() {
                st.pci_mappings.insert(name, mine);
            }
        }
        // Holders: described processes, running VMs on their vfio GPUs, running servers.
        let mut holders: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
        for h in &f.holders {
            holders
                .entry(h.address.clone())
                .or_default()
                .push(h.holder.clone());
        }
        for (vmid, vm) in &f.vms {
            if vm.state != RunState::Running {
                continue;
            }
            for m in &vm.pci_mappings {
                for e in st.pci_mappings.get(m).into_iter().flatten() {
                    for p in &e.paths {
                        if st
                            .pci_devices
                            .get(p)
                            .is_some_and(|d| d.driver.as_deref() == Some("vfio-pci"))
                        {
                            holders.entry(p.clone()).or_default().push(Holder {
                                pid: 4000 + vmid,
                                command: "kvm".into(),
                                vm: Some(*vmid),
                                ..Holder::default()
                            });
                        }
                    }
                }
            }
        }
        for (key, u) in &f.units {
            let Some(unit_ref) = parse_unit_key(key) else {
                continue;
            };
            let run = server::run(self, &unit_ref, u);
            if let Some(server::Running { gpus, .. }) = &run.running {
                for (i, g) in gpus.iter().enumerate() {
                    holders.entry(g.clone()).or_default().push(Holder {
                        pid: 10_000 + i as u32,
                        command: "python3".into(),
                        container: match unit_ref.location {
                            Location::Container(v) => Some(v),
                            Location::Host => None,
                        },
                        vm: None,
                        unit: match unit_ref.location {
                            Location::Host => Some(unit_ref.name.clone()),
                            Location::Container(_) => None,
                        },
                    });
                }
            }
            st.units.insert(key.clone(), run.unit);
        }
        for (addr, hs) in holders {
            if let Some(d) = st.pci_devices.get_mut(&addr) {
                d.holders = hs;
            }
        }
        st
    }
}
