//! The partition's GPU table (`status.gpus[]`, and the standalone status file): each GPU on the
//! bus with its place, identity (observed, or remembered by the ledger while it is on
//! `vfio-pci`), driver and owning slice, then the GPUs the ledger remembers and the bus no
//! longer shows; each with its health (`crate::health`) and its quarantine record (the
//! ledger's). Pure.

use crate::desired::DesiredPartition;
use crate::host::model::{HostState, PciDevice};
use crate::layout::matching::known_identities;
use gpuplane_crds::GpuStatus;

/// The table and the layout hash, for the GPUs of `dp`'s vendor on `host`; empty when the
/// partition has no layout terms (a stand-in).
pub fn table(dp: &DesiredPartition, host: &HostState) -> (Vec<GpuStatus>, Option<String>) {
    let Some(t) = &dp.layout else {
        return (vec![], None);
    };
    let observed: Vec<&PciDevice> = host.gpus(&t.gpu_vendor).collect();
    let ledger = host.gpu_ledger.as_ref().filter(|l| l.partition == dp.name);
    let known = known_identities(ledger, &observed);
    let owner = |a: &str| {
        dp.slices
            .iter()
            .find(|s| s.gpus.iter().any(|g| g == a))
            .map(|s| s.name.clone())
    };
    let mut rows: Vec<GpuStatus> = observed
        .iter()
        .map(|d| {
            let id = &known[d.address.as_str()];
            let entry =
                ledger.and_then(|l| l.gpus.iter().find(|g| !g.missing && g.address == d.address));
            let h = accepted(crate::health::judge(d, &host.gpu_events), entry);
            GpuStatus {
                address: d.address.clone(),
                slot: id.slot.clone(),
                path: id.path.clone(),
                uuid: id.uuid.clone(),
                serial: id.serial.clone(),
                dsn: id.dsn.clone(),
                numa: d.numa_node,
                group: d.iommu_group,
                driver: d.driver.clone().unwrap_or_else(|| "none".into()),
                owner: owner(&d.address),
                missing: false,
                health: Some(h.state),
                repair: h.repair,
                evidence: h.evidence,
                quarantine: entry.and_then(|g| g.quarantine.clone()),
            }
        })
        .collect();
    if let Some(l) = ledger {
        let m = crate::layout::matching::match_gpus(l, &observed);
        for i in m.missing {
            let g = &l.gpus[i];
            let h = crate::health::missing();
            rows.push(GpuStatus {
                address: g.address.clone(),
                slot: g.identity.slot.clone(),
                path: g.identity.path.clone(),
                uuid: g.identity.uuid.clone(),
                serial: g.identity.serial.clone(),
                dsn: g.identity.dsn.clone(),
                numa: g.numa_node,
                group: None,
                driver: "none".into(),
                owner: g.owner.clone(),
                missing: true,
                health: Some(h.state),
                repair: h.repair,
                evidence: h.evidence,
                quarantine: g.quarantine.clone(),
            });
        }
    }
    (rows, Some(crate::layout::layout_hash(&observed)))
}

/// A judgment whose evidence was accepted (a person's `accept-health`, or the proof after the
/// agent's reset) and that no quarantine holds reads Healthy, its evidence kept after a line
/// that says so: the kernel's counters and log lines stay until the next boot, and an alert on
/// them would fire for a GPU that serves again.
fn accepted(
    j: crate::health::Judgment,
    entry: Option<&crate::host::ledger::LedgerGpu>,
) -> crate::health::Judgment {
    let Some(hash) = entry
        .filter(|e| e.quarantine.is_none())
        .and_then(|e| e.accepted_health.as_deref())
    else {
        return j;
    };
    if j.evidence.is_empty() || crate::health::quarantine::evidence_hash(&j.evidence) != hash {
        return j;
    }
    let mut evidence = vec![format!(
        "evidence accepted ({hash}): it serves again; a new fault is judged anew"
    )];
    evidence.extend(j.evidence);
    evidence.truncate(crate::health::EVIDENCE_MAX);
    crate::health::Judgment {
        state: gpuplane_crds::GpuHealthState::Healthy,
        repair: None,
        evidence,
    }
}
