//! The partition's GPU table (`status.gpus[]`, and the standalone status file): each GPU on the
//! bus with its place, identity (observed, or remembered by the ledger while it is on
//! `vfio-pci`), driver and owning slice, then the GPUs the ledger remembers and the bus no
//! longer shows; each with its health (`crate::health`). Pure.

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
            let id = &known[&d.address];
            let h = crate::health::judge(d, &host.gpu_events);
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
            });
        }
    }
    (rows, Some(crate::layout::layout_hash(&observed)))
}
