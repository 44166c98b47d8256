use super::*;
use crate::testutil::manifests;
use crate::webhook::agent::{AgentNode, Agents};
use gpuplane_crds::condition::Time;

fn request(kind: &str, op: &str, object: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "gpuplane.dev", "version": "v1alpha1", "kind": kind},
        "operation": op, "namespace": "default", "object": object}})
}

/// The review of `object` (serialized) by `kind` and `op`, against `cluster`.
fn review_of(kind: &str, op: &str, object: &impl serde::Serialize, cluster: &Cluster) -> Value {
    review(
        &request(kind, op, serde_json::to_value(object).unwrap()),
        cluster,
        &Agents::default(),
        &AgentNode::Unbound,
    )
}

/// The reference objects as the API server holds them (created a while ago).
fn cluster() -> Cluster {
    let mut m = manifests();
    let created: Time = serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
    for s in &mut m.servers {
        s.metadata.creation_timestamp = Some(created.clone());
    }
    for p in &mut m.partitions {
        p.metadata.creation_timestamp = Some(created.clone());
    }
    Cluster {
        partitions: m.partitions,
        servers: m.servers,
        served_nodes: None,
        unreadable: None,
    }
}

#[test]
fn the_reference_objects_are_admitted() {
    let m = manifests();
    let r = review_of("InferenceServer", "UPDATE", &m.servers[0], &cluster());
    assert_eq!(r["response"]["uid"], "u-1");
    assert_eq!(r["response"]["allowed"], true, "{r}");
    let r = review_of("GpuPartition", "CREATE", &m.partitions[0], &cluster());
    assert_eq!(r["response"]["allowed"], true, "{r}");
}

#[test]
fn a_spec_mistake_is_denied_with_the_clis_words() {
    let mut s = manifests().servers[0].clone();
    s.spec.model.served_name = "qwen\nExecStartPre=/bin/sh".into();
    s.spec.extra_args = vec!["--max-running-requests".into()];
    let r = review_of("InferenceServer", "CREATE", &s, &cluster());
    let resp = &r["response"];
    assert_eq!(resp["allowed"], false, "{r}");
    let m = resp["status"]["message"].as_str().unwrap();
    assert!(m.starts_with("invalid spec (reason InvalidSpec)"), "{m}");
    assert!(m.contains("InferenceServer/default/qwen35-122b: spec.model.servedName: cannot be written into a systemd unit"), "{m}");
    assert!(
        m.contains("spec.extraArgs[0]: --max-running-requests takes exactly one value"),
        "{m}"
    );
}

