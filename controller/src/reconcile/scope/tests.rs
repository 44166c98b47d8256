use super::*;
use gpuplane_crds::{GpuPartition, InferenceServer};

fn partition(name: &str, node: &str, label: Option<&str>) -> GpuPartition {
    let mut v = serde_json::json!({
        "apiVersion": "gpuplane.dev/v1alpha1", "kind": "GpuPartition",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "slices": []}
    });
    if let Some(l) = label {
        v["metadata"]["labels"] = serde_json::json!({ NODE_LABEL: l });
    }
    serde_json::from_value(v).unwrap()
}

fn server(label: Option<&str>) -> InferenceServer {
    let mut v = serde_json::json!({
        "apiVersion": "gpuplane.dev/v1alpha1", "kind": "InferenceServer",
        "metadata": {"name": "qwen", "namespace": "ml"},
        "spec": {
            "partitionRef": {"name": "kpro6", "slice": "inference"},
            "unit": {"name": "sglang-qwen", "location": "Host"},
            "python": "/usr/bin/python3",
            "model": {"path": "/models/q", "servedName": "q"},
            "tensorParallelSize": 1
        }
    });
    if let Some(l) = label {
        v["metadata"]["labels"] = serde_json::json!({ NODE_LABEL: l });
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_label_key_is_the_one_outside_checks_rely_on() {
    assert_eq!(NODE_LABEL, "gpuplane.dev/node");
    assert_eq!(node_selector("kpro6"), "gpuplane.dev/node=kpro6");
    assert_eq!(unlabelled_selector(), "!gpuplane.dev/node");
}

#[test]
fn node_scope_selects_by_label_and_cluster_scope_selects_everything() {
    let w = watch_config(WatchScope::Node, "kpro6");
    assert_eq!(w.label_selector.as_deref(), Some("gpuplane.dev/node=kpro6"));
    assert_eq!(
        w.list_semantic,
        watcher::ListSemantic::Any,
        "listed from the watch cache"
    );
    assert_eq!(w.page_size, None, "a paged list would go to etcd");
    assert_eq!(
        unlabelled_config().label_selector.as_deref(),
        Some("!gpuplane.dev/node")
    );
    let l = list_params(WatchScope::Node, "kpro6");
    assert_eq!(l.label_selector.as_deref(), Some("gpuplane.dev/node=kpro6"));
    assert_eq!(
        l.resource_version.as_deref(),
        Some("0"),
        "served from the watch cache"
    );
    assert_eq!(
        watch_config(WatchScope::Cluster, "kpro6").label_selector,
        None
    );
    assert_eq!(
        list_params(WatchScope::Cluster, "kpro6").label_selector,
        None
    );
    assert_eq!(WatchScope::default(), WatchScope::Node);
}

#[test]
fn a_partition_labelled_with_its_node_has_no_problem() {
    assert_eq!(
        partition_problem(&partition("kpro6", "kpro6", Some("kpro6"))),
        None
    );
}

#[test]
fn a_partition_without_the_label_is_told_the_command_that_fixes_it() {
    let p = partition_problem(&partition("kpro6", "kpro6", None)).unwrap();
    assert_eq!(p.reason, NODE_LABEL_MISSING);
    assert!(
        p.message
            .contains("kubectl label --overwrite gpupartition/kpro6 gpuplane.dev/node=kpro6"),
        "{}",
        p.message
    );
}

#[test]
fn a_partition_labelled_for_another_node_is_a_mismatch_naming_both() {
    let p = partition_problem(&partition("kpro6", "kpro6", Some("kpro7"))).unwrap();
    assert_eq!(p.reason, NODE_LABEL_MISMATCH);
    assert!(
        p.message.contains("gpuplane.dev/node=kpro7"),
        "{}",
        p.message
    );
    assert!(
        p.message.contains("gpuplane.dev/node=kpro6"),
        "{}",
        p.message
    );
}

#[test]
fn a_server_must_carry_its_partitions_node() {
    let p = partition("kpro6", "kpro6", Some("kpro6"));
    assert_eq!(server_problem(&server(Some("kpro6")), &p), None);
    let missing = server_problem(&server(None), &p).unwrap();
    assert_eq!(missing.reason, NODE_LABEL_MISSING);
    assert!(
        missing
            .message
            .contains("inferenceserver/qwen -n ml gpuplane.dev/node=kpro6"),
        "{}",
        missing.message
    );
    let wrong = server_problem(&server(Some("other")), &p).unwrap();
    assert_eq!(wrong.reason, NODE_LABEL_MISMATCH);
}

#[test]
fn counted_counts_objects_received_not_list_markers() {
    use futures::StreamExt;
    let c = prometheus::IntCounter::new("t", "t").unwrap();
    let p = partition("kpro6", "kpro6", Some("kpro6"));
    let events: Vec<Result<watcher::Event<GpuPartition>, watcher::Error>> = vec![
        Ok(watcher::Event::Init),
        Ok(watcher::Event::InitApply(p.clone())),
        Ok(watcher::Event::InitDone),
        Ok(watcher::Event::Apply(p.clone())),
        Ok(watcher::Event::Delete(p)),
    ];
    let n = futures::executor::block_on(counted(futures::stream::iter(events), c.clone()).count());
    assert_eq!(n, 5, "every event passes through");
    assert_eq!(c.get(), 3);
}
