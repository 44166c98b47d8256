//! Reconciler tests against a mocked API server (tower-test), in the style of
//! kube-rs/controller-rs fixtures: the mock answers every request the reconciler makes and records
//! it, and the test checks what a user would see in the API (status, events).

use super::*;
use crate::host::sim::SimHost;
use gpuplane_crds::kstatus::Kstatus;
use gpuplane_crds::{GpuPartition, InferenceServer};
use http::{Request, Response};
use kube::client::Body;
use std::sync::Mutex as StdMutex;

/// A request as the mock saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    body: serde_json::Value,
}

/// Starts a mock API server that serves `servers` for list calls, echoes patches and accepts
/// events; returns the client and the log of requests.
fn mock(
    partition: &GpuPartition,
    servers: Vec<InferenceServer>,
) -> (Client, Arc<StdMutex<Vec<Seen>>>) {
    let mut objects: Vec<serde_json::Value> = servers
        .iter()
        .map(|s| serde_json::to_value(s).unwrap())
        .collect();
    objects.push(serde_json::to_value(partition).unwrap());
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(StdMutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
            let body: serde_json::Value =
                serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
            log.lock().unwrap().push(Seen {
                method: method.clone(),
                path: path.clone(),
                body: body.clone(),
            });
            let reply = if method == "GET" && path.ends_with("/inferenceservers") {
                serde_json::json!({"apiVersion": "gpuplane.dev/v1alpha1", "kind": "InferenceServerList", "metadata": {}, "items": servers})
            } else if path.contains("/events") {
                let mut ev = body.clone();
                ev["metadata"]["resourceVersion"] = "1".into();
                ev
            } else {
                // A patch: answer with the stored object carrying the new status or finalizers.
                let is_status = path.ends_with("/status");
                let name = path.rsplit('/').nth(usize::from(is_status)).unwrap_or("");
                let mut obj = objects
                    .iter()
                    .find(|o| o["metadata"]["name"] == name)
                    .cloned()
                    .unwrap_or_default();
                if is_status {
                    obj["status"] = body["status"].clone();
                } else if let Some(f) = body["metadata"].get("finalizers") {
                    obj["metadata"]["finalizers"] = f.clone();
                }
                obj
            };
            send.send_response(
                Response::builder()
                    .status(200)
                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap(),
            );
        }
    });
    (Client::new(svc, "default"), seen)
}

fn ctx(client: Client, host: SimHost) -> Arc<Ctx> {
    let opts = RunOptions {
        node: "kpro6".into(),
        gpu_vendor: "10de".into(),
        gpu_driver: "nvidia".into(),
        kubeconfig: None,
        metrics_addr: "127.0.0.1:0".into(),
        health_addr: None,
        drift_interval: Duration::from_secs(30),
        poll_interval: Duration::from_secs(5),
        lease_namespace: "gpuplane-system".into(),
        lease_duration: Duration::from_secs(15),
        identity: "test".into(),
        watch_scope: super::scope::WatchScope::Node,
        sd_node_address: None,
        sd_token: None,
    };
    Arc::new(Ctx {
        client: client.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: MANAGER.into(),
                instance: None,
            },
        ),
        lease: NodeLease::new(client, "default", "kpro6", "test", Duration::from_secs(15)),
        opts,
        host: Arc::new(Mutex::new(Box::new(host))),
        metrics: metrics::Metrics::new().unwrap(),
        progress: Mutex::new(BTreeMap::new()),
        failures: Mutex::new(HashMap::new()),
        api_ok: Arc::new(AtomicBool::new(false)),
        wake: Default::default(),
    })
}

fn reference() -> (GpuPartition, InferenceServer) {
    let m = crate::testutil::manifests();
    let mut p = m.partitions[0].clone();
    p.metadata.generation = Some(1);
    let mut s = m.servers[0].clone();
    s.metadata.generation = Some(3);
    (p, s)
}

fn status_patches<'a>(seen: &'a [Seen], kind: &str) -> Vec<&'a serde_json::Value> {
    seen.iter()
        .filter(|r| r.method == "PATCH" && r.path.contains(kind) && r.path.ends_with("/status"))
        .map(|r| &r.body)
        .collect()
}

