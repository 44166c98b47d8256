//! Property tests of the whole loop on random simulated hosts and valid specs:
//! converge terminates, the result satisfies the spec, a second plan is empty and a
//! second converge makes zero writes, and no step is unsafe on the way (a GPU unbound
//! while held, a server started before its GPUs are in place).

use gpuplane::converge::{converge, Options, Stop};
use gpuplane::desired::{resolve_partition, resolve_server, Desired};
use gpuplane::door::Door;
use gpuplane::host::model::Holder;
use gpuplane::host::model::{HostState, Location, RunState};
use gpuplane::host::sim::{
    Behaviour, SimContainer, SimDevice, SimHolder, SimHost, SimHostFile, SimUnit,
};
use gpuplane::host::{Host, HostError, StepOutcome};
use gpuplane::plan::{plan, Step};
use gpuplane::proxmox::lxc_conf::{DesiredGpuMounts, LxcConfig, MountStyle};
use gpuplane::proxmox::pci_cfg::{MapEntry, PciCfg};
use gpuplane_crds::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// A host wrapper that records safety violations before each step reaches the host.
struct Checked {
    inner: SimHost,
    violations: Vec<String>,
    desired: Desired,
}

impl Host for Checked {
    fn observe(&mut self) -> Result<HostState, HostError> {
        self.inner.observe()
    }
    fn apply(&mut self, step: &Step) -> Result<StepOutcome, HostError> {
        let st = self.inner.observe()?;
        match step {
            Step::Unbind { address, driver } => {
                let d = &st.pci_devices[address];
                if d.driver.as_deref() == Some(driver.as_str()) && !d.holders.is_empty() {
                    self.violations
                        .push(format!("unbind of held {address}: {:?}", d.holders));
                }
            }
            Step::StartUnit { unit, .. } => {
                for s in self.desired.servers.iter().filter(|s| &s.unit == unit) {
                    for g in &s.gpus {
                        let d = &st.pci_devices[g];
                        let ok = d.driver.as_deref() == Some("nvidia")
                            && match unit.location {
                                Location::Container(v) => {
                                    st.containers[&v].state == RunState::Running
                                        && d.nvidia_minor.is_some_and(|m| {
                                            st.containers[&v].gpu_mounts.minors.contains(&m)
                                        })
                                }
                                Location::Host => true,
                            };
                        if !ok {
                            self.violations
                                .push(format!("{unit} started before GPU {g} was in place"));
                        }
                    }
                }
            }
            _ => {}
        }
        self.inner.apply(step)
    }
    fn sleep(&mut self, secs: u64) {
        self.inner.sleep(secs)
    }
    fn now(&self) -> u64 {
        self.inner.now()
    }
}

#[derive(Debug, Clone)]
struct Case {
    gpus: Vec<(i32, Option<&'static str>, Option<&'static str>)>,
    vfio_loaded: bool,
    container_running: bool,
    mounted: Vec<bool>,
    devn_style: bool,
    old_unit: Option<(u32, bool, bool)>,
    old_mapping: Vec<bool>,
    translated: bool,
    corrupt: bool,
    container_numa: i32,
    vm_slice: bool,
    tp: u32,
    policy: P2pPolicy,
    holder: Option<usize>,
    vm_running: bool,
    /// Per GPU: 0 no audio function, 1 audio on snd_hda_intel, 2 audio on vfio-pci (pinned).
    audio: Vec<u8>,
}

