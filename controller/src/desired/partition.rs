//! Validation and GPU selection of a `GpuPartition`.

use super::{DesiredPartition, Problems, ResolvedConsumer, ResolvedSlice, SpecError};
use crate::host::model::HostState;
use gpuplane_crds::{
    Consumer, GpuDriver, GpuPartition, GpuPartitionSpec, GpuSelector, GpuSlice,
    IommuModeExpectation, LxcConsumer, PciAddress, VmConsumer,
};
use std::collections::{BTreeMap, BTreeSet};

/// Validates `p` and resolves its selectors against `host`, whose GPUs are the display-class
/// devices of `gpu_vendor`; `gpu_driver` is the kernel driver that `driver: nvidia` means
/// there (`nvidia`, or the display driver of emulated GPUs in tests).
///
/// # Guarantees
/// On `Ok`, every slice has at least one GPU (unless the ledger gave it GPUs that are gone
/// from the bus: the layout guard then stalls that slice), no GPU is in two slices, and consumers fit
/// their driver (LXC needs `nvidia`, VM needs `vfio-pci`).
pub fn resolve_partition(
    p: &GpuPartition,
    host: &HostState,
    gpu_vendor: &str,
    gpu_driver: &str,
) -> Result<DesiredPartition, Vec<SpecError>> {
    let res = crate::resource_key::ResourceKey::partition(
        p.metadata.name.as_deref().unwrap_or("<unnamed>"),
    );
    let spec = &p.spec;
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let terms = layout_terms(p, gpu_vendor);
    let mut check = Check::new(&res, host, gpu_vendor, name, &terms);
    check.node_and_slices(spec);
    check.overlapping_selectors(spec);
    // First pass: explicit selectors (addresses, NUMA); count selectors take what is left.
    let mut chosen: Vec<Option<Vec<String>>> = spec
        .slices
        .iter()
        .enumerate()
        .map(|(i, s)| check.slice(i, s))
        .collect();
    // Second pass: count selectors. Prefer GPUs already in place (driver and consumer), then by address.
    for (i, s) in spec.slices.iter().enumerate() {
        if let Some(v) = check.count(i, s) {
            chosen[i] = Some(v);
        }
    }
    check.passthrough_and_snp(spec);
    check.host(spec, gpuplane_crds::pool_of(p));
    check.metadata(p);
    check.problems.finish()?;
    let mut terms = terms;
    terms.contested = std::mem::take(&mut check.contested);
    let slices = resolved_slices(spec, chosen, &check.claimed);
    Ok(DesiredPartition {
        name: p.metadata.name.clone().unwrap_or_default(),
        node_name: spec.node_name.clone(),
        slices,
        iommu: iommu_expectation(spec),
        host_driver: gpu_driver.into(),
        layout: Some(terms),
        kernel_args: super::kernel_args::resolved(spec),
        reboot: super::reboot::RebootGate::of(spec),
    })
}

/// What the layout guard needs from the partition object: its spec hash and annotations.
fn layout_terms(p: &GpuPartition, gpu_vendor: &str) -> crate::layout::Terms {
    let ann = |k: &str| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(|v| v.trim().to_string())
    };
    crate::layout::Terms {
        spec_hash: crate::layout::spec_hash(&p.spec),
        gpu_vendor: gpu_vendor.into(),
        accept_layout: ann(crate::layout::ACCEPT_ANNOTATION),
        allow_unverified: ann(crate::layout::UNVERIFIED_ANNOTATION).as_deref() == Some("true"),
        contested: Default::default(),
        health: p.spec.health.clone().unwrap_or_default(),
        accept_health: ann(crate::layout::ACCEPT_HEALTH_ANNOTATION),
        now: None,
    }
}

/// `spec.slices[i].x`.
fn field(i: usize, x: &str) -> String {
    format!("spec.slices[{i}].{x}")
}

