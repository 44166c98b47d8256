//! The reconcilers' calls into Kubernetes that are not status: listing a partition's servers,
//! server finalizers, and events.

use super::{Ctx, Error};
use gpuplane_crds::InferenceServer;
use kube::runtime::events::{Event, EventType};
use kube::{Api, ResourceExt};

/// Finalizer on InferenceServers: their unit is stopped and removed before they go.
pub const SERVER_FINALIZER: &str = "gpuplane.dev/unit-cleanup";

/// Every `InferenceServer` (of any namespace) of this agent's scope (labelled for its node)
/// whose `partitionRef` names `partition`.
pub(super) async fn servers_of(ctx: &Ctx, partition: &str) -> Result<Vec<InferenceServer>, Error> {
    let all: Api<InferenceServer> = Api::all(ctx.client.clone());
    Ok(all
        .list(&super::scope::list_params(
            ctx.opts.watch_scope,
            &ctx.opts.node,
        ))
        .await?
        .items
        .into_iter()
        .filter(|s| s.spec.partition_ref.name == partition)
        .collect())
}

/// Whether the server carries our finalizer.
pub(super) fn has_server_finalizer(s: &InferenceServer) -> bool {
    s.finalizers().iter().any(|f| f == SERVER_FINALIZER)
}

/// Replaces the server's finalizers (a merge patch that tests the resource version it saw).
pub(super) async fn set_finalizers(
    ctx: &Ctx,
    s: &InferenceServer,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let api: Api<InferenceServer> =
        Api::namespaced(ctx.client.clone(), &s.namespace().unwrap_or_default());
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": s.resource_version()}});
    api.patch(
        &s.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Takes our finalizer off a server, letting it go.
pub(super) async fn release_server(ctx: &Ctx, s: &InferenceServer) -> Result<(), Error> {
    let f: Vec<String> = s
        .finalizers()
        .iter()
        .filter(|f| *f != SERVER_FINALIZER)
        .cloned()
        .collect();
    set_finalizers(ctx, s, f).await
}

/// Publishes an event about `obj_ref`; a failure to publish is logged, never fatal.
pub(super) async fn publish(
    ctx: &Ctx,
    obj_ref: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    // Events of the cluster-scoped partition live in the agent's own namespace, not in
    // "default" where every tenant may read them (their notes name host changes and crash
    // tails); a server's stay in the server's namespace. API servers before 1.22 insist that
    // the regarding object's namespace equals the event's. `kubectl describe gpupartition`
    // finds them in any namespace.
    let mut obj_ref = obj_ref.clone();
    if obj_ref.namespace.as_deref().unwrap_or("").is_empty() {
        obj_ref.namespace = Some(ctx.opts.lease_namespace.clone());
    }
    let obj_ref = &obj_ref;
    // Untrusted text (crash logs, probe details, spec text) reaches notes: one line, capped on a
    // character boundary (`String::truncate` panicked inside a multi-byte character).
    let note = crate::text::sanitize(&note, crate::text::EVENT_NOTE_MAX);
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, obj_ref).await {
        tracing::warn!("cannot publish event {reason}: {e}");
    }
}
