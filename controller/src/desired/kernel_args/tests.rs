use crate::desired::resolve_partition;
use crate::host::Host;
use crate::testutil::{manifests, twin};
use gpuplane_crds::{HostSpec, KernelArgs, MaintenanceWindow, RebootPolicy};

/// The reference partition with `host`, resolved on the twin: the errors as (field, message).
fn check(host: HostSpec) -> Result<Option<KernelArgs>, Vec<(String, String)>> {
    let mut m = manifests();
    m.partitions[0].spec.host = Some(host);
    let st = twin().observe().unwrap();
    resolve_partition(&m.partitions[0], &st, "10de", "nvidia")
        .map(|d| d.kernel_args)
        .map_err(|e| e.into_iter().map(|e| (e.field, e.message)).collect())
}

fn args(present: &[&str], absent: &[&str]) -> HostSpec {
    HostSpec {
        kernel_args: Some(KernelArgs {
            present: present.iter().map(|s| s.to_string()).collect(),
            absent: absent.iter().map(|s| s.to_string()).collect(),
        }),
        reboot: RebootPolicy::Manual,
        maintenance_window: None,
    }
}

#[test]
fn valid_arguments_resolve() {
    let k = check(args(&["vfio-pci.disable_idle_d3=1"], &["iommu=pt"]))
        .unwrap()
        .unwrap();
    assert_eq!(k.present, ["vfio-pci.disable_idle_d3=1"]);
    assert_eq!(
        check(args(&[], &[])).unwrap(),
        None,
        "an empty list manages nothing"
    );
    assert_eq!(check(HostSpec::default()).unwrap(), None);
}

/// `check` with the reference partition labelled for pool `fleet`.
fn check_in_pool(host: HostSpec) -> Result<Option<KernelArgs>, Vec<(String, String)>> {
    let mut m = manifests();
    m.partitions[0].spec.host = Some(host);
    m.partitions[0]
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(gpuplane_crds::POOL_LABEL.into(), "fleet".into());
    let st = twin().observe().unwrap();
    resolve_partition(&m.partitions[0], &st, "10de", "nvidia")
        .map(|d| d.kernel_args)
        .map_err(|e| e.into_iter().map(|e| (e.field, e.message)).collect())
}

fn window(start: &str, end: &str) -> Option<MaintenanceWindow> {
    Some(MaintenanceWindow {
        start: start.into(),
        end: end.into(),
        days: vec![],
    })
}

#[test]
fn auto_reboot_needs_a_pool_or_a_maintenance_window() {
    let auto = HostSpec {
        reboot: RebootPolicy::Auto,
        ..args(&["a=1"], &[])
    };
    let e = check(auto.clone()).unwrap_err();
    assert_eq!(e[0].0, "spec.host.reboot");
    assert!(
        e[0].1
            .starts_with("Auto needs permission to disrupt the host")
            && e[0].1.contains("gpuplane.dev/pool")
            && e[0].1.contains("maintenanceWindow")
            && e[0].1.contains("or use Manual"),
        "{}",
        e[0].1
    );
    assert!(check_in_pool(auto.clone()).is_ok(), "a pool member");
    assert!(check(HostSpec {
        maintenance_window: window("02:00", "04:00"),
        ..auto.clone()
    })
    .is_ok());
    // A window that is no window, and a window Manual would ignore.
    let e = check(HostSpec {
        maintenance_window: window("2am", "04:00"),
        ..auto
    })
    .unwrap_err();
    assert_eq!(e[0].0, "spec.host.maintenanceWindow");
    assert!(e[0].1.contains("HH:MM"), "{}", e[0].1);
    let e = check(HostSpec {
        maintenance_window: window("02:00", "04:00"),
        ..args(&["a=1"], &[])
    })
    .unwrap_err();
    assert_eq!(e[0].0, "spec.host.maintenanceWindow");
    assert!(e[0].1.contains("only read with reboot: Auto"), "{}", e[0].1);
}

#[test]
fn bad_arguments_name_their_field_and_what_to_fix() {
    let e = check(args(
        &["ok=1", "a b", "x;reboot", "dup=1", "dup=1"],
        &["ok=1", "init=/bin/sh"],
    ))
    .unwrap_err();
    let fields: Vec<&str> = e.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.host.kernelArgs.present[1]",
            "spec.host.kernelArgs.present[2]",
            "spec.host.kernelArgs.present[4]",
            "spec.host.kernelArgs.absent[0]",
            "spec.host.kernelArgs.absent[1]",
        ]
    );
    assert!(e[0].1.contains("whitespace"), "{}", e[0].1);
    assert!(e[1].1.contains("';'"), "{}", e[1].1);
    assert!(e[2].1.contains("listed twice"), "{}", e[2].1);
    assert!(e[3].1.contains("both present and absent"), "{}", e[3].1);
    assert!(e[4].1.contains("boots into"), "{}", e[4].1);
    let many: Vec<String> = (0..33).map(|i| format!("a{i}=1")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let e = check(args(&many, &[])).unwrap_err();
    assert!(e[0].1.contains("at most 32"), "{}", e[0].1);
}