fn case() -> impl Strategy<Value = Case> {
    let driver = prop_oneof![Just(Some("nvidia")), Just(Some("vfio-pci")), Just(None)];
    let ovr = prop_oneof![Just(None), Just(Some("nvidia")), Just(Some("vfio-pci"))];
    (
        prop::collection::vec((0..2i32, driver, ovr), 2..=8),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(any::<bool>(), 8),
        any::<bool>(),
        prop::option::of((1..=8u32, any::<bool>(), any::<bool>())),
        prop::collection::vec(any::<bool>(), 8),
        (any::<bool>(), any::<bool>(), 0..2i32, any::<bool>()),
        (
            1..=4u32,
            prop_oneof![
                Just(P2pPolicy::Auto),
                Just(P2pPolicy::Disabled),
                Just(P2pPolicy::Enabled)
            ],
        ),
        (
            prop::option::weighted(0.15, 0..8usize),
            prop::bool::weighted(0.15),
        ),
        prop::collection::vec(0..3u8, 8),
    )
        .prop_map(
            |(
                gpus,
                vfio_loaded,
                container_running,
                mounted,
                devn_style,
                old_unit,
                old_mapping,
                (translated, corrupt, container_numa, vm_slice),
                (tp, policy),
                (holder, vm_running),
                audio,
            )| Case {
                gpus,
                vfio_loaded,
                container_running,
                mounted,
                devn_style,
                old_unit,
                old_mapping,
                translated,
                corrupt,
                container_numa,
                vm_slice,
                tp,
                policy,
                holder,
                vm_running,
                audio,
            },
        )
}

fn addr(i: usize) -> String {
    format!("0000:{:02x}:00.0", 0x10 * i + 1)
}

const BASE_CT: &str = "arch: amd64\n# the inference box\nhostname: ct\nmemory: 65536\nlxc.cgroup2.cpuset.cpus: 0-7\n\n[snap1]\narch: amd64\nhostname: ct\n";

