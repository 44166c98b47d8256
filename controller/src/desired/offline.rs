//! Validation without a host: what the admission webhook (and anything else that cannot see
//! the node) can decide, with the same code the agent runs.
//!
//! Each partition is resolved against a stand-in host built from the partition itself: every
//! GPU it names by address exists, every container it names exists, a slice chosen by count
//! finds that many free GPUs, and a slice chosen by NUMA node finds as many GPUs as its
//! servers ask for. So every error left is one of the spec alone — names, selectors,
//! drivers against consumers, a GPU or vmid claimed twice, tensor parallel size against a slice
//! of known size, two servers on one slice or unit, every server check including the rendered
//! unit — and none depends on the node. The agent stays the final judge: it checks against the
//! real host again before the first write.
//!
//! The stand-in's GPUs have made-up addresses (`ffff:…`): no message leaves here naming one.
//! Problems of the spec are said in its own terms where they are found (two slices on one NUMA
//! node: the node and the slices, `partition.rs`); a made-up address left in any other message
//! is replaced by what the spec said of that GPU ([`in_users_terms`]).
//!
//! Pools ([`validate_pool`]) need no stand-in: their rules are the spec's alone (`pool.rs`).

use super::{
    check_servers_together, in_claim_order, resolve_partition, resolve_server, DesiredPartition,
    ResolvedConsumer, ResolvedSlice, SpecError,
};
use crate::host::model::{Container, GpuIdentity, HostState, PciDevice, RunState};
use gpuplane_crds::{
    Consumer, GpuDriver, GpuPartition, GpuSlice, InferenceServer, ServerPolicy, UnitLocation,
};
use std::collections::BTreeMap;

/// What the spec said of each stand-in GPU, by its made-up address.
type MadeUp = BTreeMap<String, String>;

/// One identity field of a stand-in GPU (UUID, serial, slot).
type IdentityField = fn(&mut GpuIdentity) -> &mut Option<String>;

/// Vendor of the stand-in GPUs (any; the stand-in host has only these).
const VENDOR: &str = "10de";

/// What the objects say, checked together: errors of `subject` and of every object it is
/// checked with that names it. `partitions` and `servers` are the cluster's objects with the
/// subject in its new form among them.
pub fn validate(
    partitions: &[GpuPartition],
    servers: &[InferenceServer],
) -> (Vec<SpecError>, Vec<String>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    errors.extend(one_partition_per_node(partitions));
    for p in partitions {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let mine: Vec<&InferenceServer> =
            in_claim_order(servers.iter().filter(|s| s.spec.partition_ref.name == name));
        let (host, made_up) = stand_in_host(p, &mine);
        let dp = match resolve_partition(p, &host, VENDOR, "nvidia") {
            Ok(dp) => dp,
            Err(e) => {
                errors.extend(in_users_terms(e, &made_up));
                continue;
            }
        };
        let mut resolved = Vec::new();
        for s in mine {
            match resolve_server(s, &dp) {
                Ok(d) => resolved.push(d),
                Err(e) => errors.extend(in_users_terms(e, &made_up)),
            }
        }
        errors.extend(in_users_terms(check_servers_together(&resolved), &made_up));
    }
    for s in servers {
        if !partitions
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some(s.spec.partition_ref.name.as_str()))
        {
            // Its own checks still apply, on a partition that has the slice it asks for.
            if let Err(e) = resolve_server(s, &stand_in_partition(s)) {
                errors.extend(e);
            }
            warnings.push(format!(
                "spec.partitionRef.name: GpuPartition {:?} does not exist (yet); the server waits for it (condition PartitionNotFound)",
                s.spec.partition_ref.name
            ));
        }
    }
    (errors, warnings)
}

/// The problems of a `GpuNodePool`: the same rules the CLI and the agent on manifest files apply
/// (`pool.rs`), host-independent by nature.
pub fn validate_pool(pool: &gpuplane_crds::GpuNodePool) -> Vec<SpecError> {
    super::pool::check(pool)
}

/// `errors` with every made-up address of the stand-in host replaced by what the spec said of
/// that GPU: the user wrote no such address, and the node has none.
fn in_users_terms(mut errors: Vec<SpecError>, made_up: &MadeUp) -> Vec<SpecError> {
    for e in &mut errors {
        for (address, said) in made_up {
            if e.message.contains(address.as_str()) {
                e.message = e.message.replace(&format!("GPU {address}"), said);
                e.message = e.message.replace(address.as_str(), said);
            }
        }
    }
    errors
}

/// A partition with just the slice `s` names, as large as it asks, where its unit can run,
/// allowing what `s` asks (the real partition's policy is judged once it exists).
fn stand_in_partition(s: &InferenceServer) -> DesiredPartition {
    let r = &s.spec.partition_ref;
    let gpus = (0..s.spec.tensor_parallel_size.clamp(1, 1024))
        .map(|i| format!("ffff:00:{:02x}.0", i % 32))
        .collect();
    let consumer = match s.spec.unit.location {
        UnitLocation::Container => Some(ResolvedConsumer::Lxc(100)),
        UnitLocation::Host => None,
    };
    DesiredPartition {
        name: r.name.clone(),
        node_name: String::new(),
        slices: vec![ResolvedSlice {
            name: r.slice.clone(),
            gpus,
            driver: GpuDriver::Nvidia,
            consumer,
            servers: Some(permissive_policy(s)),
        }],
        iommu: Default::default(),
        host_driver: "nvidia".into(),
        kernel_args: None,
        layout: None,
        reboot: Default::default(),
    }
}

