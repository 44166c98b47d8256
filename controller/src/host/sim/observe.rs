//! Observing the simulated host: the description read as the kernel, Proxmox and systemd would
//! show it, with the processes that hold each device.

use super::{server, SimContainer, SimDevice, SimHost};
use crate::host::model::*;
use crate::proxmox::lxc_conf::LxcConfig;
use crate::proxmox::pci_cfg::{MapEntry, PciCfg};
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
                    .map(|c| c.visible_minors())
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

    /// The holders of the device at `addr`, as an observation shows them.
    pub(super) fn holders_of(&self, addr: &str) -> Vec<Holder> {
        let st = self.observe_inner();
        st.pci_devices
            .get(addr)
            .map(|d| d.holders.clone())
            .unwrap_or_default()
    }

    /// The whole host, as observing a real one would show it.
    pub(super) fn observe_inner(&self) -> HostState {
        let f = &self.file;
        let mut st = HostState {
            node_name: f.node_name.clone(),
            pci_drivers: f.pci_drivers.clone(),
            iommu: f.iommu.clone(),
            nvidia: f.nvidia.clone(),
            confidential: f.confidential.clone(),
            boot: f.boot.as_ref().map(|b| b.observed()).unwrap_or_default(),
            vms: f.vms.clone(),
            p2p_probes: f.p2p_probes.clone(),
            gpu_ledger: f.gpu_ledger.clone(),
            gpu_events: crate::host::health::parse_gpu_events(&f.kernel_log.join("\n")),
            pci_devices: f
                .pci_devices
                .iter()
                .map(|d| (d.address.clone(), d.observed()))
                .collect(),
            containers: f
                .containers
                .iter()
                .map(|(vmid, c)| (*vmid, c.observed(*vmid, &self.memo)))
                .collect(),
            pci_mappings: node_mappings(&self.memo, &f.pci_cfg, &f.node_name),
            ..HostState::default()
        };
        // vfio-pci reads its module parameters from the kernel command line when it loads, as
        // the real kernel's modprobe does: a boot with vfio-pci.disable_idle_d3=1 shows it.
        if let Some(b) = &f.boot {
            let words = crate::bootloader::running_args(&b.cmdline);
            if words.iter().any(|w| {
                matches!(
                    w.as_str(),
                    "vfio-pci.disable_idle_d3=1"
                        | "vfio_pci.disable_idle_d3=1"
                        | "vfio-pci.disable_idle_d3=Y"
                        | "vfio_pci.disable_idle_d3=Y"
                )
            }) {
                st.confidential.vfio_disable_idle_d3 = Some(true);
            }
        }
        // Holders: described processes, running VMs on their vfio GPUs, running servers.
        let mut holders = self.described_holders();
        self.add_vm_holders(&st, &mut holders);
        self.observe_units(&mut st, &mut holders);
        for (addr, hs) in holders {
            if let Some(d) = st.pci_devices.get_mut(&addr) {
                d.holders = hs;
            }
        }
        st.preflight = self.observe_preflight();
        self.observe_smoke(&mut st);
        st
    }

    /// The processes the description lists, by device address.
    fn described_holders(&self) -> BTreeMap<String, Vec<Holder>> {
        let mut holders: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
        for h in &self.file.holders {
            holders
                .entry(h.address.clone())
                .or_default()
                .push(h.holder.clone());
        }
        holders
    }

    /// Each running VM holds the vfio-bound devices of the mappings it uses.
    fn add_vm_holders(&self, st: &HostState, holders: &mut BTreeMap<String, Vec<Holder>>) {
        for (vmid, vm) in &self.file.vms {
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
    }

    /// Plays every unit into `st`; a running server holds its GPUs.
    fn observe_units(&self, st: &mut HostState, holders: &mut BTreeMap<String, Vec<Holder>>) {
        for (key, u) in &self.file.units {
            let Some(unit_ref) = UnitRef::from_key(key) else {
                continue;
            };
            let run = server::run(self, &unit_ref, u);
            if let Some(server::Running { gpus, .. }) = &run.running {
                for (i, g) in gpus.iter().enumerate() {
                    holders
                        .entry(g.clone())
                        .or_default()
                        .push(server_holder(&unit_ref, i));
                }
                // A running server listens on its `--port` where it runs.
                if let Some(port) = u
                    .running
                    .as_deref()
                    .and_then(|t| listen_port(&self.memo, t))
                {
                    st.listening
                        .entry(unit_ref.location.key())
                        .or_default()
                        .insert(port);
                }
            }
            st.units.insert(key.clone(), run.unit);
        }
    }
}