/// What the checks of one partition share: the host's GPUs, what earlier slices took, and
/// the problems found so far.
struct Check<'a> {
    problems: Problems<'a>,
    host: &'a HostState,
    gpu_vendor: &'a str,
    /// Addresses of the host's GPUs.
    host_gpus: Vec<&'a str>,
    /// Names of the slices checked so far.
    names: BTreeSet<String>,
    /// PCI mapping → the slice whose VM uses it.
    mappings: BTreeMap<String, String>,
    /// Consumer vmid → the slice it consumes.
    vmids: BTreeMap<u32, String>,
    /// GPU address → the slice that has it.
    claimed: BTreeMap<String, String>,
    /// Each GPU's identity as far as known (observed, and what the ledger remembers).
    known: crate::layout::matching::Known<'a>,
    /// The ledger, when its owners were decided under this very spec: a GPU it gives a slice
    /// that is not on the bus now is the layout guard's to report (`GpuMissing`, that slice
    /// only), not a spec error that would stop every slice.
    ledger: Option<&'a crate::host::ledger::Ledger>,
    /// The layout on the bus is acknowledged (`accept-layout`).
    accepted: bool,
    /// Acknowledged: the ledger's GPUs that are gone from the bus or were replaced (kept in the
    /// ledger as missing): a selector may still name them. An address or slot some other GPU
    /// left is the spec's to fix.
    gone: BTreeSet<usize>,
    /// GPU address → the slices whose selectors all pick it, when the host moved it there
    /// (see [`Check::claim`]); the GPU stays with the slice that claimed it first.
    contested: BTreeMap<String, BTreeSet<String>>,
    /// Pairs of slices (earlier, later) whose selectors overlap by the spec alone (one NUMA
    /// node, one UUID, serial or slot): reported in the spec's terms
    /// ([`Check::overlapping_selectors`]), so their GPUs' claims are not reported again.
    overlap: BTreeSet<(String, String)>,
}

impl<'a> Check<'a> {
    /// Starts checking the partition `resource` against the GPUs of `gpu_vendor` on `host`.
    fn new(
        resource: &'a crate::resource_key::ResourceKey,
        host: &'a HostState,
        gpu_vendor: &'a str,
        partition: &str,
        terms: &crate::layout::Terms,
    ) -> Self {
        let observed: Vec<_> = host.gpus(gpu_vendor).collect();
        let ledger = host
            .gpu_ledger
            .as_ref()
            .filter(|l| l.partition == partition && l.spec_hash == terms.spec_hash);
        // Acknowledged, a slice that names only GPUs that are not on the bus is the spec's to fix
        // (and a count that cannot be met); before, the guard reports what moved.
        let accepted =
            terms.accept_layout.as_deref() == Some(crate::layout::layout_hash(&observed).as_str());
        let gone: BTreeSet<usize> = match ledger {
            Some(l) if accepted => {
                let m = crate::layout::matching::match_gpus(l, &observed);
                let replaced = m.replaced.into_iter().map(|(i, _)| i);
                m.missing.into_iter().chain(replaced).collect()
            }
            _ => BTreeSet::new(),
        };
        Check {
            problems: Problems::new(resource),
            host,
            gpu_vendor,
            host_gpus: observed.iter().map(|d| d.address.as_str()).collect(),
            names: BTreeSet::new(),
            mappings: BTreeMap::new(),
            vmids: BTreeMap::new(),
            claimed: BTreeMap::new(),
            known: crate::layout::matching::known_identities(host.gpu_ledger.as_ref(), &observed),
            ledger,
            accepted,
            gone,
            contested: BTreeMap::new(),
            overlap: BTreeSet::new(),
        }
    }

    /// Whether the ledger gave slice `slice` a GPU `is_it` picks (one the selector now misses:
    /// gone, moved, replaced): the guard reports it, for that slice alone, not as a spec error
    /// of every slice. Acknowledged, only a GPU that is gone or was replaced (the slice goes on
    /// without it).
    fn remembered(
        &self,
        slice: &str,
        is_it: impl Fn(&crate::host::ledger::LedgerGpu) -> bool,
    ) -> bool {
        self.ledger.is_some_and(|l| {
            l.gpus.iter().enumerate().any(|(i, g)| {
                g.owner.as_deref() == Some(slice)
                    && is_it(g)
                    && (!self.accepted || self.gone.contains(&i))
            })
        })
    }