fn build(c: &Case) -> Option<(SimHost, GpuPartition, InferenceServer)> {
    let n = c.gpus.len();
    let numa_of = |i: usize| c.gpus[i].0;
    let container_gpus: Vec<usize> = (0..n).filter(|i| numa_of(*i) == c.container_numa).collect();
    if container_gpus.is_empty() {
        return None;
    }
    let devices = (0..n)
        .map(|i| SimDevice {
            address: addr(i),
            vendor: "10de".into(),
            device: "2bb5".into(),
            class: "030200".into(),
            subsystem: Some("10de:204e".into()),
            numa_node: numa_of(i),
            iommu_group: Some(20 + i as u32),
            driver: c.gpus[i]
                .1
                .filter(|d| *d != "vfio-pci" || c.vfio_loaded)
                .map(str::to_string),
            driver_override: c.gpus[i].2.map(str::to_string),
            default_driver: None,
            minor: Some(i as u32),
            identity: Default::default(),
            health: Default::default(),
        })
        .chain((0..n).filter(|i| c.audio[*i] > 0).map(|i| {
            SimDevice {
                address: addr(i).replace(".0", ".1"),
                vendor: "10de".into(),
                device: "22e8".into(),
                class: "040300".into(),
                subsystem: None,
                numa_node: numa_of(i),
                iommu_group: Some(20 + i as u32),
                driver: Some(
                    if c.audio[i] == 2 && c.vfio_loaded {
                        "vfio-pci"
                    } else {
                        "snd_hda_intel"
                    }
                    .to_string(),
                ),
                driver_override: (c.audio[i] == 2).then(|| "vfio-pci".to_string()),
                default_driver: Some("snd_hda_intel".into()),
                minor: None,
                identity: Default::default(),
                health: Default::default(),
            }
        }))
        .collect::<Vec<_>>();
    let minors: BTreeSet<u32> = (0..n).filter(|i| c.mounted[*i]).map(|i| i as u32).collect();
    let mut cfg = LxcConfig::parse(BASE_CT);
    cfg.set_gpu_mounts(&DesiredGpuMounts {
        minors,
        uvm_major: 511,
        default_style: if c.devn_style {
            MountStyle::DevN
        } else {
            MountStyle::MountEntry
        },
    });
    let mut pci = PciCfg::parse("other\n\tmap id=8086:1520,node=h1,path=0000:07:10.0\n\n");
    let old: Vec<MapEntry> = (0..n)
        .filter(|i| c.old_mapping[*i])
        .map(|i| MapEntry {
            node: "h1".into(),
            id: "10de:2bb5".into(),
            paths: vec![addr(i)],
            iommugroup: Some(20 + i as u32),
            subsystem_id: Some("10de:204e".into()),
            description: None,
        })
        .collect();
    pci.set_node_entries("old-pool", "h1", &old);
    let mut units = BTreeMap::new();
    if let Some((tp, p2p_off, running)) = c.old_unit {
        let mut argv = vec![
            "/venv/bin/python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/m/old",
            "--tp-size",
        ];
        let tps = tp.to_string();
        argv.push(&tps);
        if p2p_off {
            argv.push("--disable-custom-all-reduce");
        }
        let text = gpuplane::systemd::unit::render(&gpuplane::systemd::unit::UnitSpec {
            description: "old".into(),
            exec_start: argv.iter().map(|s| s.to_string()).collect(),
            environment: if p2p_off {
                vec![("NCCL_P2P_DISABLE".into(), "1".into())]
            } else {
                vec![]
            },
            ..Default::default()
        })
        .ok()?;
        units.insert(
            "lxc-129/sglang.service".to_string(),
            SimUnit {
                file: Some(text.clone()),
                loaded: Some(text.clone()),
                started_at: (running && c.container_running).then_some(0),
                running: (running && c.container_running).then_some(text),
                ..SimUnit::default()
            },
        );
    }
    let mut group_types = BTreeMap::new();
    for i in 0..n {
        group_types.insert(
            20 + i as u32,
            if c.translated { "DMA-FQ" } else { "identity" }.to_string(),
        );
    }
    let mut drivers: BTreeSet<String> = ["nvidia".to_string(), "snd_hda_intel".to_string()].into();
    if c.vfio_loaded {
        drivers.insert("vfio-pci".into());
    }
    let holders = c
        .holder
        .filter(|h| *h < n)
        .map(|h| SimHolder {
            address: addr(h),
            holder: Holder {
                pid: 99,
                command: "nvtop".into(),
                ..Holder::default()
            },
        })
        .into_iter()
        .collect();
    let file = SimHostFile {
        node_name: "h1".into(),
        clock: 100,
        behaviour: Behaviour {
            p2p_corrupt: c.corrupt,
            ..Behaviour::default()
        },
        pci_devices: devices,
        pci_drivers: drivers,
        iommu: gpuplane::host::model::IommuState {
            group_types,
            ..Default::default()
        },
        nvidia: Default::default(),
        containers: [(
            129,
            SimContainer {
                state: if c.container_running {
                    RunState::Running
                } else {
                    RunState::Stopped
                },
                config: cfg.render(),
                nvidia_userspace_version: None,
                started_with: None,
            },
        )]
        .into(),
        vms: [(
            200,
            gpuplane::host::model::Vm {
                vmid: 200,
                state: if c.vm_running {
                    RunState::Running
                } else {
                    RunState::Stopped
                },
                pci_mappings: vec!["vm-pool".into(), "old-pool".into()],
                amd_sev: None,
            },
        )]
        .into(),
        pci_cfg: pci.render(),
        units,
        p2p_probes: vec![],
        holders,
        gpu_ledger: None,
        confidential: Default::default(),
        boot: None,
        files: None,
        faults: vec![],
        kernel_log: vec![],
    };
    let other_numa = 1 - c.container_numa;
    let mut slices = vec![GpuSlice {
        name: "inference".into(),
        gpus: GpuSelector {
            numa_node: Some(c.container_numa),
            ..Default::default()
        },
        driver: GpuDriver::Nvidia,
        consumer: Some(Consumer {
            lxc: Some(LxcConsumer { vmid: 129 }),
            vm: None,
        }),
        servers: Some(ServerPolicy {
            namespaces: vec!["default".into()],
            interpreters: vec!["/venv/bin/python3".into()],
            model_roots: vec!["/m".into()],
            // The generated host may hold an older unit of this name written by hand.
            adopt_units: vec!["sglang".into()],
            // The generated container is privileged: root there is accepted explicitly.
            user: Some("root".into()),
            ..ServerPolicy::default()
        }),
    }];
    if (0..n).any(|i| numa_of(i) == other_numa) {
        slices.push(GpuSlice {
            name: "vm".into(),
            gpus: GpuSelector {
                numa_node: Some(other_numa),
                ..Default::default()
            },
            driver: if c.vm_slice {
                GpuDriver::VfioPci
            } else {
                GpuDriver::Nvidia
            },
            consumer: c.vm_slice.then(|| Consumer {
                lxc: None,
                vm: Some(VmConsumer {
                    vmid: 200,
                    pci_mapping: "vm-pool".into(),
                }),
            }),
            servers: None,
        });
    }
    let mut part = GpuPartition::new(
        "h1",
        GpuPartitionSpec {
            node_name: "h1".into(),
            slices,
            iommu: None,
            host: None,
            deletion_policy: DeletionPolicy::Retain,
            health: None,
        },
    );
    part.metadata.name = Some("h1".into());
    let tp = c.tp.min(container_gpus.len() as u32);
    let mut server = InferenceServer::new(
        "srv",
        InferenceServerSpec {
            partition_ref: PartitionRef {
                name: "h1".into(),
                slice: "inference".into(),
            },
            unit: UnitPlacement {
                name: "sglang".into(),
                location: UnitLocation::Container,
            },
            python: "/venv/bin/python3".into(),
            model: ModelSpec {
                path: "/m/new".into(),
                served_name: "new".into(),
            },
            tensor_parallel_size: tp,
            speculative: None,
            tool_call_parser: None,
            reasoning_parser: None,
            mem_fraction_static: None,
            listen: Listen::default(),
            enable_metrics: false,
            p2p: c.policy,
            env: vec![],
            extra_args: vec![],
            startup: StartupSpec::default(),
            rollback: RollbackPolicy::Never,
            smoke_test: None,
        },
    );
    server.metadata.namespace = Some("default".into());
    Some((SimHost::new(file), part, server))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn converge_is_safe_terminates_and_is_idempotent(c in case()) {
        let Some((mut host, part, server)) = build(&c) else { return Ok(()) };
        let st = host.observe().unwrap();
        let dp = resolve_partition(&part, &st, "10de", "nvidia").expect("generated partition is valid");
        let ds = resolve_server(&server, &dp).expect("generated server is valid");
        let desired = Desired { partition: dp, servers: vec![ds], removed_units: vec![] };
        let mut checked = Checked { inner: host, violations: vec![], desired: desired.clone() };
        let report = {
            let mut door = Door::new(&mut checked);
            converge(&desired, &mut door, &Options::default())
        };
        prop_assert!(checked.violations.is_empty(), "unsafe steps: {:?}", checked.violations);
        prop_assert!(!matches!(report.stop, Some(Stop::NoProgress { .. })), "did not terminate");
        let stall_expected = c.policy == P2pPolicy::Enabled && c.corrupt && c.translated && desired.servers[0].spec.tensor_parallel_size >= 2;
        match &report.stop {
            Some(Stop::Blocked { blockers }) => {
                // Only something we must not touch may block, and then nothing was changed.
                prop_assert!(c.holder.is_some() || c.vm_running, "unexpected blockers {:?} after {:?}", blockers, report.applied.iter().map(|a| a.planned.step.to_string()).collect::<Vec<_>>());
                prop_assert!(blockers.iter().all(|b| b.reason == "GpuInUse"), "{:?}", blockers);
                prop_assert_eq!(report.writes, 0);
                return Ok(());
            }
            Some(Stop::NotReady { .. }) if stall_expected => return Ok(()),
            other => prop_assert!(other.is_none(), "stopped: {:?}", other),
        }
        prop_assert!(!stall_expected);
        // The result satisfies the spec.
        let st = checked.inner.observe().unwrap();
        for s in &desired.partition.slices {
            for g in &s.gpus {
                prop_assert_eq!(st.pci_devices[g].driver.as_deref(), Some(s.driver.sysfs_name()));
                prop_assert_eq!(st.pci_devices[g].driver_override.as_deref(), Some(s.driver.sysfs_name()));
            }
        }
        let want: BTreeSet<u32> = desired.partition.slices[0].gpus.iter().map(|g| st.pci_devices[g].nvidia_minor.unwrap()).collect();
        prop_assert_eq!(&st.containers[&129].gpu_mounts.minors, &want);
        prop_assert_eq!(st.containers[&129].state, RunState::Running);
        if let Some(vm) = desired.partition.slices.get(1).filter(|_| c.vm_slice) {
            let paths: BTreeSet<String> = st.pci_mappings.get("vm-pool").into_iter().flatten().flat_map(|e| e.paths.clone()).collect();
            // A GPU with its audio function is passed as the whole slot.
            let want: BTreeSet<String> = vm
                .gpus
                .iter()
                .map(|g| if st.pci_devices.contains_key(&g.replace(".0", ".1")) { g.trim_end_matches(".0").to_string() } else { g.clone() })
                .collect();
            prop_assert_eq!(paths, want);
        }
        // Audio functions follow their GPU: to vfio-pci with it, else back on their own driver.
        for s in &desired.partition.slices {
            for g in &s.gpus {
                let a = g.replace(".0", ".1");
                if let Some(d) = st.pci_devices.get(&a) {
                    if s.driver == GpuDriver::VfioPci {
                        prop_assert_eq!(d.driver.as_deref(), Some("vfio-pci"), "{}", a);
                        prop_assert_eq!(d.driver_override.as_deref(), Some("vfio-pci"), "{}", a);
                    } else {
                        prop_assert_eq!(d.driver.as_deref(), Some("snd_hda_intel"), "{}", a);
                        prop_assert_eq!(d.driver_override.as_deref(), None, "{}", a);
                    }
                }
            }
        }
        // No other mapping hands out partition GPUs.
        for e in st.pci_mappings.get("old-pool").into_iter().flatten() {
            prop_assert!(false, "old-pool still lists {:?}", e.paths);
        }
        let u = st.units.get("lxc-129/sglang.service").expect("unit exists");
        prop_assert!(u.server.as_ref().is_some_and(|s| s.models == vec!["new".to_string()]));
        // A second plan is empty, a second converge writes nothing.
        prop_assert!(plan(&desired, &st).is_empty());
        let again = {
            let mut door = Door::new(&mut checked);
            converge(&desired, &mut door, &Options::default())
        };
        prop_assert_eq!(again.writes, 0);
        prop_assert!(again.converged());
    }
}

