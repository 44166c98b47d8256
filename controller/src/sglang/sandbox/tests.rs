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
