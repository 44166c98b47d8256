use super::*;

#[test]
fn the_firmware_version_and_the_kernels_refusals_are_read_from_its_log() {
    let mut f = ConfidentialFacts::default();
    parse_log(
            "[    4.1] ccp 0000:47:00.1: SEV-SNP API:1.55 build:21\n\
             [    0.9] AMD-Vi: SNP: IOMMU disabled or configured in passthrough mode, SNP cannot be supported.\n\
             [    1.0] AMD-Vi: SNP: IOMMU is configured with V2 page table mode, SNP cannot be supported.\n",
            &mut f,
        );
    assert_eq!(f.snp_api.as_deref(), Some("1.55"));
    assert_eq!(
        f.kernel_refusals,
        [
            "SNP: IOMMU disabled or configured in passthrough mode, SNP cannot be supported.",
            "SNP: IOMMU is configured with V2 page table mode, SNP cannot be supported."
        ]
    );
}

#[test]
fn a_host_root_is_read_the_way_the_kernel_and_proxmox_show_it() {
    let t = tempfile::tempdir().unwrap();
    let w = |p: &str, s: &str| {
        let p = t.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    };
    w("/sys/module/kvm_amd/parameters/sev_snp", "Y\n");
    w("/sys/module/vfio_pci/parameters/disable_idle_d3", "N\n");
    w("/dev/sev", "");
    w(
        "/run/qemu-server/host-hw-capabilities.json",
        r#"{"amd-sev": {"cbitpos": 51, "reduced-phys-bits": 6, "sev-support": true, "sev-support-es": true, "sev-support-snp": true}}"#,
    );
    let root = Root(t.path().to_path_buf());
    let f = observe(&root, "ccp 0000:47:00.1: SEV-SNP API:1.55 build:21\n");
    // All met but vfio-pci's disable_idle_d3.
    let want = ConfidentialFacts {
        vfio_disable_idle_d3: Some(false),
        ..crate::testutil::snp_ready()
    };
    assert_eq!(f, want);
    let none = observe(&Root(t.path().join("nothing")), "");
    assert_eq!(none, ConfidentialFacts::default());
}

#[test]
fn a_vms_amd_sev_type_is_read_from_its_config_main_section() {
    use super::super::pve::amd_sev;
    assert_eq!(
        amd_sev("amd-sev: type=snp,allow-smt=1\n").as_deref(),
        Some("snp")
    );
    assert_eq!(amd_sev("amd-sev: es\n").as_deref(), Some("es"));
    assert_eq!(
        amd_sev("name: x\n[snap]\namd-sev: type=snp\n"),
        None,
        "a snapshot's"
    );
    assert_eq!(amd_sev("amd-sev: type=bogus\n"), None);
}

#[test]
fn proxmox_capabilities_as_query_machine_capabilities_writes_them() {
    let t = r#"{ "amd-sev": { "cbitpos": 51, "reduced-phys-bits": 6, "sev-support": true, "sev-support-es": true, "sev-support-snp": true } }"#;
    assert_eq!(proxmox_snp(t), Some(true));
    assert_eq!(proxmox_snp("{}"), None);
    assert_eq!(proxmox_snp("junk"), None);
}
