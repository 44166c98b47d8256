//! `gpuplane status --kubeconfig K`: the cluster's GpuPartitions and InferenceServers, as
//! `kubectl get` lists them, turned into the status files' shape (`resource` and the status's
//! fields), so one reader and one printer serve both sources.

use super::model::{self, Doc, Kind, Specs};
use gpuplane_crds::{GpuPartition, InferenceServer};
use kube::api::{Api, ListParams};

/// Most objects of each kind listed (one page; the view says when there were more).
pub const MAX_OBJECTS: u32 = 500;
/// An API server that does not answer within this long is reported, not waited on.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// Documents and specs of the objects given: a partition's `status` (conditions, `gpus[]`,
/// `layoutHash`, ...) under `resource: GpuPartition/<name>`, a server's under
/// `InferenceServer/<ns>/<name>`; the partitions' node and consumers. Pure.
pub fn docs_of(partitions: &[GpuPartition], servers: &[InferenceServer]) -> (Vec<Doc>, Specs) {
    let doc = |resource: String, status: serde_json::Value, kind: Kind| {
        let mut v = serde_json::json!({ "resource": resource });
        if let (Some(m), serde_json::Value::Object(s)) = (v.as_object_mut(), status) {
            m.extend(s);
        }
        Doc {
            origin: resource,
            kind,
            value: Ok(v),
        }
    };
    let name = |m: &kube::api::ObjectMeta| m.name.clone().unwrap_or_default();
    let mut docs = vec![];
    let mut specs = Specs::new();
    for p in partitions {
        let n = name(&p.metadata);
        let status = serde_json::to_value(&p.status).unwrap_or_default();
        docs.push(doc(format!("GpuPartition/{n}"), status, Kind::Partition));
        specs.insert(model::clean(&n, 253), model::spec_of(&p.spec));
    }
    for s in servers {
        let ns = s.metadata.namespace.clone().unwrap_or_default();
        let status = serde_json::to_value(&s.status).unwrap_or_default();
        docs.push(doc(
            format!("InferenceServer/{ns}/{}", name(&s.metadata)),
            status,
            Kind::Server,
        ));
    }
    (docs, specs)
}

/// A client of the cluster and a runtime to ask it on, kept for every read of a watch.
pub struct Cluster {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

impl Cluster {
    pub fn connect(kubeconfig: &std::path::Path) -> Result<Cluster, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let client = rt.block_on(crate::kubeapi::client(Some(kubeconfig)))?;
        Ok(Cluster { rt, client })
    }

    /// Lists both kinds (one page of [`MAX_OBJECTS`] each); notes say what was left out.
    pub fn read(&self) -> Result<(Vec<Doc>, Specs, Vec<String>), String> {
        let lp = ListParams::default().limit(MAX_OBJECTS);
        let parts: Api<GpuPartition> = Api::all(self.client.clone());
        let servers: Api<InferenceServer> = Api::all(self.client.clone());
        let (p, s) = self.rt.block_on(async {
            tokio::time::timeout(TIMEOUT, async {
                let p = parts
                    .list(&lp)
                    .await
                    .map_err(|e| format!("listing GpuPartitions: {e}"))?;
                let s = servers
                    .list(&lp)
                    .await
                    .map_err(|e| format!("listing InferenceServers: {e}"))?;
                Ok::<_, String>((p, s))
            })
            .await
            .map_err(|_| {
                format!(
                    "the API server did not answer within {}s",
                    TIMEOUT.as_secs()
                )
            })?
        })?;
        let mut notes = vec![];
        for (kind, more) in [
            (
                "GpuPartitions",
                p.metadata.continue_.is_some_and(|c| !c.is_empty()),
            ),
            (
                "InferenceServers",
                s.metadata.continue_.is_some_and(|c| !c.is_empty()),
            ),
        ] {
            if more {
                notes.push(format!(
                    "more than {MAX_OBJECTS} {kind}: the first {MAX_OBJECTS} shown"
                ));
            }
        }
        let (docs, specs) = docs_of(&p.items, &s.items);
        Ok((
            docs,
            specs,
            notes.into_iter().map(|n| model::clean(&n, 400)).collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuplane_crds::condition::{Condition, Time};

    fn condition(type_: &str, status: &str, reason: &str, at: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: format!("{type_} is {status}"),
            last_transition_time: Time(at.parse().unwrap()),
            observed_generation: Some(1),
        }
    }

    /// The cluster's objects print as the status files do: the GPU table with consumers from
    /// the partition's spec and its node, the conditions of every object with ages.
    #[test]
    fn objects_print_like_the_status_files() {
        let mut p: GpuPartition =
            serde_yaml::from_str(include_str!("../../../examples/kpro6/partition.yaml")).unwrap();
        let gpu = |a: &str, slot: &str, driver: &str, owner: &str, missing: bool| {
            gpuplane_crds::GpuStatus {
                address: a.into(),
                slot: Some(slot.into()),
                numa: 1,
                driver: driver.into(),
                owner: Some(owner.into()),
                missing,
                ..Default::default()
            }
        };
        p.status = Some(gpuplane_crds::GpuPartitionStatus {
            conditions: vec![
                condition("Ready", "False", "GpuMissing", "2026-12-03T14:00:00Z"),
                condition("Stalled", "True", "GpuMissing", "2026-12-03T14:00:00Z"),
            ],
            gpus: vec![
                gpu("0000:81:00.0", "5", "vfio-pci", "confidential-vm", false),
                gpu("0000:f1:00.0", "8", "none", "confidential-vm", true),
            ],
            layout_hash: Some("0b1c2d3e4f50".into()),
            ..Default::default()
        });
        let mut s: InferenceServer =
            serde_yaml::from_str(include_str!("../../../examples/kpro6/server.yaml")).unwrap();
        s.status = Some(gpuplane_crds::InferenceServerStatus {
            conditions: vec![condition(
                "Ready",
                "True",
                "ServerReady",
                "2026-12-02T15:00:00Z",
            )],
            ..Default::default()
        });
        // An object never reconciled has no status: listed, with no conditions.
        let mut fresh = s.clone();
        fresh.metadata.name = Some("fresh".into());
        fresh.status = None;
        let (docs, specs) = docs_of(&[p], &[s, fresh]);
        let now = "2026-12-03T15:00:00Z".parse().unwrap();
        let f = crate::status_view::frame(&docs, &specs, crate::status_view::Format::Table, now);
        assert_eq!(
            crate::status_view::render::print(&f, false),
            "GpuPartition/kpro6 (node kpro6, layout 0b1c2d3e4f50)
ADDRESS        SLOT   NUMA   DRIVER      OWNER             CONSUMER              HOLDER
0000:81:00.0   5      1      vfio-pci    confidential-vm   vm 200 (pro6000-vm)   -
0000:f1:00.0   8      1      (missing)   confidential-vm   vm 200 (pro6000-vm)   -

RESOURCE                              TYPE      STATUS   REASON        AGE
GpuPartition/kpro6                    Ready     False    GpuMissing    60m
GpuPartition/kpro6                    Stalled   True     GpuMissing    60m
InferenceServer/default/qwen35-122b   Ready     True     ServerReady   24h
InferenceServer/default/fresh         -         -        -             -
"
        );
    }
}