fn condition<'a>(status_patch: &'a serde_json::Value, t: &str) -> &'a serde_json::Value {
    status_patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == t)
        .unwrap()
}

/// kstatus's verdict on a status patch for an object at `generation`.
fn kstatus_of(status_patch: &serde_json::Value, generation: i64) -> (Kstatus, String) {
    let o = serde_json::json!({
        "metadata": { "generation": generation },
        "status": status_patch["status"],
    });
    let v = gpuplane_crds::kstatus::compute(&o);
    (v.status, v.reason)
}

#[tokio::test]
async fn converges_the_twin_and_reports_through_status_and_events() {
    let (p, s) = reference();
    let (client, seen) = mock(&p, vec![s]);
    let c = ctx(client, crate::testutil::twin());
    // First reconcile: the host is split and the server started; readiness is not awaited.
    let action = partition::apply(Arc::new(p.clone()), c.clone())
        .await
        .unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(5)),
        "a starting server is looked at again soon"
    );
    let log = seen.lock().unwrap().clone();
    let fin = log
        .iter()
        .find(|r| r.method == "PATCH" && r.path.ends_with("/inferenceservers/qwen35-122b"))
        .expect("finalizer added");
    assert_eq!(
        fin.body["metadata"]["finalizers"],
        serde_json::json!([SERVER_FINALIZER])
    );
    let ps = status_patches(&log, "gpupartitions");
    assert_eq!(ps.len(), 1);
    assert_eq!(condition(ps[0], "Ready")["status"], "True");
    assert_eq!(ps[0]["status"]["observedGeneration"], 1);
    assert!(ps[0]["status"]["lastAppliedPlan"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s.as_str().unwrap().contains("unbind 0000:81:00.0")));
    let ss = status_patches(&log, "inferenceservers");
    assert_eq!(condition(ss[0], "Ready")["status"], "False");
    assert_eq!(condition(ss[0], "Ready")["reason"], "Starting");
    assert_eq!(condition(ss[0], "P2PSafe")["reason"], "P2PCorruption");
    assert_eq!(ss[0]["status"]["observedGeneration"], 3);
    assert_eq!(kstatus_of(ps[0], 1), (Kstatus::Current, "Ready".into()));
    assert_eq!(
        kstatus_of(ss[0], 3),
        (Kstatus::InProgress, "Launching".into()),
        "a starting server is InProgress, not Failed"
    );
    let events: Vec<&Seen> = log.iter().filter(|r| r.path.contains("/events")).collect();
    assert!(
        events.iter().any(|e| e.body["reason"] == "HostChanged"
            && e.body["note"]
                .as_str()
                .unwrap_or("")
                .contains("stop container 129")),
        "{events:?}"
    );
    // The partition's events in the agent's namespace, the server's in its own: none in
    // default for the partition (tenants read default).
    for e in &events {
        let ns = e.body["metadata"]["namespace"].as_str().unwrap_or_default();
        let ns = if ns.is_empty() {
            e.path
                .split("/namespaces/")
                .nth(1)
                .and_then(|t| t.split('/').next())
                .unwrap_or_default()
        } else {
            ns
        };
        let kind = e.body["regarding"]["kind"].as_str().unwrap_or_default();
        let want = if kind == "GpuPartition" {
            "gpuplane-system"
        } else {
            "default"
        };
        assert_eq!(ns, want, "{e:?}");
    }

    // Time passes on the host; the next reconcile finds the server ready and asks for a drift check later.
    c.host.lock().unwrap().sleep(120);
    seen.lock().unwrap().clear();
    let action = partition::apply(Arc::new(p), c.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));
    let log = seen.lock().unwrap().clone();
    let ss = status_patches(&log, "inferenceservers");
    assert_eq!(condition(ss[0], "Ready")["status"], "True");
    assert_eq!(kstatus_of(ss[0], 3), (Kstatus::Current, "Ready".into()));
    // The container's address is not known from the host side (DHCP): no endpoint rather than
    // 0.0.0.0, which no client can use.
    assert!(ss[0]["status"]["endpoint"].is_null(), "{}", ss[0]["status"]);
    assert!(ss[0]["status"]["unitHash"]
        .as_str()
        .is_some_and(|h| h.len() == 64));
    assert!(
        !log.iter()
            .any(|r| r.path.contains("/events") && r.body["reason"] == "HostChanged"),
        "no host change, no event"
    );
    assert_eq!(c.metrics.servers_ready.get(), 1);
}