    /// `iommu.mode: Passthrough` with an SEV-SNP VM consumer cannot work: Linux turns SNP off
    /// when the IOMMU is in passthrough mode.
    fn passthrough_and_snp(&mut self, spec: &GpuPartitionSpec) {
        if iommu_expectation(spec) != IommuModeExpectation::Passthrough {
            return;
        }
        for (i, s) in spec.slices.iter().enumerate() {
            let Some(vm) = s.consumer.as_ref().and_then(|c| c.vm.as_ref()) else {
                continue;
            };
            if self.host.vms.get(&vm.vmid).is_some_and(|v| v.is_snp()) {
                self.problems.add(
                    "spec.iommu.mode",
                    format!("Passthrough cannot work with the confidential VM {} of spec.slices[{i}] ({:?}; its config has amd-sev: type=snp): Linux turns SEV-SNP off when the IOMMU is in passthrough mode (drivers/iommu/amd/init.c: \"SNP: IOMMU disabled or configured in passthrough mode, SNP cannot be supported\"); expect Translated (or Any)", vm.vmid, s.name),
                );
            }
        }
    }

    /// `spec.host`: kernel arguments and the reboot policy (`kernel_args.rs`); an argument
    /// that switches off what a vfio-pci slice or a confidential VM consumer needs (the latter
    /// judged as [`Check::passthrough_and_snp`] does: the VM's config says `amd-sev: type=snp`).
    fn host(&mut self, spec: &GpuPartitionSpec, pool: Option<&str>) {
        super::kernel_args::check(spec, pool, &mut self.problems);
        let confidential: Vec<super::kernel_args::ConfidentialSlice<'_>> = spec
            .slices
            .iter()
            .enumerate()
            .filter_map(|(index, s)| {
                let vm = s.consumer.as_ref().and_then(|c| c.vm.as_ref())?;
                self.host
                    .vms
                    .get(&vm.vmid)
                    .is_some_and(|v| v.is_snp())
                    .then_some(super::kernel_args::ConfidentialSlice {
                        index,
                        name: s.name.as_str(),
                        vmid: vm.vmid,
                    })
            })
            .collect();
        super::kernel_args::check_prerequisites(spec, &confidential, &mut self.problems);
    }

    /// The labels and annotations the agent reads: the pool it is a member of (`pool.rs`), and
    /// the layout guard's annotations. Each takes only values it can act on: a value it would
    /// not understand is refused, never silently ignored.
    fn metadata(&mut self, p: &GpuPartition) {
        super::pool::membership(p, &mut self.problems);
        let ann = |k: &str| p.metadata.annotations.as_ref().and_then(|a| a.get(k));
        let at = |k: &str| format!("metadata.annotations[\"{k}\"]");
        let (accept, health) = (
            crate::layout::ACCEPT_ANNOTATION,
            crate::layout::ACCEPT_HEALTH_ANNOTATION,
        );
        // Each acknowledgement takes a hash the agent printed, and says where to copy it from.
        let hashes = [
            (accept, "a layout hash", format!("copy the hash from the partition's stall message (\"annotate the partition {accept}=<hash>\", reason HostLayoutChanged, GpuReplaced or GpuMissing) or from its status.layoutHash")),
            (health, "a quarantine's hash", format!("copy status.gpus[].quarantine.hash of the GPU to return to its slice (also in the GpusHealthy message, \"accept with {health}=<hash>\")")),
        ];
        for (key, what, from) in hashes {
            let Some(v) = ann(key).filter(|v| !crate::layout::is_layout_hash(v.trim())) else {
                continue;
            };
            self.problems.add(
                at(key),
                format!(
                    "{v:?} is not {what} ({} lower-case hex digits); {from}, or remove the annotation",
                    crate::layout::LAYOUT_HASH_LEN
                ),
            );
        }
        let unverified = crate::layout::UNVERIFIED_ANNOTATION;
        if let Some(v) = ann(unverified) {
            if !matches!(v.trim(), "true" | "false") {
                self.problems.add(
                    at(unverified),
                    format!("{v:?} is neither \"true\" nor \"false\"; write \"true\" to let a GPU whose identity cannot be read go to a VM, \"false\" (or no annotation) not to"),
                );
            }
        }
    }