/// The spec edits of issue 22 on a converged host.
#[derive(Debug, Clone, Copy)]
enum Edit {
    /// The server's unit gets another name (`gpuplane-srv`).
    Rename,
    /// The inference slice loses its LXC consumer, and its server moves to the host.
    DropConsumer,
    /// Both at once: the consumer goes, the server moves to the host under another name.
    RenameToHost,
}

/// Server units whose processes hold each GPU (Python holders by unit and place).
fn servers_per_gpu(st: &HostState) -> Vec<(String, BTreeSet<String>)> {
    st.pci_devices
        .iter()
        .map(|(a, d)| {
            let who = d
                .holders
                .iter()
                .filter(|h| h.command.starts_with("python"))
                .map(|h| format!("{:?}/{:?}", h.container, h.unit))
                .collect();
            (a.clone(), who)
        })
        .collect()
}

/// A host wrapper that records, after every step, each GPU held by two servers at once.
struct OneServerPerGpu {
    inner: SimHost,
    found: Vec<String>,
}

impl Host for OneServerPerGpu {
    fn observe(&mut self) -> Result<HostState, HostError> {
        self.inner.observe()
    }
    fn apply(&mut self, step: &Step) -> Result<StepOutcome, HostError> {
        let out = self.inner.apply(step)?;
        let st = self.inner.observe()?;
        for (g, who) in servers_per_gpu(&st) {
            if who.len() > 1 {
                self.found
                    .push(format!("after {step}: {g} held by {who:?}"));
            }
        }
        Ok(out)
    }
    fn sleep(&mut self, secs: u64) {
        self.inner.sleep(secs)
    }
    fn now(&self) -> u64 {
        self.inner.now()
    }
}