#[tokio::test]
async fn an_invalid_partition_is_reported_and_not_retried() {
    let (mut p, s) = reference();
    p.spec.slices[1].gpus.numa_node = Some(7);
    let (client, seen) = mock(&p, vec![s]);
    let host = crate::testutil::twin();
    let before = host.file.clone();
    let c = ctx(client, host);
    let action = partition::apply(Arc::new(p), c.clone()).await.unwrap();
    assert_eq!(
        action,
        Action::await_change(),
        "no retry storm: wait for a spec change"
    );
    let log = seen.lock().unwrap().clone();
    let ps = status_patches(&log, "gpupartitions");
    let ready = condition(ps[0], "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("InvalidSpec"))
    );
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("spec.slices[1].gpus.numaNode"),
        "{ready}"
    );
    assert_eq!(
        kstatus_of(ps[0], 1),
        (Kstatus::Failed, "InvalidSpec".into())
    );
    let ss = status_patches(&log, "inferenceservers");
    assert_eq!(condition(ss[0], "Ready")["reason"], "PartitionInvalid");
    assert_eq!(
        kstatus_of(ss[0], 3),
        (Kstatus::Failed, "PartitionInvalid".into())
    );
    assert!(log.iter().any(|r| r.path.contains("/events")
        && r.body["reason"] == "InvalidSpec"
        && r.body["type"] == "Warning"));
    // The host must be untouched.
    let after = {
        let h = c.host.lock().unwrap();
        h.save().unwrap().unwrap()
    };
    assert_eq!(after, serde_yaml::to_string(&before).unwrap());
}

#[tokio::test]
async fn a_deleted_server_has_its_unit_stopped_and_removed_then_is_released() {
    let (p, mut s) = reference();
    let (client, _) = mock(&p, vec![s.clone()]);
    let c = ctx(client, crate::testutil::twin());
    partition::apply(Arc::new(p.clone()), c.clone())
        .await
        .unwrap();
    // The server is deleted: it has our finalizer and a deletion timestamp.
    s.metadata.finalizers = Some(vec![SERVER_FINALIZER.into()]);
    s.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    let (client, seen) = mock(&p, vec![s]);
    let c2 = Arc::new(clone_ctx(&c, client));
    partition::apply(Arc::new(p), c2.clone()).await.unwrap();
    let st = c2.host.lock().unwrap().observe().unwrap();
    let unit = crate::host::model::UnitRef {
        location: crate::host::model::Location::Container(129),
        name: "sglang-qwen.service".into(),
    };
    assert!(st.unit(&unit).is_none(), "unit removed");
    let log = seen.lock().unwrap().clone();
    let release = log
        .iter()
        .find(|r| r.method == "PATCH" && r.path.ends_with("/inferenceservers/qwen35-122b"))
        .expect("finalizer released");
    assert_eq!(
        release.body["metadata"]["finalizers"],
        serde_json::json!([])
    );
    assert!(log
        .iter()
        .any(|r| r.path.contains("/events") && r.body["reason"] == "UnitRemoved"));
}

fn clone_ctx(c: &Ctx, client: Client) -> Ctx {
    Ctx {
        client: client.clone(),
        opts: c.opts.clone(),
        host: c.host.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: MANAGER.into(),
                instance: None,
            },
        ),
        metrics: metrics::Metrics::new().unwrap(),
        lease: NodeLease::new(client, "default", "kpro6", "test", Duration::from_secs(15)),
        progress: Mutex::new(BTreeMap::new()),
        failures: Mutex::new(HashMap::new()),
        api_ok: Arc::new(AtomicBool::new(false)),
        wake: Default::default(),
    }
}