    /// Two slices whose selectors pick the same GPUs whatever the host: the same `numaNode`, or
    /// one UUID, serial or slot listed by both. Said in the spec's terms (the NUMA node, the
    /// value, the slice names), which hold on any host and in the webhook, whose stand-in host
    /// has made-up addresses (`offline.rs`); the claims of those GPUs are then not reported again
    /// by address. Only slices with exactly one selector kind are compared (the others are
    /// refused as such).
    fn overlapping_selectors(&mut self, spec: &GpuPartitionSpec) {
        let one = |s: &GpuSlice| s.gpus.kinds().len() == 1;
        for (j, b) in spec.slices.iter().enumerate().filter(|(_, s)| one(s)) {
            for (i, a) in spec.slices[..j].iter().enumerate().filter(|(_, s)| one(s)) {
                let before = format!("slice {:?} (spec.slices[{i}])", a.name);
                let mut found = false;
                if let (Some(n), Some(m)) = (a.gpus.numa_node, b.gpus.numa_node) {
                    if n == m {
                        found = true;
                        self.problems.add(
                            field(j, "gpus.numaNode"),
                            format!("NUMA node {n} is also the selector of {before}: each would take every GPU on that node, and a GPU may belong to one slice only; select one of the two by another NUMA node, or by addresses, uuids, serials, slots or count"),
                        );
                    }
                }
                let lists = [
                    ("uuids", &a.gpus.uuids, &b.gpus.uuids),
                    ("serials", &a.gpus.serials, &b.gpus.serials),
                    ("slots", &a.gpus.slots, &b.gpus.slots),
                ];
                for (kind, x, y) in lists {
                    let (Some(x), Some(y)) = (x, y) else {
                        continue;
                    };
                    for (k, v) in y.iter().enumerate() {
                        if x.contains(v) && !y[..k].contains(v) {
                            found = true;
                            self.problems.add(
                                field(j, &format!("gpus.{kind}[{k}]")),
                                format!("{v:?} is also listed by {before}; a GPU may belong to one slice only: list it in one of the two"),
                            );
                        }
                    }
                }
                if found {
                    self.overlap.insert((a.name.clone(), b.name.clone()));
                }
            }
        }
    }

    /// The partition names its node and has at least one slice.
    fn node_and_slices(&mut self, spec: &GpuPartitionSpec) {
        if spec.node_name.is_empty() {
            self.problems
                .add("spec.nodeName", "must name the host this partition is for");
        }
        if spec.slices.is_empty() {
            self.problems.add("spec.slices", "needs at least one slice");
        }
    }

    /// Checks slice `i` and picks its explicit GPUs (addresses or NUMA node); `None` for a
    /// count selector (picked in the second pass) or a selector that is not exactly one.
    fn slice(&mut self, i: usize, s: &GpuSlice) -> Option<Vec<String>> {
        self.slice_name(i, s);
        if !self.one_selector(i, &s.gpus) {
            return None;
        }
        if let Some(c) = &s.consumer {
            self.consumer(i, s, c);
        }
        if let Some(policy) = &s.servers {
            super::tenancy::check_policy(&mut self.problems, i, policy);
        }
        let g = &s.gpus;
        let picked = if let Some(addrs) = &g.addresses {
            Some(self.addresses(i, s, addrs))
        } else if let Some(v) = &g.uuids {
            Some(self.by_identity(i, s, "uuids", v, |id| id.uuid.as_deref()))
        } else if let Some(v) = &g.serials {
            Some(self.by_identity(i, s, "serials", v, |id| id.serial.as_deref()))
        } else if let Some(v) = &g.slots {
            Some(self.by_identity(i, s, "slots", v, |id| id.slot.as_deref()))
        } else {
            g.numa_node.map(|n| self.numa_node(i, n))
        };
        if let Some(v) = &picked {
            if v.is_empty() && self.accepted && g.numa_node.is_none() {
                self.problems.add(
                    field(i, "gpus"),
                    "none of the GPUs this slice names is on this host now (the layout was acknowledged with accept-layout); name GPUs that are here",
                );
            }
            self.claim(i, s, v);
        }
        picked
    }

    /// The slice name is a DNS label that no earlier slice uses.
    fn slice_name(&mut self, i: usize, s: &GpuSlice) {
        if !is_dns_label(&s.name) {
            self.problems.add(
                field(i, "name"),
                format!(
                    "{:?} is not a DNS label (lower-case letters, digits and '-', at most 63)",
                    s.name
                ),
            );
        }
        if !self.names.insert(s.name.clone()) {
            self.problems.add(
                field(i, "name"),
                format!(
                    "slice name {:?} is used twice; slice names must be unique",
                    s.name
                ),
            );
        }
    }

