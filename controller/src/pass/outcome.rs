//! What a pass yields for its door to publish: the conditions computed from the converge's
//! report, the servers for Prometheus, and the GPU rows; and the metrics every door records
//! alike ([`Outcome::record`]).

use super::Pass;
use crate::converge::Report;
use crate::desired::Desired;
use crate::discovery::select::{targets, Node};
use crate::host::model::HostState;
use crate::metrics::Metrics;
use crate::resource_key::ResourceKey;
use crate::status::ResourceStatus;
use std::collections::BTreeMap;

/// One GPU of the partition as the metrics show it (`gpuplane_gpus`, `gpuplane_gpu_owner`,
/// `gpuplane_gpu_health`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRow {
    pub slice: String,
    /// The PCI address as the host spells it (`0000:c1:00.0`).
    pub address: String,
    /// The bound driver; `none` when unbound.
    pub driver: String,
    /// Its health (`crate::health`), as `status.gpus[].health` says it.
    pub health: gpuplane_crds::GpuHealthState,
    /// Its quarantine's stage, while it is out of its slice (`status.gpus[].quarantine`).
    pub quarantine: Option<gpuplane_crds::QuarantineStage>,
}

/// The result of one pass, before the door publishes it.
pub struct Outcome {
    /// Conditions (and the partition's GPU table) per resource, at the pass's time.
    pub statuses: BTreeMap<ResourceKey, ResourceStatus>,
    /// The Ready servers with metrics, rendered for `/sd/servers` and file_sd (`discovery/`).
    pub targets: String,
    pub gpus: Vec<GpuRow>,
}

impl Pass {
    /// The outcome of `report`, the converge of `desired` on the node `node` (reached at
    /// `address` for host servers on a wildcard). `generations`: each resource's
    /// `metadata.generation` where the door has one (the API server), else empty.
    pub fn outcome(
        &self,
        desired: &Desired,
        report: &Report,
        generations: &BTreeMap<ResourceKey, i64>,
        node: &Node<'_>,
    ) -> Outcome {
        let statuses = crate::status::compute(desired, report, generations, &self.time());
        let host = final_host(report);
        let found = targets(desired, host, node, |s| {
            statuses
                .get(&ResourceKey::server_id(&s.id))
                .map(|st| st.conditions.as_slice())
                .unwrap_or(&[])
        });
        let table = statuses
            .get(&ResourceKey::partition(desired.partition.name.as_str()))
            .map(|st| st.gpus.as_slice())
            .unwrap_or(&[]);
        Outcome {
            targets: crate::discovery::render(&found),
            gpus: gpu_rows(desired, host, table),
            statuses,
        }
    }
}

impl Outcome {
    /// Records what every door records alike: host writes by kind, and the GPUs by slice and
    /// driver (`node`: the `node` label of `gpuplane_gpu_owner`).
    pub fn record(&self, metrics: &Metrics, report: &Report, node: &str) {
        for (kind, n) in &report.writes_by_kind {
            metrics.host_writes.with_label_values(&[kind]).inc_by(*n);
        }
        metrics.gpus.reset();
        metrics.gpu_owner.reset();
        metrics.gpu_health.reset();
        metrics.gpu_quarantined.reset();
        for g in &self.gpus {
            metrics.gpus.with_label_values(&[&g.slice, &g.driver]).inc();
            metrics
                .gpu_owner
                .with_label_values(&[
                    node,
                    &crate::metrics::dcgm_bus_id(&g.address),
                    &g.slice,
                    &g.driver,
                ])
                .set(1);
            metrics
                .gpu_health
                .with_label_values(&[
                    node,
                    &crate::metrics::dcgm_bus_id(&g.address),
                    &g.slice,
                    &format!("{:?}", g.health),
                ])
                .set(1);
            if let Some(stage) = g.quarantine {
                metrics
                    .gpu_quarantined
                    .with_label_values(&[
                        node,
                        &crate::metrics::dcgm_bus_id(&g.address),
                        &g.slice,
                        &format!("{stage:?}"),
                    ])
                    .set(1);
            }
        }
    }
}

/// Each GPU of the partition with its slice, the driver it is bound to on `host` and its health
/// as the partition's GPU table (`status.gpus[]`) says it, so the metric and the status cannot
/// disagree (a GPU the table does not list is not on the bus: Lost).
pub fn gpu_rows(
    desired: &Desired,
    host: &HostState,
    table: &[gpuplane_crds::GpuStatus],
) -> Vec<GpuRow> {
    desired
        .partition
        .slices
        .iter()
        .flat_map(|s| {
            s.gpus.iter().map(|g| {
                let row = table.iter().find(|r| r.address == *g && !r.missing);
                GpuRow {
                    slice: s.name.clone(),
                    address: g.clone(),
                    driver: host.driver_name(g),
                    health: row
                        .and_then(|r| r.health)
                        .unwrap_or(gpuplane_crds::GpuHealthState::Lost),
                    quarantine: row.and_then(|r| r.quarantine.as_ref()).map(|q| q.stage),
                }
            })
        })
        .collect()
}

/// The host as the pass left it (empty when it could not be observed).
pub fn final_host(report: &Report) -> &HostState {
    static EMPTY: std::sync::OnceLock<HostState> = std::sync::OnceLock::new();
    report
        .final_host
        .as_ref()
        .unwrap_or_else(|| EMPTY.get_or_init(Default::default))
}