/// A policy that allows exactly what `s` asks.
fn permissive_policy(s: &InferenceServer) -> ServerPolicy {
    ServerPolicy {
        namespaces: vec![s
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into())],
        interpreters: vec![s.spec.python.clone()],
        model_roots: vec!["/".into()],
        allow_hub_models: true,
        allow_host_placement: true,
        user: Some("root".into()),
        adopt_units: vec![s.spec.unit.name.clone()],
        env: vec![],
        allowed_flags: crate::sglang::args::split(&s.spec.extra_args)
            .into_iter()
            .filter_map(|w| match w {
                crate::sglang::args::Word::Flag { flag: Some(f), .. } => Some(f.name.clone()),
                _ => None,
            })
            .collect(),
        allowed_env: s.spec.env.iter().map(|v| v.name.clone()).collect(),
        on_gpu_quarantine: Default::default(),
    }
}

/// Two partitions for one node: the node would be claimed twice.
fn one_partition_per_node(partitions: &[GpuPartition]) -> Vec<SpecError> {
    let mut first: BTreeMap<&str, &str> = BTreeMap::new();
    let mut errors = Vec::new();
    for p in partitions {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        match first.get(p.spec.node_name.as_str()) {
            Some(other) => errors.push(SpecError {
                resource: crate::resource_key::ResourceKey::partition(name),
                field: "spec.nodeName".into(),
                message: format!(
                    "node {:?} already has GpuPartition {other}; one host has one partition",
                    p.spec.node_name
                ),
            }),
            None => {
                first.insert(&p.spec.node_name, name);
            }
        }
    }
    errors
}

/// A host on which `p` (and its servers' tensor parallel sizes) can only fail for the spec's
/// own reasons, and what the spec said of each GPU it made up an address for.
fn stand_in_host(p: &GpuPartition, servers: &[&InferenceServer]) -> (HostState, MadeUp) {
    let mut b = StandIn {
        h: HostState {
            node_name: p.spec.node_name.clone(),
            ..HostState::default()
        },
        made_up: MadeUp::new(),
        next: 0,
    };
    for s in &p.spec.slices {
        let wanted = servers
            .iter()
            .filter(|x| x.spec.partition_ref.slice == s.name)
            .map(|x| x.spec.tensor_parallel_size as usize)
            .max()
            .unwrap_or(1)
            .max(1);
        b.selected_gpus(s, wanted);
        b.named_gpus(s);
        if let Some(Consumer { lxc: Some(l), .. }) = &s.consumer {
            b.h.containers.insert(
                l.vmid,
                Container {
                    vmid: l.vmid,
                    state: RunState::Stopped,
                    gpu_mounts: Default::default(),
                    nvidia_userspace_version: None,
                    privileged: false,
                },
            );
        }
    }
    (b.h, b.made_up)
}

/// The stand-in host being built, and the GPUs it made up.
struct StandIn {
    h: HostState,
    made_up: MadeUp,
    /// The last made-up address's number.
    next: u32,
}

impl StandIn {
    fn add_gpu(&mut self, address: String, numa: i32) {
        self.h
            .pci_devices
            .entry(address.clone())
            .or_insert(PciDevice {
                address,
                vendor: VENDOR.into(),
                device: "0000".into(),
                class: "030200".into(),
                numa_node: numa,
                driver: Some("nvidia".into()),
                ..PciDevice::default()
            });
    }

    /// A GPU at a made-up address, `said` being what the spec says of it.
    fn fresh(&mut self, numa: i32, said: String) -> String {
        self.next += 1;
        // Bus numbers above any a partition names by hand are unlikely to collide; a collision
        // only adds a GPU that was named anyway.
        let address = format!("ffff:{:02x}:{:02x}.0", self.next / 32, self.next % 32);
        if !self.h.pci_devices.contains_key(&address) {
            self.made_up.insert(address.clone(), said);
        }
        self.add_gpu(address.clone(), numa);
        address
    }

    /// The GPUs slice `s` selects by address, NUMA node (`wanted` of them: its largest
    /// server's tp) or count.
    fn selected_gpus(&mut self, s: &GpuSlice, wanted: usize) {
        if let Some(addrs) = &s.gpus.addresses {
            for a in addrs {
                self.add_gpu(a.full(), -1);
            }
        } else if let Some(n) = s.gpus.numa_node {
            for _ in 0..wanted {
                self.fresh(n, format!("a GPU on NUMA node {n}"));
            }
        } else if let Some(c) = s.gpus.count {
            for _ in 0..c.min(1024) {
                self.fresh(-1, format!("a GPU of slice {:?} (count {c})", s.name));
            }
        }
    }

    /// GPUs named by identity: one stand-in GPU per distinct name (a name listed twice is
    /// still the spec's error), with that identity.
    fn named_gpus(&mut self, s: &GpuSlice) {
        let named: [(&str, &Option<Vec<String>>, IdentityField); 3] = [
            ("uuid", &s.gpus.uuids, |i| &mut i.uuid),
            ("serial", &s.gpus.serials, |i| &mut i.serial),
            ("slot", &s.gpus.slots, |i| &mut i.slot),
        ];
        for (kind, names, field) in named {
            let mut seen = std::collections::BTreeSet::new();
            for n in names.iter().flatten().take(1024) {
                if seen.insert(n) {
                    let address = self.fresh(-1, format!("the GPU with {kind} {n:?}"));
                    if let Some(d) = self.h.pci_devices.get_mut(&address) {
                        *field(&mut d.identity) = Some(n.clone());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
