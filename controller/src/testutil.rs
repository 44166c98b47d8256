//! Shared fixtures for unit tests: the reference twin and the reference split, resolved.

use crate::desired::{resolve_partition, resolve_server, Desired};
use crate::host::sim::SimHost;
use crate::host::Host;
use crate::manifests::Manifests;

/// The embedded reference twin.
pub fn twin() -> SimHost {
    SimHost::from_yaml(crate::EMBEDDED_HOST, "twin").expect("twin loads")
}

/// The reference manifests.
pub fn manifests() -> Manifests {
    let mut m = Manifests::default();
    for (n, t) in crate::EMBEDDED_MANIFESTS {
        m.add_text(t, n).expect("manifests parse");
    }
    m
}

/// The reference split resolved against `host`.
pub fn desired(host: &mut SimHost, m: &Manifests) -> Desired {
    let st = host.observe().expect("observe");
    let partition =
        resolve_partition(&m.partitions[0], &st, "10de", "nvidia").expect("partition valid");
    let servers = m
        .servers
        .iter()
        .map(|s| resolve_server(s, &partition).expect("server valid"))
        .collect();
    Desired {
        partition,
        servers,
        removed_units: vec![],
    }
}

/// A converge of `d` on `h` with the CLI's options (blocking on readiness), through the door.
pub fn converged_run(h: &mut SimHost, d: &Desired) -> crate::converge::Report {
    crate::converge::converge(d, &mut crate::door::Door::new(h), &Default::default())
}

/// Kernel arguments no partition may write by default: a shell at boot, a preloaded library, a
/// debug shell, single-user mode, vfio-pci blacklisted, the IOMMU off, an unlisted key.
pub const DANGEROUS_KERNEL_ARGS: &[&str] = &[
    "systemd.run=/bin/sh",
    "systemd.setenv=LD_PRELOAD=/tmp/x.so",
    "rd.break",
    "single",
    "module_blacklist=vfio_pci",
    "iommu=off",
    "console=ttyS0",
];

/// Two slices that both select NUMA node 0 (list items of `spec.slices`, indented by four): one
/// problem, named in the spec's terms at every door.
pub const TWO_ON_NUMA_0: &str = "    - {name: inference, gpus: {numaNode: 0}, driver: nvidia}
    - {name: training, gpus: {numaNode: 0}, driver: nvidia}
";

/// A host that meets every prerequisite of an SEV-SNP guest with GPUs (SNP API 1.55).
pub fn snp_ready() -> crate::host::model::ConfidentialFacts {
    crate::host::model::ConfidentialFacts {
        kvm_sev_snp: Some(true),
        dev_sev: true,
        snp_api: Some("1.55".into()),
        kernel_refusals: vec![],
        proxmox_snp: Some(true),
        vfio_disable_idle_d3: Some(true),
    }
}

/// Cases for a property test: `PROPTEST_CASES` when set (the long runs of `docs/RELIABILITY.md`),
/// else `default` (bounded, for CI).
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A property test's settings: [`cases`]`(default)` cases, no failure files written into the
/// source tree.
pub fn fuzz_config(default: u32) -> proptest::prelude::ProptestConfig {
    proptest::prelude::ProptestConfig {
        cases: cases(default),
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    }
}

/// Text made of `tokens` of a grammar with arbitrary snippets in between: fuzz input that reaches
/// a parser's interesting branches, not only its "no match" one.
pub fn noisy(tokens: &'static [&'static str]) -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let piece = prop_oneof![
        4 => prop::sample::select(tokens).prop_map(str::to_string),
        1 => "(?s).{0,6}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

/// Sets the mtime of `path` (a file or a directory) `secs` seconds into the past: what the
/// passage of time does to a lock or a staged file, for rules that read the mtime.
pub fn set_mtime_ago(path: &std::path::Path, secs: u64) {
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
    std::fs::File::open(path)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(then))
        .unwrap();
}

/// The resource key printed as `text` (`GpuPartition/kpro6`); panics on anything else.
pub fn key(text: &str) -> crate::resource_key::ResourceKey {
    text.parse().unwrap()
}

/// `m`'s partitions with `spec.health.quarantine: Never`: a GPU gone from the bus then stalls its
/// slice (`GpuMissing`, the layout guard's answer) instead of being quarantined.
pub fn without_quarantine(m: &mut Manifests) {
    for p in &mut m.partitions {
        p.spec.health = Some(gpuplane_crds::HealthPolicy {
            quarantine: gpuplane_crds::QuarantinePolicy::Never,
            ..Default::default()
        });
    }
}
