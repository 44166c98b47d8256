//! GPU peer-to-peer policy: whether a server may use P2P, and why not.
//!
//! Under a translating IOMMU (SEV-SNP forces one) GPU peer copies can be silently corrupted
//! while CUDA still reports P2P available. The decision is pure: it reads the spec's policy, the
//! observed IOMMU mode, logged IO_PAGE_FAULTs and cached probe results. The planner uses it to
//! render units and to schedule the probe; status uses it to explain `P2PSafe`. The probe
//! program itself is `probe.py` beside this file, run by the real host backend.

use crate::desired::DesiredServer;
use crate::host::model::{HostState, IommuMode};
use gpuplane_crds::P2pPolicy;
use std::collections::BTreeSet;

/// The P2P decision for one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum P2p {
    On,
    Off(String),
    /// A probe must run first.
    Probe(String),
}

/// Decides P2P for `s` from its policy, the IOMMU mode, faults and cached probe results.
pub fn decide_p2p(s: &DesiredServer, h: &HostState, rebound: &BTreeSet<String>) -> P2p {
    match s.spec.p2p {
        P2pPolicy::Enabled => return P2p::On,
        P2pPolicy::Disabled => return P2p::Off("p2p: Disabled in the spec".into()),
        P2pPolicy::Auto => {}
    }
    if s.gpus.len() < 2 || s.spec.tensor_parallel_size < 2 {
        return P2p::On;
    }
    let faults: Vec<String> = s
        .gpus
        .iter()
        .filter_map(|g| {
            h.iommu
                .page_faults
                .get(g)
                .filter(|n| **n > 0)
                .map(|n| format!("{g} ({n})"))
        })
        .collect();
    if !faults.is_empty() {
        return P2p::Off(format!(
            "IO_PAGE_FAULTs were logged for the slice's GPUs: {}; P2P DMA is being blocked or corrupted by the IOMMU",
            faults.join(", ")
        ));
    }
    let mode = h.iommu.mode();
    if mode != IommuMode::Translated {
        return P2p::On;
    }
    let why_probe = format!(
        "the IOMMU translates DMA{}; under translation GPU peer-to-peer copies can be silently corrupted while CUDA still reports P2P available, so p2p: Auto checks correctness first",
        if h.iommu.sev_snp { " (SEV-SNP forces it)" } else { "" }
    );
    let cached = if s.gpus.iter().any(|g| rebound.contains(g)) {
        None
    } else {
        h.p2p_probe(&s.gpus, s.unit.location)
    };
    match cached {
        None => P2p::Probe(why_probe),
        Some(p) if p.failing_pairs.is_empty() => P2p::On,
        Some(p) => P2p::Off(format!(
            "the P2P probe found corrupted copies between GPU pairs {} with the IOMMU translating DMA{}; NCCL_P2P_DISABLE=1 routes NCCL through host memory and --disable-custom-all-reduce stops SGLang's own CUDA-IPC P2P all-reduce (NCCL_P2P_DISABLE alone leaves the server hung after loading)",
            p.failing_pairs.join(", "),
            if h.iommu.sev_snp { " (SEV-SNP)" } else { "" }
        )),
    }
}
