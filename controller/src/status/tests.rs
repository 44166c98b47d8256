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
    let r = crate::converge::converge(
        &d,
        &mut crate::apply::Door::new(&mut h),
        &Default::default(),
    );
    let st = compute(&d, &r, &Default::default());
    let c = st["InferenceServer/default/qwen35-122b"]
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