static EDITS_TRIED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `PROPTEST_CASES` when set (the long run of docs/RELIABILITY.md), else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(128), failure_persistence: None, ..ProptestConfig::default() })]

    /// Issue 22: on a converged host, an edit that renames the unit or takes the container away
    /// from the slice (its server moving to the host) never has two servers on one GPU, after
    /// any step, and ends converged with only the edited server running.
    #[test]
    fn spec_edits_on_a_converged_host_never_put_two_servers_on_one_gpu(
        c in case(),
        edit in prop_oneof![Just(Edit::Rename), Just(Edit::DropConsumer), Just(Edit::RenameToHost)],
    ) {
        let Some((mut host, mut part, mut server)) = build(&c) else { return Ok(()) };
        // Host placement allowed, so that every edit is valid.
        if let Some(p) = part.spec.slices[0].servers.as_mut() {
            p.allow_host_placement = true;
            p.user = Some("root".into());
        }
        let st = host.observe().unwrap();
        let dp = resolve_partition(&part, &st, "10de", "nvidia").expect("generated partition is valid");
        let ds = resolve_server(&server, &dp).expect("generated server is valid");
        let desired = Desired { partition: dp, servers: vec![ds], removed_units: vec![] };
        let first = converge(&desired, &mut Door::new(&mut host), &Options::default());
        if !first.converged() {
            return Ok(()); // blocked or stalled by the case itself: not a converged host
        }
        match edit {
            Edit::Rename => server.spec.unit.name = "gpuplane-srv".into(),
            Edit::DropConsumer => {
                part.spec.slices[0].consumer = None;
                server.spec.unit.location = UnitLocation::Host;
            }
            Edit::RenameToHost => {
                part.spec.slices[0].consumer = None;
                server.spec.unit.name = "gpuplane-srv".into();
                server.spec.unit.location = UnitLocation::Host;
            }
        }
        let st = host.observe().unwrap();
        let dp = resolve_partition(&part, &st, "10de", "nvidia").expect("edited partition is valid");
        let ds = resolve_server(&server, &dp).expect("edited server is valid");
        let edited = Desired { partition: dp, servers: vec![ds.clone()], removed_units: vec![] };
        EDITS_TRIED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut watched = OneServerPerGpu { inner: host, found: vec![] };
        let r = converge(&edited, &mut Door::new(&mut watched), &Options::default());
        prop_assert!(watched.found.is_empty(), "two servers on one GPU ({:?}): {:?}", edit, watched.found);
        prop_assert!(r.converged(), "{:?}: {:?} after {:?}", edit, r.stop, r.applied.iter().map(|a| a.planned.step.to_string()).collect::<Vec<_>>());
        let st = watched.inner.observe().unwrap();
        let running: Vec<String> = st.units.iter().filter(|(_, u)| u.is_active()).map(|(k, _)| k.clone()).collect();
        prop_assert_eq!(running, vec![ds.unit.key()], "{:?}: only the edited server runs", edit);
        eprintln!("spec edits tried so far: {}; two servers on one GPU found: 0", EDITS_TRIED.load(std::sync::atomic::Ordering::Relaxed));
    }
}