#[test]
fn a_stale_cache_finalizer_conflict_is_retried_at_once_not_reported() {
    use kube::runtime::finalizer::Error as F;
    let api = |code: u16| {
        kube::Error::Api(
            kube::core::Status::failure("Invalid", "Invalid")
                .with_code(code)
                .boxed(),
        )
    };
    let stale = Error::Finalizer(Box::new(F::AddFinalizer(api(422))));
    assert!(super::is_stale_finalizer_race(&stale));
    let conflict = Error::Finalizer(Box::new(F::AddFinalizer(api(409))));
    assert!(super::is_stale_finalizer_race(&conflict));
    assert!(!super::is_stale_finalizer_race(&Error::Finalizer(
        Box::new(F::RemoveFinalizer(api(422)))
    )));
    // Our own patches that carry a resourceVersion: someone else's write in between is a 409.
    assert!(super::is_stale_finalizer_race(&Error::Finalizer(Box::new(
        F::ApplyFailed(Error::Kube(api(409)))
    ))));
    assert!(super::is_stale_finalizer_race(&Error::Finalizer(Box::new(
        F::CleanupFailed(Error::Kube(api(409)))
    ))));
    assert!(super::is_stale_finalizer_race(&Error::Finalizer(Box::new(
        F::RemoveFinalizer(api(409))
    ))));
    assert!(super::is_stale_finalizer_race(&Error::Kube(api(409))));
    assert!(!super::is_stale_finalizer_race(&Error::Kube(api(500))));
    assert!(!super::is_stale_finalizer_race(&Error::Finalizer(
        Box::new(F::ApplyFailed(Error::Kube(api(401))))
    )));
    assert!(!super::is_stale_finalizer_race(&Error::Finalizer(
        Box::new(F::AddFinalizer(api(403)))
    )));
    assert!(!super::is_stale_finalizer_race(&Error::RestoreUnfinished(
        "failed to add finalizer 422".into()
    )));
}

/// A reconcile that leaves a server starting comes back after the poll interval; the probe
/// reconciles the partition as soon as the server answers, and not before.
#[tokio::test]
async fn a_starting_server_that_answers_wakes_its_partition_before_the_poll_interval() {
    use futures::StreamExt;
    let (p, s) = reference();
    let (client, _seen) = mock(&p, vec![s]);
    let base = ctx(client.clone(), crate::testutil::twin());
    let action = partition::apply(Arc::new(p.clone()), base.clone())
        .await
        .unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(5)),
        "server starting"
    );
    let (wake, mut woken) = wake::Wake::new();
    let c = Arc::new(Ctx {
        wake,
        ..clone_ctx(&base, client)
    });
    let unit = crate::host::model::UnitRef {
        location: crate::host::model::Location::Container(129),
        name: "sglang-qwen.service".into(),
    };
    assert_eq!(
        c.host.lock().unwrap().probe_ready(&unit),
        Some(false),
        "the twin's server is still loading"
    );
    wake::probe_until_ready(&c, "kpro6", vec![unit.clone()], Duration::from_secs(1));
    let early = tokio::time::timeout(Duration::from_millis(1500), woken.next()).await;
    assert!(
        early.is_err(),
        "no wake while the server is loading: {early:?}"
    );
    // The first probe ends at its 1 s; on a starved machine it may end later, and a second
    // probe for the same partition is not started while one runs: wait for it to end.
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while c.wake.is_probing("kpro6") && std::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!c.wake.is_probing("kpro6"), "the first probe ends");
    // The simulated minutes of loading pass; the next probe sees 200.
    c.host.lock().unwrap().sleep(900);
    wake::probe_until_ready(&c, "kpro6", vec![unit], Duration::from_secs(30));
    let got = tokio::time::timeout(Duration::from_secs(25), woken.next())
        .await
        .expect("woken")
        .expect("a partition to reconcile");
    assert_eq!(got.name, "kpro6");
}

/// Issue 40: the Kubernetes agent follows the host's health facts between reconciles: nothing
/// changes, nothing is woken; the kernel logs an Xid for a GPU (the twin's live host file
/// replaced whole), and the partition is reconciled at once instead of at its drift interval.
#[tokio::test]
async fn a_gpu_fault_wakes_the_partitions_reconcile() {
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.yaml");
    std::fs::write(&path, crate::EMBEDDED_HOST).unwrap();
    let host = SimHost::live(path.to_str().unwrap(), 1).unwrap();
    let (p, s) = reference();
    let (client, _seen) = mock(&p, vec![s]);
    let base = ctx(client.clone(), host);
    let (wake, mut woken) = wake::Wake::new();
    let c = Arc::new(Ctx {
        wake,
        ..clone_ctx(&base, client)
    });
    wake::follow_health(&c, "kpro6");
    let quiet = tokio::time::timeout(Duration::from_millis(2500), woken.next()).await;
    assert!(quiet.is_err(), "no wake while nothing changes: {quiet:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    let tmp = dir.path().join(".host.yaml.new");
    std::fs::write(
        &tmp,
        format!("{text}\nkernelLog:\n  - \"NVRM: Xid (PCI:0000:e1:00): 48, pid=1, DBE\"\n"),
    )
    .unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), woken.next())
        .await
        .expect("woken by the fault")
        .expect("a partition to reconcile");
    assert_eq!(got.name, "kpro6");
}