    /// Exactly one selector kind is set.
    fn one_selector(&mut self, i: usize, g: &GpuSelector) -> bool {
        let kinds = g.kinds();
        if kinds.len() != 1 {
            let set = if kinds.is_empty() {
                "this slice sets none".to_string()
            } else {
                format!("this slice sets {}", kinds.join(" and "))
            };
            self.problems.add(
                field(i, "gpus"),
                format!("set exactly one of addresses, numaNode, count, uuids, serials or slots ({set})"),
            );
            return false;
        }
        // A slice of no GPUs would silently own nothing.
        let lists = [
            ("addresses", g.addresses.as_ref().map(Vec::len)),
            ("uuids", g.uuids.as_ref().map(Vec::len)),
            ("serials", g.serials.as_ref().map(Vec::len)),
            ("slots", g.slots.as_ref().map(Vec::len)),
        ];
        if let Some((k, _)) = lists.iter().find(|(_, n)| *n == Some(0)) {
            self.problems.add(
                field(i, &format!("gpus.{k}")),
                "lists no GPU; a slice needs at least one (remove the slice if it is not wanted)",
            );
            return false;
        }
        if g.count == Some(0) {
            self.problems.add(
                field(i, "gpus.count"),
                "must be at least 1 (remove the slice if it is not wanted)",
            );
            return false;
        }
        true
    }

    /// The consumer is exactly one of an LXC container and a VM.
    fn consumer(&mut self, i: usize, s: &GpuSlice, c: &Consumer) {
        match (&c.lxc, &c.vm) {
            (Some(l), None) => self.lxc_consumer(i, s, l),
            (None, Some(v)) => self.vm_consumer(i, s, v),
            _ => self.problems.add(
                field(i, "consumer"),
                "set exactly one of lxc or vm (or omit consumer)",
            ),
        }
    }

    /// An LXC consumer needs driver `nvidia` and a container that consumes no other slice.
    fn lxc_consumer(&mut self, i: usize, s: &GpuSlice, l: &LxcConsumer) {
        if s.driver != GpuDriver::Nvidia {
            self.problems.add(field(i, "driver"), format!("an LXC consumer (container {}) needs driver nvidia; vfio-pci GPUs can only be passed to a VM", l.vmid));
        }
        if let Some(other) = self.vmids.insert(l.vmid, s.name.clone()) {
            self.problems.add(field(i, "consumer.lxc.vmid"), format!("vmid {} is already the consumer of slice {other:?}; give one consumer one slice", l.vmid));
        }
        if !self.host.containers.contains_key(&l.vmid) {
            let known: Vec<String> = self.host.containers.keys().map(u32::to_string).collect();
            self.problems.add(
                field(i, "consumer.lxc.vmid"),
                format!(
                    "container {} does not exist on this host (no /etc/pve/lxc/{}.conf); containers here: {}",
                    l.vmid,
                    l.vmid,
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ),
            );
        }
    }

    /// A VM consumer needs driver `vfio-pci`, a valid PCI mapping of its own and a VM that
    /// consumes no other slice.
    fn vm_consumer(&mut self, i: usize, s: &GpuSlice, v: &VmConsumer) {
        if s.driver != GpuDriver::VfioPci {
            self.problems.add(
                field(i, "driver"),
                format!("a VM consumer (VM {}) needs driver vfio-pci", v.vmid),
            );
        }
        if !is_pve_configid(&v.pci_mapping) {
            self.problems.add(field(i, "consumer.vm.pciMapping"), format!("{:?} is not a valid Proxmox mapping ID (letter first, then letters, digits, '-' or '_', 2 to 40 characters)", v.pci_mapping));
        }
        if let Some(other) = self.mappings.insert(v.pci_mapping.clone(), s.name.clone()) {
            self.problems.add(field(i, "consumer.vm.pciMapping"), format!("mapping {:?} is already used by slice {other:?}; each slice needs its own mapping", v.pci_mapping));
        }
        if let Some(other) = self.vmids.insert(v.vmid, s.name.clone()) {
            self.problems.add(
                field(i, "consumer.vm.vmid"),
                format!("vmid {} is already the consumer of slice {other:?}", v.vmid),
            );
        }
    }