/// The `--port` of the SGLang launch in unit file `text`.
fn listen_port(memo: &super::memo::Memos, text: &str) -> Option<u16> {
    let parsed = memo.unit(text);
    let argv = &Result::as_ref(&parsed).ok()?.exec_start;
    argv.windows(2)
        .find(|w| w[0] == "--port")
        .and_then(|w| w[1].parse().ok())
}

/// The process of rank `i` of the server that `unit_ref` runs.
fn server_holder(unit_ref: &UnitRef, i: usize) -> Holder {
    Holder {
        pid: 10_000 + i as u32,
        command: "python3".into(),
        container: match unit_ref.location {
            Location::Container(v) => Some(v),
            Location::Host => None,
        },
        vm: None,
        // The unit where it runs: the host's, or the container's own systemd's.
        unit: Some(unit_ref.name.clone()),
    }
}

/// This node's entries of each mapping in `pci.cfg` (mappings without any left out).
fn node_mappings(
    memo: &super::memo::Memos,
    pci_cfg: &str,
    node_name: &str,
) -> BTreeMap<String, Vec<MapEntry>> {
    let mut out = BTreeMap::new();
    let all = memo.pci_cfg.get(pci_cfg, |t| PciCfg::parse(t).mappings());
    for (name, entries) in all.iter() {
        let mine: Vec<_> = entries
            .iter()
            .filter(|e| e.node == node_name)
            .cloned()
            .collect();
        if !mine.is_empty() {
            out.insert(name.clone(), mine);
        }
    }
    out
}

impl SimDevice {
    /// The device as sysfs shows it (the nvidia minor only while bound to nvidia).
    fn observed(&self) -> PciDevice {
        PciDevice {
            address: self.address.clone(),
            vendor: self.vendor.clone(),
            device: self.device.clone(),
            class: self.class.clone(),
            subsystem: self.subsystem.clone(),
            numa_node: self.numa_node,
            iommu_group: self.iommu_group,
            driver: self.driver.clone(),
            driver_override: self.driver_override.clone(),
            nvidia_minor: self.nvidia_minor(),
            holders: vec![],
            // The driver's counters are read through the driver: only on nvidia.
            health: crate::host::health::PcieHealth {
                ecc: self
                    .health
                    .ecc
                    .filter(|_| self.driver.as_deref() == Some("nvidia")),
                ..self.health.clone()
            },
            identity: {
                let mut id = self.identity.clone();
                if self.driver.as_deref() != Some("nvidia") || self.health.not_responding {
                    (id.uuid, id.serial) = (None, None);
                }
                id
            },
        }
    }
}

impl SimContainer {
    /// The container as Proxmox shows it: its state and the GPU lines of its config.
    fn observed(&self, vmid: u32, memo: &super::memo::Memos) -> Container {
        let parsed = memo.containers.get(&self.config, |t| {
            let config = LxcConfig::parse(t);
            (config.gpu_mounts(), config.unprivileged())
        });
        Container {
            vmid,
            state: self.state,
            gpu_mounts: parsed.0.clone(),
            nvidia_userspace_version: self.nvidia_userspace_version.clone(),
            privileged: !parsed.1,
        }
    }
}
