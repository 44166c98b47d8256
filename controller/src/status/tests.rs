use super::*;

#[test]
fn nextn_running_as_eagle_is_not_drift_but_another_tp_is() {
    let spec = crate::testutil::manifests().servers[0].spec.clone();
    let mut info: BTreeMap<String, String> = [
        ("tp_size", "4"),
        ("speculative_algorithm", "EAGLE"),
        ("speculative_num_draft_tokens", "4"),
        ("mem_fraction_static", "0.85"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(effective_config_drift(&spec, &info), None);
    info.insert("tp_size".into(), "8".into());
    let d = effective_config_drift(&spec, &info).unwrap();
    assert!(d.contains("tp_size is 8, the spec says 4"), "{d}");
}

/// The story's third surprise: the container's NVIDIA userspace (565) did not match the host
/// kernel module (590).
#[test]
fn container_userspace_older_than_the_kernel_module_is_driver_mismatch() {
    let mut h = crate::testutil::twin();
    h.file
        .containers
        .get_mut(&129)
        .unwrap()
        .nvidia_userspace_version = Some("565.57.01".into());
    let d = crate::testutil::desired(&mut h, &crate::testutil::manifests());
    let r = crate::testutil::converged_run(&mut h, &d);
    let st = compute(&d, &r, &Default::default(), &crate::clock::now());
    let c = st[&crate::testutil::key("InferenceServer/default/qwen35-122b")]
        .condition("Degraded")
        .unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "DriverMismatch")
    );
    assert!(
        c.message.contains("565.57.01") && c.message.contains("590.44.01"),
        "{}",
        c.message
    );
}

/// A run stopped by another writer's Proxmox lock reads Reconciling (the lock expires by
/// itself), never Stalled, and says which lock.
#[test]
fn a_held_lock_is_reconciling_with_the_lock_named_not_stalled() {
    let mut host = crate::testutil::twin();
    let desired = crate::testutil::desired(&mut host, &crate::testutil::manifests());
    let report = Report {
        applied: vec![],
        writes: 0,
        writes_by_kind: Default::default(),
        final_plan: Default::default(),
        final_host: None,
        stop: Some(Stop::WaitingForLock {
            step: "set PCI mapping pro6000-vm".into(),
            lock: "/etc/pve/priv/lock/file-mapping_pci_cfg".into(),
            message: "/etc/pve/priv/lock/file-mapping_pci_cfg is held (taken 5 s ago)".into(),
        }),
        waits: Default::default(),
        notes: vec![],
    };
    let st = compute(&desired, &report, &Default::default(), &crate::clock::now());
    let p = &st[&crate::testutil::key("GpuPartition/kpro6")];
    let c = |t: &str| p.condition(t).unwrap();
    assert_eq!(
        (c("Ready").status.as_str(), c("Ready").reason.as_str()),
        ("False", "WaitingForLock")
    );
    assert!(
        c("Ready").message.contains("file-mapping_pci_cfg"),
        "{}",
        c("Ready").message
    );
    assert_eq!(c("Reconciling").status, "True");
    assert_eq!(c("Stalled").status, "False");
    for (res, s) in &st {
        assert_ne!(
            s.condition("Stalled").map(|c| c.status.as_str()),
            Some("True"),
            "{res}"
        );
    }
}

/// Issue 22: a serving server whose new spec is blocked (preflight failed) must not read
/// Current to kstatus: Stalled=True with the reason, while Ready says the previous spec's unit
/// keeps serving.
#[test]
fn a_serving_server_whose_new_spec_is_blocked_reads_stalled_and_says_the_old_unit_serves() {
    let mut host = crate::testutil::twin();
    let desired = crate::testutil::desired(&mut host, &crate::testutil::manifests());
    let done = {
        let mut door = crate::door::Door::new(&mut host);
        crate::converge::converge(&desired, &mut door, &Default::default())
    };
    assert!(done.converged());
    let res = crate::resource_key::ResourceKey::server_id(&desired.servers[0].id);
    let mut blocked = done.clone();
    blocked.final_plan.blockers.push(crate::plan::Blocker {
        resource: res.clone(),
        reason: crate::plan::Reason::PreflightFailed,
        message: "preflight failed, nothing was changed: shard 39 is cut short".into(),
    });
    blocked.stop = Some(Stop::Blocked {
        blockers: blocked.final_plan.blockers.clone(),
    });
    let ok = compute(&desired, &done, &Default::default(), &crate::clock::now());
    assert_eq!(ok[&res].condition("Stalled").unwrap().status, "False");
    let st = compute(
        &desired,
        &blocked,
        &Default::default(),
        &crate::clock::now(),
    );
    let c = |t: &str| st[&res].condition(t).unwrap().clone();
    assert_eq!(c("Ready").status, "True");
    assert!(
        c("Ready").message.contains("previous spec"),
        "{}",
        c("Ready").message
    );
    assert_eq!(
        (c("Stalled").status.as_str(), c("Stalled").reason.as_str()),
        ("True", "PreflightFailed")
    );
    assert!(
        c("Stalled").message.contains("shard 39"),
        "{}",
        c("Stalled").message
    );
    assert_eq!(c("Reconciling").status, "False");
}

/// A server in a container listening on every address is reached at the container's address:
/// that is its endpoint, not `0.0.0.0` (which no client can use); with DHCP (the reference
/// container) the host side knows no address, and the endpoint is unknown, saying so.
#[test]
fn a_container_servers_endpoint_is_the_containers_address() {
    let mut host = crate::testutil::twin();
    let desired = crate::testutil::desired(&mut host, &crate::testutil::manifests());
    let s = &desired.servers[0];
    assert_eq!(s.spec.listen.host, "0.0.0.0");
    let converge = |host: &mut crate::host::sim::SimHost| {
        let mut door = crate::door::Door::new(host);
        assert!(crate::converge::converge(&desired, &mut door, &Default::default()).converged());
    };
    converge(&mut host);
    use crate::host::Host;
    // DHCP: the host side knows no address; 0.0.0.0 is none a client can use (issue 37).
    assert_eq!(endpoint(s, &host.observe().unwrap()), None);
    let words = endpoint_words(s, &host.observe().unwrap());
    assert!(
        words.contains("port 30000 of container 129") && words.contains("unknown"),
        "{words}"
    );

    let c = host.file.containers.get_mut(&129).unwrap();
    c.config = c.config.replace("ip=dhcp", "ip=10.20.0.129/24");
    converge(&mut host);
    let observed = host.observe().unwrap();
    assert_eq!(
        endpoint(s, &observed).as_deref(),
        Some("http://10.20.0.129:30000")
    );
    let res = crate::resource_key::ResourceKey::server_id(&s.id);
    let done = {
        let mut door = crate::door::Door::new(&mut host);
        crate::converge::converge(&desired, &mut door, &Default::default())
    };
    let st = compute(&desired, &done, &Default::default(), &crate::clock::now());
    let ready = st[&res].condition("Ready").unwrap();
    assert!(
        ready.message.starts_with("http://10.20.0.129:30000 serves"),
        "{}",
        ready.message
    );
}