    /// The GPUs whose identity of one kind (`kind`, read by `get`) is listed, each once; an
    /// entry no GPU has is a problem, unless the ledger gave this slice that GPU (then it is
    /// gone, and the guard says so).
    fn by_identity(
        &mut self,
        i: usize,
        s: &GpuSlice,
        kind: &str,
        wanted: &[String],
        get: impl Fn(&crate::host::model::GpuIdentity) -> Option<&str>,
    ) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for (j, w) in wanted.iter().enumerate() {
            let at = field(i, &format!("gpus.{kind}[{j}]"));
            let hit = self
                .known
                .iter()
                .find(|(_, id)| get(id) == Some(w.as_str()))
                .map(|(a, _)| a.to_string());
            match hit {
                Some(a) if v.contains(&a) => {
                    self.problems.add(at, format!("{w:?} is listed twice"))
                }
                Some(a) => v.push(a),
                None if self.remembered(&s.name, |g| get(&g.identity) == Some(w.as_str())) => {}
                None => {
                    let here: Vec<String> = self
                        .known
                        .iter()
                        .map(|(a, id)| format!("{a}={}", get(id).unwrap_or("?")))
                        .collect();
                    let hint = if kind == "slots" {
                        " (slot names are those of /sys/bus/pci/slots; a host that names no slots cannot select by slot)"
                    } else {
                        " (UUIDs and serials are read from nvidia-smi while a GPU is on nvidia, and remembered in the agent's ledger after)"
                    };
                    self.problems.add(
                        at,
                        format!(
                            "no GPU on this host has {} {w:?}; GPUs here: {}{hint}",
                            kind.trim_end_matches('s'),
                            here.join(", ")
                        ),
                    );
                }
            }
        }
        v
    }

    /// The listed addresses that are PCI addresses of this host's GPUs, each once.
    fn addresses(&mut self, i: usize, s: &GpuSlice, addrs: &[PciAddress]) -> Vec<String> {
        let mut v = Vec::new();
        for (j, a) in addrs.iter().enumerate() {
            let full = a.full();
            let at = field(i, &format!("gpus.addresses[{j}]"));
            if !is_pci_address(&full) {
                self.problems.add(
                    at,
                    format!(
                        "{:?} is not a PCI address; write it as 0000:01:00.0 (lower-case hex)",
                        a.0
                    ),
                );
            } else if !self.host_gpus.contains(&full.as_str()) {
                if self.remembered(&s.name, |g| g.address == full) {
                    continue;
                }
                self.problems.add(
                    at,
                    format!(
                        "no GPU at {full} on this host; GPUs here: {}",
                        self.host_gpus.join(", ")
                    ),
                );
            } else if v.contains(&full) {
                self.problems.add(at, format!("{full} is listed twice"));
            } else {
                v.push(full);
            }
        }
        v
    }

    /// The GPUs on NUMA node `n`; none is a problem.
    fn numa_node(&mut self, i: usize, n: i32) -> Vec<String> {
        let gpus = || self.host.gpus(self.gpu_vendor);
        let v: Vec<String> = gpus()
            .filter(|d| d.numa_node == n)
            .map(|d| d.address.clone())
            .collect();
        if v.is_empty() {
            let nodes: BTreeSet<i32> = gpus().map(|d| d.numa_node).collect();
            self.problems.add(
                field(i, "gpus.numaNode"),
                format!("no GPU on NUMA node {n}; this host has GPUs on NUMA nodes {nodes:?}"),
            );
        }
        v
    }

    /// Claims `gpus` for slice `s`; a GPU that an earlier slice claimed is a problem, unless
    /// the host moved it there: under a standing ledger of this very spec (which resolved
    /// without overlap when it was written) and no acknowledgement, two selectors picking one
    /// GPU is a layout change (GPUs swapped between slots or NUMA nodes), recorded as contested
    /// for the layout guard to stall both slices, like any other change of the host.
    fn claim(&mut self, i: usize, s: &GpuSlice, gpus: &[String]) {
        for a in gpus {
            match self.claimed.get(a) {
                Some(other) if self.ledger.is_some() && !self.accepted => {
                    let e = self.contested.entry(a.clone()).or_default();
                    e.insert(other.clone());
                    e.insert(s.name.clone());
                }
                // Reported in the spec's terms already.
                Some(other) if self.overlap.contains(&(other.clone(), s.name.clone())) => {}
                Some(other) => self.problems.add(
                    field(i, "gpus"),
                    format!(
                        "GPU {a} is also in slice {other:?}; a GPU may belong to one slice only"
                    ),
                ),
                None => {
                    self.claimed.insert(a.clone(), s.name.clone());
                }
            }
        }
    }

    /// For a count selector, claims that many unclaimed GPUs, those already serving the slice
    /// first, then by address; too few is a problem (`None`).
    fn count(&mut self, i: usize, s: &GpuSlice) -> Option<Vec<String>> {
        let n = s.gpus.count?;
        let mut free: Vec<&str> = self
            .host_gpus
            .iter()
            .copied()
            .filter(|a| !self.claimed.contains_key(*a))
            .collect();
        free.sort_by_key(|a| (!already_serves(self.host, a, s), a.to_string()));
        let short = (free.len() as u32) < n;
        if short
            && !self.accepted
            && self.remembered(&s.name, |g| {
                !self.host_gpus.contains(&g.address.as_str()) || g.missing
            })
        {
            // GPUs of this slice are gone: the guard stalls the slice; take what is here.
        } else if short {
            self.problems.add(
                field(i, "gpus.count"),
                format!(
                    "wants {n} GPUs but only {} are not claimed by other slices",
                    free.len()
                ),
            );
            return None;
        }
        let v: Vec<String> = free
            .iter()
            .take(n as usize)
            .map(|a| a.to_string())
            .collect();
        for a in &v {
            self.claimed.insert(a.clone(), s.name.clone());
        }
        Some(v)
    }
}

