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

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn args(present: &[&str], absent: &[&str]) -> HostSpec {
    opted_in(present, absent, &[])
}

/// `args` with `allowKeys`.
fn opted_in(present: &[&str], absent: &[&str], allow_keys: &[&str]) -> HostSpec {
    HostSpec {
        kernel_args: Some(KernelArgs {
            present: strings(present),
            absent: strings(absent),
            allow_keys: strings(allow_keys),
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
        ..args(&["vfio-pci.disable_idle_d3=1"], &[])
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
        ..args(&["vfio-pci.disable_idle_d3=1"], &[])
    })
    .unwrap_err();
    assert_eq!(e[0].0, "spec.host.maintenanceWindow");
    assert!(e[0].1.contains("only read with reboot: Auto"), "{}", e[0].1);
}

#[test]
fn bad_arguments_name_their_field_and_what_to_fix() {
    let e = check(args(
        &[
            "vfio-pci.disable_vga=1",
            "a b",
            "x;reboot",
            "iommu.strict=1",
            "iommu.strict=1",
        ],
        &["vfio-pci.disable_vga=1", "init=/bin/sh"],
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
    let many: Vec<String> = (0..33)
        .map(|i| format!("vfio-pci.ids=10de:{i:04}"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let e = check(args(&many, &[])).unwrap_err();
    assert!(e[0].1.contains("at most 32"), "{}", e[0].1);
}

/// Issue 37: the allow-list at the agent's door (the partition resolved on the host), each
/// refusal naming its field and what to do.
#[test]
fn unlisted_and_dangerous_arguments_are_refused_by_default() {
    let bad = crate::testutil::DANGEROUS_KERNEL_ARGS;
    let e = check(args(bad, &[])).unwrap_err();
    let fields: Vec<&str> = e.iter().map(|(f, _)| f.as_str()).collect();
    let want: Vec<String> = (0..bad.len())
        .map(|i| format!("spec.host.kernelArgs.present[{i}]"))
        .collect();
    assert_eq!(fields, want, "{e:?}");
    for (i, fix) in [
        (0, "not even with spec.host.kernelArgs.allowKeys"),
        (1, "not even with spec.host.kernelArgs.allowKeys"),
        (2, "not even with spec.host.kernelArgs.allowKeys"),
        (3, "not even with spec.host.kernelArgs.allowKeys"),
        (4, "list module_blacklist in spec.host.kernelArgs.allowKeys"),
        (5, "e.g. iommu=pt"),
        (6, "list console in spec.host.kernelArgs.allowKeys"),
    ] {
        assert!(e[i].1.contains(fix), "{}: {}", bad[i], e[i].1);
    }
}

/// `allowKeys` lets a harmless unlisted key through; never one that opens a shell or runs a
/// program, and the refusal names the `allowKeys` entry.
#[test]
fn allow_keys_opt_in_to_a_harmless_key_never_a_dangerous_one() {
    let k = check(opted_in(
        &["console=ttyS0,115200n8", "vfio-pci.disable_idle_d3=1"],
        &["quiet"],
        &["console", "quiet"],
    ))
    .unwrap()
    .unwrap();
    assert_eq!(k.present[0], "console=ttyS0,115200n8");
    let e = check(opted_in(
        &["systemd.run=/bin/sh", "rd.break"],
        &[],
        &[
            "systemd.run",
            "rd.break",
            "console",
            "Console",
            "vfio_pci.ids",
            "vfio-pci.ids",
        ],
    ))
    .unwrap_err();
    let fields: Vec<&str> = e.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.host.kernelArgs.allowKeys[0]",
            "spec.host.kernelArgs.allowKeys[1]",
            "spec.host.kernelArgs.allowKeys[3]",
            "spec.host.kernelArgs.allowKeys[5]",
            "spec.host.kernelArgs.present[0]",
            "spec.host.kernelArgs.present[1]",
        ],
        "{e:?}"
    );
    assert!(e[0].1.contains("not even with allowKeys"), "{}", e[0].1);
    assert!(e[2].1.contains("environment variable"), "{}", e[2].1);
    assert!(e[3].1.contains("listed twice"), "{}", e[3].1);
}

/// Issue 37: an argument that switches off what the SEV-SNP VM 200 of the reference partition
/// needs is refused at the agent's door, as `iommu.mode: Passthrough` is; so is switching the
/// IOMMU off under any vfio-pci slice. On a host where VM 200 is no SNP guest the confidential
/// ones are accepted.
#[test]
fn an_argument_that_switches_off_a_confidential_prerequisite_is_refused() {
    // (present, absent, allowKeys, what the refusal says it switches off)
    type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [&'a str], &'a str);
    let cases: &[Case] = &[
        (&["iommu=pt"], &[], &[], "passthrough mode"),
        (&["iommu.passthrough=1"], &[], &[], "passthrough mode"),
        (&["amd_iommu=pgtbl_v2"], &[], &[], "v2 page table"),
        (&["vfio-pci.disable_idle_d3=0"], &[], &[], "D3cold"),
        (&[], &["vfio-pci.disable_idle_d3=1"], &[], "D3cold"),
        (&["kvm_amd.sev_snp=0"], &[], &["kvm_amd.sev_snp"], "SEV off"),
        (&["kvm-amd.sev=0"], &[], &["kvm_amd.sev"], "SEV off"),
        (
            &["mem_encrypt=off"],
            &[],
            &["mem_encrypt"],
            "memory encryption off",
        ),
        (&["amd_iommu=off"], &[], &["amd_iommu"], "IOMMU off"),
        (&["iommu=off"], &[], &["iommu"], "IOMMU off"),
        (&["intel_iommu=off"], &[], &["intel_iommu"], "IOMMU off"),
    ];
    for (present, absent, allow, what) in cases {
        let e = check(opted_in(present, absent, allow)).unwrap_err();
        assert_eq!(e.len(), 1, "{present:?} {absent:?}: {e:?}");
        let list = if present.is_empty() {
            "absent"
        } else {
            "present"
        };
        assert_eq!(e[0].0, format!("spec.host.kernelArgs.{list}[0]"));
        assert!(
            e[0].1.contains(what)
                && (e[0].1.contains("confidential VM 200 of spec.slices[1]")
                    || e[0]
                        .1
                        .contains("slice \"confidential-vm\" (spec.slices[1], driver vfio-pci)"))
                && e[0].1.contains(&format!("remove it from {list}")),
            "{}",
            e[0].1
        );
    }
    // VM 200 not an SNP guest: only the IOMMU's switch-off is refused (vfio-pci needs it).
    let mut m = manifests();
    let mut st = twin().observe().unwrap();
    st.vms.get_mut(&200).unwrap().amd_sev = None;
    for (present, absent, allow, what) in cases {
        m.partitions[0].spec.host = Some(opted_in(present, absent, allow));
        let r = resolve_partition(&m.partitions[0], &st, "10de", "nvidia");
        assert_eq!(
            r.is_err(),
            what.contains("IOMMU off"),
            "{present:?} {absent:?}"
        );
    }
}
