use super::*;
use crate::testutil::twin;

fn step_override(a: &str, d: Option<&str>) -> Step {
    Step::SetDriverOverride {
        address: a.into(),
        driver: d.map(str::to_string),
    }
}

/// The reference server's unit, in LXC 129.
fn qwen_unit() -> UnitRef {
    UnitRef {
        location: Location::Container(129),
        name: "sglang-qwen.service".into(),
    }
}

/// Writes the unit file `r`'s current file becomes after `edit`.
fn rewrite_unit(h: &mut SimHost, r: &UnitRef, edit: impl Fn(&str) -> String) {
    let old = h.observe().unwrap().unit(r).unwrap().file.clone().unwrap();
    h.apply(&Step::WriteUnit {
        unit: r.clone(),
        content: edit(&old),
    })
    .unwrap();
}

/// `systemctl restart`.
fn restart(h: &mut SimHost, r: &UnitRef) {
    h.apply(&Step::StartUnit {
        unit: r.clone(),
        restart: true,
    })
    .unwrap();
}

#[test]
fn probe_follows_driver_override_and_reports_success_even_when_nothing_binds() {
    let mut h = twin();
    let a = "0000:81:00.0";
    // The running server in LXC 129 holds the GPU: unbind refuses.
    let err = h
        .apply(&Step::Unbind {
            address: a.into(),
            driver: "nvidia".into(),
        })
        .unwrap_err();
    assert!(err.to_string().contains("held by"), "{err}");
    h.apply(&Step::StopContainer { vmid: 129 }).unwrap();
    h.apply(&step_override(a, Some("vfio-pci"))).unwrap();
    h.apply(&Step::Unbind {
        address: a.into(),
        driver: "nvidia".into(),
    })
    .unwrap();
    // vfio-pci is not loaded: the probe "succeeds" and nothing binds.
    h.apply(&Step::Probe { address: a.into() }).unwrap();
    assert_eq!(h.observe().unwrap().pci_devices[a].driver, None);
    h.apply(&Step::LoadDriver {
        driver: "vfio-pci".into(),
    })
    .unwrap();
    h.apply(&Step::Probe { address: a.into() }).unwrap();
    let st = h.observe().unwrap();
    assert_eq!(st.pci_devices[a].driver.as_deref(), Some("vfio-pci"));
    assert_eq!(
        st.pci_devices[a].nvidia_minor, None,
        "minors exist only while bound to nvidia"
    );
}

#[test]
fn systemd_runs_what_it_loaded() {
    let mut h = twin();
    let r = qwen_unit();
    rewrite_unit(&mut h, &r, |old| old.replace("--tp-size 8", "--tp-size 2"));
    let u = h.observe().unwrap().unit(&r).cloned().unwrap();
    assert!(u.needs_reload);
    restart(&mut h, &r);
    h.sleep(200);
    // Restarted without daemon-reload: still the tp-8 unit.
    let u = h.observe().unwrap().unit(&r).cloned().unwrap();
    assert_eq!(
        u.server
            .unwrap()
            .server_info
            .get("tp_size")
            .map(String::as_str),
        Some("8")
    );
    h.apply(&Step::DaemonReload {
        location: r.location,
    })
    .unwrap();
    assert!(h.observe().unwrap().unit(&r).unwrap().running_stale);
}

#[test]
fn server_with_p2p_on_a_corrupt_translated_host_hangs_after_loading() {
    let mut h = twin();
    let r = qwen_unit();
    // NCCL P2P off but custom all-reduce on: loads weights, then hangs (the reference story).
    rewrite_unit(&mut h, &r, |old| {
        old.replace(" --disable-custom-all-reduce", "")
    });
    h.apply(&Step::DaemonReload {
        location: r.location,
    })
    .unwrap();
    restart(&mut h, &r);
    h.sleep(20);
    let s20 = h
        .observe()
        .unwrap()
        .unit(&r)
        .unwrap()
        .server
        .clone()
        .unwrap();
    h.sleep(600);
    let u = h.observe().unwrap().unit(&r).cloned().unwrap();
    let s = u.server.unwrap();
    assert_eq!(u.active_state, "active");
    assert_eq!(s.gpu_memory_mib, vec![59_607; 8]);
    assert_eq!(
        s20.gpu_memory_mib, s.gpu_memory_mib,
        "memory flat after loading"
    );
    assert_eq!(s.http, HttpState::Refused);
    assert!(u.log_tail.last().unwrap().contains("Load weight end"));
}

#[test]
fn host_file_round_trips() {
    let h = twin();
    let text = h.save().unwrap().unwrap();
    let again = SimHost::from_yaml(&text, "saved").unwrap();
    assert_eq!(again.file, h.file);
}

#[test]
fn a_host_opened_from_a_file_writes_every_step_and_tick_to_it_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.yaml");
    std::fs::write(&path, crate::EMBEDDED_HOST).unwrap();
    let p = path.to_str().unwrap();
    let mut h = SimHost::open(p).unwrap();
    h.apply(&step_override("0000:81:00.0", Some("vfio-pci")))
        .unwrap();
    // Another process sees the write at once, and nothing else: no temporary file is left.
    let d = SimHost::load(p).unwrap().file.pci_devices[4].clone();
    assert_eq!(d.driver_override.as_deref(), Some("vfio-pci"));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["host.yaml"]);
    // The clock is the host's too.
    h.sleep(30);
    assert_eq!(SimHost::load(p).unwrap().file.clock, h.file.clock);
    // A host loaded (not opened) never writes its file.
    let mut mem = SimHost::load(p).unwrap();
    mem.apply(&step_override("0000:91:00.0", Some("vfio-pci")))
        .unwrap();
    mem.sleep(30);
    assert_eq!(SimHost::load(p).unwrap().file, h.file);
}