/// One writer for refusals: the first says it (a status patch, the metric, one Warning event);
/// saying it again for the same generation costs no API write and no event; a new generation
/// is told again.
#[tokio::test]
async fn a_refusal_is_written_and_announced_once_per_generation() {
    use write_status::{refuse, Refusal};
    let (mut p, s) = reference();
    let (client, seen) = mock(&p, vec![s]);
    let c = ctx(client, crate::testutil::twin());
    let refusal = |p: &GpuPartition| Refusal {
        reason: crate::status::refusal::CONFLICT,
        status: crate::status::refusal::conflict(
            "node kpro6 is already claimed by GpuPartition old",
            p.metadata.generation,
            &crate::clock::now(),
        ),
        note: "node kpro6 is already claimed by GpuPartition old".into(),
        action: "Claim",
    };
    let events = |log: &[Seen]| log.iter().filter(|r| r.path.contains("/events")).count();
    refuse(&c, &p, refusal(&p), |_| {}).await.unwrap();
    let log = seen.lock().unwrap().clone();
    let patches = status_patches(&log, "gpupartitions");
    assert_eq!(patches.len(), 1, "{log:?}");
    assert_eq!(condition(patches[0], "Ready")["reason"], "Conflict");
    assert_eq!(events(&log), 1);
    let shown = c
        .metrics
        .conditions
        .with_label_values(&["GpuPartition", "", "kpro6", "Ready", "False", "Conflict"])
        .get();
    assert_eq!(shown, 1, "the metric shows the refusal");

    // The object as the API server now holds it: the same refusal again changes nothing.
    p.status = Some(serde_json::from_value(patches[0]["status"].clone()).unwrap());
    seen.lock().unwrap().clear();
    refuse(&c, &p, refusal(&p), |_| {}).await.unwrap();
    let log = seen.lock().unwrap().clone();
    assert!(status_patches(&log, "gpupartitions").is_empty(), "{log:?}");
    assert_eq!(events(&log), 0, "{log:?}");

    // A new generation that is refused for the same reason is told again.
    p.metadata.generation = Some(2);
    refuse(&c, &p, refusal(&p), |_| {}).await.unwrap();
    let log = seen.lock().unwrap().clone();
    let patches = status_patches(&log, "gpupartitions");
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0]["status"]["observedGeneration"], 2);
    assert_eq!(events(&log), 1);
}

/// A pool's change wakes exactly this agent's partitions of that pool that wait for a slot.
#[test]
fn a_pools_change_wakes_only_its_members_that_wait_for_a_slot() {
    let member = |name: &str, pool: &str, waiting: bool| {
        let (mut p, _) = reference();
        p.metadata.name = Some(name.into());
        p.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(gpuplane_crds::POOL_LABEL.into(), pool.into());
        let reason = if waiting {
            "WaitingForDisruptionBudget"
        } else {
            "Converged"
        };
        p.status = Some(gpuplane_crds::GpuPartitionStatus {
            conditions: vec![gpuplane_crds::condition::Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: reason.into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: crate::clock::now(),
            }],
            ..Default::default()
        });
        Arc::new(p)
    };
    let parts = vec![
        member("a", "fleet", true),
        member("b", "fleet", false),
        member("c", "other", true),
    ];
    let pool: gpuplane_crds::GpuNodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "gpuplane.dev/v1alpha1", "kind": "GpuNodePool",
        "metadata": {"name": "fleet"}, "spec": {}
    }))
    .unwrap();
    let woken: Vec<String> = budget::waiting_members(&parts, &pool)
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(woken, ["a"]);
}