#[test]
fn a_second_server_on_a_used_unit_is_the_one_denied() {
    let mut s = manifests().servers[0].clone();
    s.metadata.name = Some("another".into());
    let r = review_of("InferenceServer", "CREATE", &s, &cluster());
    let m = r["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(r["response"]["allowed"], false, "{r}");
    assert!(
        m.contains("InferenceServer/default/another: spec.unit.name"),
        "{m}"
    );
}

#[test]
fn schema_mistakes_deletes_and_missing_partitions() {
    let mut v = serde_json::to_value(&manifests().servers[0]).unwrap();
    v["spec"]["listen"]["port"] = json!(70000);
    let r = review(
        &request("InferenceServer", "CREATE", v.clone()),
        &cluster(),
        &Agents::default(),
        &AgentNode::Unbound,
    );
    assert_eq!(r["response"]["allowed"], false);
    assert!(r["response"]["status"]["message"]
        .as_str()
        .unwrap()
        .contains("spec.listen.port"));
    // Deleting is always allowed.
    let r = review(
        &request("InferenceServer", "DELETE", v),
        &cluster(),
        &Agents::default(),
        &AgentNode::Unbound,
    );
    assert_eq!(r["response"]["allowed"], true);
    // A server before its partition (GitOps applies in any order): admitted, with a warning.
    let r = review(
        &request(
            "InferenceServer",
            "CREATE",
            serde_json::to_value(&manifests().servers[0]).unwrap(),
        ),
        &Cluster::default(),
        &Agents::default(),
        &AgentNode::Unbound,
    );
    assert_eq!(r["response"]["allowed"], true, "{r}");
    assert!(
        r["response"]["warnings"][0]
            .as_str()
            .unwrap()
            .contains("does not exist"),
        "{r}"
    );
}

/// Issue 22: a webhook that could not read the cluster never says the partition "does not
/// exist (yet)"; it says it could not check, and why.
#[test]
fn a_webhook_that_cannot_read_the_cluster_says_so_instead_of_guessing() {
    let unreadable = Cluster {
        unreadable: Some("listing GpuPartitions: forbidden".into()),
        ..Cluster::default()
    };
    let r = review_of(
        "InferenceServer",
        "CREATE",
        &manifests().servers[0],
        &unreadable,
    );
    assert_eq!(r["response"]["allowed"], true, "{r}");
    let w = r["response"]["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{r}");
    let w = w[0].as_str().unwrap();
    assert!(!w.contains("does not exist"), "{w}");
    assert!(w.contains("not checked") && w.contains("forbidden"), "{w}");
    // Its own checks still apply.
    let mut bad = manifests().servers[0].clone();
    bad.spec.listen.host = "0.0.0.0:30000".into();
    let r = review_of("InferenceServer", "CREATE", &bad, &unreadable);
    assert_eq!(r["response"]["allowed"], false, "{r}");
}

#[test]
fn a_server_without_its_partition_still_gets_its_own_checks() {
    let mut s = manifests().servers[0].clone();
    s.spec.listen.host = "0.0.0.0:30000".into();
    let r = review_of("InferenceServer", "CREATE", &s, &Cluster::default());
    assert_eq!(r["response"]["allowed"], false, "{r}");
    assert!(
        r["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.listen.host"),
        "{r}"
    );
}

/// Finding 2 at the door: a tenant's server in a namespace the slice does not list, or with
/// `Host` placement, an interpreter or an environment the admin did not allow, is refused by
/// `kubectl apply` with the field and the reason.
#[test]
fn a_tenant_asking_beyond_its_slice_is_denied() {
    type Edit = fn(&mut InferenceServer);
    let cases: [(&str, Edit); 4] = [
        (
            "metadata.namespace: namespace \"tenant-b\" may not use slice",
            |s| s.metadata.namespace = Some("tenant-b".into()),
        ),
        ("spec.python: \"/bin/sh\" is not an interpreter", |s| {
            s.spec.python = "/bin/sh".into()
        }),
        (
            "spec.env[3].name: BROWSER is not among the variables a server may set",
            |s| {
                s.spec.env.push(gpuplane_crds::EnvVar {
                    name: "BROWSER".into(),
                    value: "/bin/sh -c id".into(),
                })
            },
        ),
        (
            "spec.unit.name: ssh.service is outside the agent's unit names",
            |s| s.spec.unit.name = "ssh".into(),
        ),
    ];
    for (want, edit) in cases {
        let mut s = manifests().servers[0].clone();
        s.metadata.name = Some("intruder".into());
        edit(&mut s);
        let mut req = request(
            "InferenceServer",
            "CREATE",
            serde_json::to_value(&s).unwrap(),
        );
        req["request"]["namespace"] = json!(s.metadata.namespace.clone().unwrap());
        let r = review(&req, &cluster(), &Agents::default(), &AgentNode::Unbound);
        assert_eq!(r["response"]["allowed"], false, "{want}: {r}");
        let m = r["response"]["status"]["message"].as_str().unwrap();
        assert!(m.contains(want), "{want}: {m}");
    }
}

#[test]
fn letting_go_of_an_object_admitted_while_the_webhook_was_down_is_allowed() {
    // An invalid server (admitted under failurePolicy Ignore): removing its finalizer asks for
    // nothing new and must pass, or its deletion would hang.
    let mut old = serde_json::to_value(&manifests().servers[0]).unwrap();
    old["spec"]["listen"]["host"] = json!("0.0.0.0:30000");
    old["metadata"]["finalizers"] = json!(["gpuplane.dev/unit-cleanup"]);
    let mut new = old.clone();
    new["metadata"]["finalizers"] = json!([]);
    let mut r = request("InferenceServer", "UPDATE", new.clone());
    r["request"]["oldObject"] = old.clone();
    assert_eq!(
        review(&r, &cluster(), &Agents::default(), &AgentNode::Unbound)["response"]["allowed"],
        true
    );
    // A spec change of the same object is judged.
    new["spec"]["tensorParallelSize"] = json!(2);
    let mut r = request("InferenceServer", "UPDATE", new);
    r["request"]["oldObject"] = old;
    assert_eq!(
        review(&r, &cluster(), &Agents::default(), &AgentNode::Unbound)["response"]["allowed"],
        false
    );
}

/// A partition's nodeName cannot change (the CRD's CEL transition rule, held here for clusters
/// without CEL); its other fields can.
#[test]
fn a_partitions_node_name_is_immutable_at_the_door() {
    let old = serde_json::to_value(&manifests().partitions[0]).unwrap();
    let mut moved = old.clone();
    moved["spec"]["nodeName"] = json!("kpro7");
    let mut r = request("GpuPartition", "UPDATE", moved);
    r["request"]["oldObject"] = old.clone();
    let m = denied(&review(
        &r,
        &cluster(),
        &Agents::default(),
        &AgentNode::Unbound,
    ));
    assert!(m.contains("spec.nodeName: is immutable: "), "{m}");
    let mut kept = old.clone();
    kept["spec"]["deletionPolicy"] = json!("Restore");
    let mut r = request("GpuPartition", "UPDATE", kept);
    r["request"]["oldObject"] = old;
    let r = review(&r, &cluster(), &Agents::default(), &AgentNode::Unbound);
    assert_eq!(r["response"]["allowed"], true, "{r}");
}

/// A partition for a node no agent serves is admitted, with a warning that says so.
#[test]
fn a_partition_for_a_node_no_agent_serves_is_admitted_with_a_warning() {
    let m = manifests();
    let mut c = cluster();
    c.served_nodes = Some(["kpro6".to_string()].into());
    let r = review_of("GpuPartition", "CREATE", &m.partitions[0], &c);
    assert_eq!(r["response"]["allowed"], true);
    assert!(r["response"]["warnings"].is_null(), "{r}");
    let mut other = m.partitions[0].clone();
    other.metadata.name = Some("kpro7".into());
    other.spec.node_name = "kpro7".into();
    let r = review_of("GpuPartition", "CREATE", &other, &c);
    assert_eq!(r["response"]["allowed"], true);
    let w = r["response"]["warnings"][0].as_str().unwrap_or_default();
    assert!(
        w.contains("no gpuplane agent holds a Lease for node \"kpro7\""),
        "{r}"
    );
    // Unknown (the Leases could not be read): no warning.
    c.served_nodes = None;
    let r = review_of("GpuPartition", "CREATE", &other, &c);
    assert!(r["response"]["warnings"].is_null(), "{r}");
}

/// The message of a denied review, or a panic naming the review.
fn denied(r: &Value) -> String {
    assert_eq!(r["response"]["allowed"], false, "{r}");
    r["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Issue 37: a `GpuNodePool` reached no door; `maxUnavailable` of -1, "150%", "abc" and "25"
/// were admitted. Each is denied with the field and the fix; a count ≥ 0 or 0%–100% passes.
#[test]
fn a_pool_is_judged_at_the_door() {
    let pool = |max: Value| {
        json!({"apiVersion": "gpuplane.dev/v1alpha1", "kind": "GpuNodePool",
               "metadata": {"name": "inference-fleet"}, "spec": {"maxUnavailable": max}})
    };
    let judge = |max: Value| {
        review(
            &request("GpuNodePool", "CREATE", pool(max)),
            &Cluster::default(),
            &Agents::default(),
            &AgentNode::Unbound,
        )
    };
    for (bad, says) in [
        (
            json!(-1),
            "-1 is not a count ≥ 0 or a percentage 0%–100%; write e.g. 1 or \"25%\"",
        ),
        (
            json!("150%"),
            "\"150%\" is not a count ≥ 0 or a percentage 0%–100%; write e.g. 1 or \"25%\"",
        ),
        (
            json!("abc"),
            "\"abc\" is not a count ≥ 0 or a percentage 0%–100%; write e.g. 1 or \"25%\"",
        ),
        (
            json!("25"),
            "a count is written without quotes; write 25 or \"25%\"",
        ),
        (json!(1.5), "1.5 is neither a whole number nor a string"),
    ] {
        let m = denied(&judge(bad.clone()));
        assert!(
            m.starts_with("invalid spec (reason InvalidSpec)")
                && m.contains("GpuNodePool/inference-fleet")
                && m.contains("spec.maxUnavailable: ")
                && m.contains(says),
            "{bad}: {m}"
        );
    }
    for good in [
        json!(0),
        json!(2),
        json!("0%"),
        json!("25%"),
        json!("100%"),
        json!(null),
    ] {
        let r = judge(good.clone());
        assert_eq!(r["response"]["allowed"], true, "{good}: {r}");
    }
    // Unknown fields are the schema's, as for the other kinds.
    let mut typo = pool(json!(1));
    typo["spec"]["pasued"] = json!(true);
    let m = denied(&review(
        &request("GpuNodePool", "UPDATE", typo),
        &Cluster::default(),
        &Agents::default(),
        &AgentNode::Unbound,
    ));
    assert!(m.contains("spec.pasued: unknown field"), "{m}");
}

/// Issue 37: the pool label and the layout annotations of a partition are judged at
/// `kubectl apply`, with the fix.
#[test]
fn a_partitions_pool_label_and_layout_annotations_are_judged_at_the_door() {
    let cases: [(&str, &str, &str, &str); 4] = [
        (
            "labels",
            "gpuplane.dev/pool",
            "Fleet_A",
            "metadata.labels[\"gpuplane.dev/pool\"]: \"Fleet_A\" cannot be the name of a GpuNodePool",
        ),
        (
            "annotations",
            "gpuplane.dev/accept-layout",
            "yes",
            "metadata.annotations[\"gpuplane.dev/accept-layout\"]: \"yes\" is not a layout hash (12 lower-case hex digits); copy the hash from the partition's stall message",
        ),
        (
            "annotations",
            "gpuplane.dev/accept-health",
            "true",
            "metadata.annotations[\"gpuplane.dev/accept-health\"]: \"true\" is not a quarantine's hash (12 lower-case hex digits)",
        ),
        (
            "annotations",
            "gpuplane.dev/allow-unverified-gpus",
            "yes",
            "metadata.annotations[\"gpuplane.dev/allow-unverified-gpus\"]: \"yes\" is neither \"true\" nor \"false\"",
        ),
    ];
    for (map, key, value, says) in cases {
        let mut p = serde_json::to_value(&manifests().partitions[0]).unwrap();
        p["metadata"][map][key] = json!(value);
        let m = denied(&review(
            &request("GpuPartition", "UPDATE", p),
            &cluster(),
            &Agents::default(),
            &AgentNode::Unbound,
        ));
        assert!(m.contains(&format!("GpuPartition/kpro6: {says}")), "{m}");
    }
}

/// Issue 37: two slices on one NUMA node were denied naming `ffff:00:01.0`, an address of the
/// webhook's stand-in host that the node does not have. The denial names the NUMA node and the
/// slices.
#[test]
fn two_slices_on_one_numa_node_are_denied_in_the_users_terms() {
    let mut p = manifests().partitions[0].clone();
    p.spec.slices[1].gpus.numa_node = Some(0);
    let m = denied(&review_of("GpuPartition", "UPDATE", &p, &cluster()));
    assert!(
        m.contains("GpuPartition/kpro6: spec.slices[1].gpus.numaNode: NUMA node 0 is also the selector of slice \"inference\" (spec.slices[0])"),
        "{m}"
    );
    assert!(!m.contains("ffff:"), "a made-up address: {m}");
}
