//! Each prerequisite of a confidential VM with GPUs, missing alone on the reference twin (VM 200
//! an SNP guest), gives its own reason; all present gives `Unknown` (the GPUs' CC mode is not
//! readable here), never `True`.

use crate::host::model::ConfidentialFacts;
use crate::host::sim::SimHost;
use crate::host::Host;
use crate::testutil::{desired, manifests, twin};

/// Every prerequisite met.
fn ready() -> ConfidentialFacts {
    crate::testutil::snp_ready()
}

/// (status, reason, message) of `type_` on the twin with `facts` (and `edit`).
fn judged(
    facts: ConfidentialFacts,
    edit: impl FnOnce(&mut SimHost),
) -> Vec<(String, String, String)> {
    let mut h = twin();
    h.file.vms.get_mut(&200).unwrap().amd_sev = Some("snp".into());
    h.file.confidential = facts;
    edit(&mut h);
    let d = desired(&mut h, &manifests());
    let st = h.observe().unwrap();
    let mut ps = crate::status::ResourceStatus::default();
    super::conditions(&mut ps, &d, &st, Some(1), &crate::clock::now());
    ps.conditions
        .iter()
        .map(|c| {
            (
                c.type_.clone(),
                format!("{}/{}", c.status, c.reason),
                c.message.clone(),
            )
        })
        .collect()
}

fn ready_condition(facts: ConfidentialFacts, edit: impl FnOnce(&mut SimHost)) -> (String, String) {
    let all = judged(facts, edit);
    let c = all
        .iter()
        .find(|c| c.0 == "ConfidentialReady")
        .expect("ConfidentialReady is set");
    (c.1.clone(), c.2.clone())
}

/// A reason, the edit of the ready facts that should give it, and words of its message.
type Case = (
    &'static str,
    Box<dyn Fn(&mut ConfidentialFacts)>,
    &'static str,
);

#[test]
fn every_missing_prerequisite_has_its_own_reason() {
    let cases: Vec<Case> = vec![
        (
            "SevSnpDisabled",
            Box::new(|f| f.kvm_sev_snp = Some(false)),
            "kvm_amd's sev_snp parameter is N",
        ),
        (
            "SevSnpDisabled",
            Box::new(|f| f.kvm_sev_snp = None),
            "kvm_amd is not loaded",
        ),
        (
            "SevDeviceMissing",
            Box::new(|f| f.dev_sev = false),
            "/dev/sev does not exist",
        ),
        (
            "SevFirmwareTooOld",
            Box::new(|f| f.snp_api = Some("1.49".into())),
            "SNP API is 1.49; NVIDIA's deployment guide needs at least 1.51",
        ),
        (
            "SevFirmwareUnknown",
            Box::new(|f| f.snp_api = None),
            "names no SEV-SNP API version",
        ),
        (
            "IommuPassthrough",
            Box::new(|f| {
                f.kernel_refusals = vec!["SNP: IOMMU disabled or configured in passthrough mode, SNP cannot be supported.".into()]
            }),
            "remove iommu=pt",
        ),
        (
            "IommuV2PageTable",
            Box::new(|f| {
                f.kernel_refusals = vec![
                    "SNP: IOMMU is configured with V2 page table mode, SNP cannot be supported."
                        .into(),
                ]
            }),
            "v1 page table",
        ),
        (
            "KernelRefusedSnp",
            Box::new(|f| {
                f.kernel_refusals =
                    vec!["SNP: RMP initialization failed, SNP cannot be supported.".into()]
            }),
            "RMP initialization failed",
        ),
        (
            "ProxmoxSaysNoSnp",
            Box::new(|f| f.proxmox_snp = Some(false)),
            "sev-support-snp: false",
        ),
        (
            "VfioIdleD3",
            Box::new(|f| f.vfio_disable_idle_d3 = None),
            "vfio-pci.disable_idle_d3=1",
        ),
    ];
    for (reason, edit, words) in cases {
        let mut f = ready();
        edit(&mut f);
        let (status, message) = ready_condition(f, |_| {});
        assert_eq!(status, format!("False/{reason}"), "{message}");
        assert!(
            message.contains(words),
            "{reason}: {words:?} not in {message}"
        );
        assert!(
            message.contains("VM 200 (slice confidential-vm)"),
            "{message}"
        );
    }
}

#[test]
fn proxmox_saying_yes_where_the_kernel_said_no_is_reported() {
    let mut f = ready();
    f.kernel_refusals = vec![
        "SNP: IOMMU disabled or configured in passthrough mode, SNP cannot be supported.".into(),
    ];
    let (status, message) = ready_condition(f, |_| {});
    assert_eq!(status, "False/IommuPassthrough");
    assert!(
        message.contains(
            "ProxmoxDisagrees: Proxmox's host-hw-capabilities.json says sev-support-snp: true"
        ),
        "{message}"
    );
}

#[test]
fn all_prerequisites_met_is_unknown_until_the_gpus_cc_mode_is_read() {
    let (status, message) = ready_condition(ready(), |_| {});
    assert_eq!(status, "Unknown/CcModeNotChecked");
    assert!(
        message.contains("confidential-computing mode was not checked"),
        "{message}"
    );
}

#[test]
fn a_mixed_partition_is_told_so_and_a_plain_vm_gets_no_confidential_conditions() {
    let all = judged(ready(), |_| {});
    let mixed = all
        .iter()
        .find(|c| c.0 == "ConfidentialMixed")
        .expect("mixed");
    assert_eq!(mixed.1, "True/MixedPartition");
    assert!(
        mixed.2.contains("slices inference keep GPUs on nvidia"),
        "{}",
        mixed.2
    );
    assert!(
        mixed
            .2
            .contains("NVIDIA's confidential-computing support matrix"),
        "{}",
        mixed.2
    );
    let plain = judged(ready(), |h| {
        h.file.vms.get_mut(&200).unwrap().amd_sev = None
    });
    assert!(plain.is_empty(), "{plain:?}");
}

#[test]
fn passthrough_with_a_confidential_vm_is_an_invalid_spec() {
    let mut h = twin();
    h.file.vms.get_mut(&200).unwrap().amd_sev = Some("snp".into());
    let mut m = manifests();
    m.partitions[0].spec.iommu = Some(gpuplane_crds::IommuExpectation {
        mode: gpuplane_crds::IommuModeExpectation::Passthrough,
    });
    let st = h.observe().unwrap();
    let e = crate::desired::resolve_partition(&m.partitions[0], &st, "10de", "nvidia").unwrap_err();
    let msgs: Vec<String> = e.iter().map(|e| e.to_string()).collect();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].starts_with("GpuPartition/kpro6: spec.iommu.mode: Passthrough cannot work with the confidential VM 200 of spec.slices[1]"), "{}", msgs[0]);
    assert!(msgs[0].contains("SNP cannot be supported"), "{}", msgs[0]);
}
