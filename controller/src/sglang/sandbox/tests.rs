use super::options;

/// Every unit runs without new privileges; the host adds the mount-namespace options.
#[test]
fn host_units_get_more_sandboxing_than_container_units() {
    let c = options(false);
    let h = options(true);
    assert!(c.contains(&("NoNewPrivileges".into(), "yes".into())));
    assert!(c.iter().all(|o| h.contains(o)));
    assert!(h.contains(&("ProtectSystem".into(), "full".into())));
    assert!(!c
        .iter()
        .any(|(k, _)| k == "ProtectSystem" || k == "PrivateTmp"));
    for banned in ["PrivateDevices", "MemoryDenyWriteExecute", "ProtectHome"] {
        assert!(
            !h.iter().any(|(k, _)| k == banned),
            "{banned} breaks SGLang"
        );
    }
}

#[test]
fn the_private_directory_is_plain_text_per_unit() {
    assert_eq!(
        super::runtime_directory("gpuplane-qwen.service"),
        "gpuplane/gpuplane-qwen"
    );
    assert_eq!(
        super::runtime_directory("sglang-qwen"),
        "gpuplane/sglang-qwen"
    );
    assert_eq!(super::runtime_directory("a@b\\x2d%n"), "gpuplane/a_b_x2d_n");
}
