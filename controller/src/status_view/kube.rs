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
mod tests;