/// The slices with their chosen GPUs (sorted) and their consumers; a GPU two slices picked
/// (contested) stays only with the slice that `claimed` records for it.
fn resolved_slices(
    spec: &GpuPartitionSpec,
    chosen: Vec<Option<Vec<String>>>,
    claimed: &BTreeMap<String, String>,
) -> Vec<ResolvedSlice> {
    spec.slices
        .iter()
        .zip(chosen)
        .map(|(s, g)| {
            let mut gpus = g.unwrap_or_default();
            gpus.retain(|a| claimed.get(a).is_none_or(|owner| owner == &s.name));
            gpus.sort();
            ResolvedSlice {
                name: s.name.clone(),
                gpus,
                driver: s.driver,
                consumer: s.consumer.as_ref().and_then(resolved_consumer),
                servers: s.servers.clone(),
            }
        })
        .collect()
}

/// The consumer, if exactly one of LXC and VM is set.
fn resolved_consumer(c: &Consumer) -> Option<ResolvedConsumer> {
    match (&c.lxc, &c.vm) {
        (Some(l), None) => Some(ResolvedConsumer::Lxc(l.vmid)),
        (None, Some(v)) => Some(ResolvedConsumer::Vm {
            vmid: v.vmid,
            mapping: v.pci_mapping.clone(),
        }),
        _ => None,
    }
}

/// The IOMMU mode the partition expects; `Any` when it says nothing.
fn iommu_expectation(spec: &GpuPartitionSpec) -> IommuModeExpectation {
    spec.iommu
        .as_ref()
        .map(|i| i.mode)
        .unwrap_or(IommuModeExpectation::Any)
}

/// Whether GPU `a` already has the slice's driver (and, for LXC, is mounted in its container).
fn already_serves(host: &HostState, a: &str, s: &GpuSlice) -> bool {
    let Some(d) = host.pci_devices.get(a) else {
        return false;
    };
    if d.driver.as_deref() != Some(s.driver.sysfs_name()) {
        return false;
    }
    match s.consumer.as_ref().and_then(|c| c.lxc.as_ref()) {
        Some(l) => d.nvidia_minor.is_some_and(|m| {
            host.containers
                .get(&l.vmid)
                .is_some_and(|c| c.gpu_mounts.minors.contains(&m))
        }),
        None => true,
    }
}

/// `dddd:bb:dd.f`, lower-case hex.
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| {
        b[r].iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && hex(0..4)
        && hex(5..7)
        && hex(8..10)
        && (b'0'..=b'7').contains(&b[11])
}

/// A DNS label: lower-case letters, digits and `-`, not at either end; 1..=63 characters.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Proxmox `pve-configid`: letter first, then letters, digits, `-`, `_`; 2..=40 characters.
fn is_pve_configid(s: &str) -> bool {
    (2..=40).contains(&s.len())
        && s.as_bytes()[0].is_ascii_alphabetic()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}
