use super::*;
use crate::testutil::manifests;

fn msgs(e: &[SpecError]) -> Vec<String> {
    e.iter().map(|e| e.to_string()).collect()
}

#[test]
fn the_reference_split_is_valid_without_a_host() {
    let m = manifests();
    let (errors, warnings) = validate(&m.partitions, &m.servers);
    assert_eq!(msgs(&errors), Vec::<String>::new());
    assert_eq!(warnings, Vec::<String>::new());
}

#[test]
fn spec_only_mistakes_are_found_host_mistakes_are_left_to_the_agent() {
    let mut m = manifests();
    // A container that may not exist on the node: only the agent can tell.
    m.partitions[0].spec.slices[0]
        .consumer
        .as_mut()
        .unwrap()
        .lxc
        .as_mut()
        .unwrap()
        .vmid = 4242;
    assert_eq!(
        msgs(&validate(&m.partitions, &m.servers).0),
        Vec::<String>::new()
    );
    // tp over a slice of known size: a spec mistake.
    m.partitions[0].spec.slices[0].gpus.numa_node = None;
    m.partitions[0].spec.slices[0].gpus.count = Some(2);
    let errors = msgs(&validate(&m.partitions, &m.servers).0);
    assert!(
        errors.iter().any(|e| e.contains("spec.tensorParallelSize")),
        "{errors:?}"
    );
    // A second server on the slice, with the same unit: a spec mistake.
    m.servers[0].spec.tensor_parallel_size = 2;
    let mut second = m.servers[0].clone();
    second.metadata.name = Some("second".into());
    m.servers.push(second);
    let errors = msgs(&validate(&m.partitions, &m.servers).0);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("second") && e.contains("spec.unit.name")),
        "{errors:?}"
    );
}

#[test]
fn two_partitions_for_one_node_and_a_missing_partition() {
    let mut m = manifests();
    let mut other = m.partitions[0].clone();
    other.metadata.name = Some("kpro6-again".into());
    m.partitions.push(other);
    let (errors, _) = validate(&m.partitions, &m.servers);
    assert!(
        msgs(&errors)
            .iter()
            .any(|e| e.contains("kpro6-again") && e.contains("already has GpuPartition kpro6")),
        "{errors:?}"
    );
    let (errors, warnings) = validate(&[], &m.servers);
    assert!(errors.is_empty());
    assert!(warnings[0].contains("does not exist"), "{warnings:?}");
}

#[test]
fn identity_selectors_pass_the_webhook_and_two_kinds_in_one_slice_do_not() {
    let text = r#"
apiVersion: gpuplane.dev/v1alpha1
kind: GpuPartition
metadata: {name: p}
spec:
  nodeName: n
  slices:
    - name: a
      gpus: {slots: ["1", "2"]}
      driver: nvidia
    - name: b
      gpus: {uuids: ["GPU-624a3d49-0000-1111-2222-333344445555"]}
      driver: vfio-pci
    - name: c
      gpus: {serials: ["1654924066922"], count: 1}
      driver: nvidia
"#;
    let mut m = crate::manifests::Manifests::default();
    m.add_text(text, "p.yaml").unwrap();
    let (errors, _) = validate(&m.partitions, &m.servers);
    let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        msgs,
        ["GpuPartition/p: spec.slices[2].gpus: set exactly one of addresses, numaNode, count, uuids, serials or slots (this slice sets count and serials)"]
    );
}

/// `spec.host.kernelArgs` with these lists.
fn kernel_args(present: &[&str], absent: &[&str], allow: &[&str]) -> gpuplane_crds::HostSpec {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    gpuplane_crds::HostSpec {
        kernel_args: Some(gpuplane_crds::KernelArgs {
            present: v(present),
            absent: v(absent),
            allow_keys: v(allow),
        }),
        ..Default::default()
    }
}

/// Issue 37 at the webhook's door (no host): the allow-list, the opt-in and the keys no opt-in
/// opens are decided on the spec alone, as the agent decides them.
#[test]
fn the_kernel_argument_allow_list_is_decided_without_a_host() {
    let mut m = manifests();
    m.partitions[0].spec.host = Some(kernel_args(
        &[
            "systemd.run=/bin/sh",
            "systemd.setenv=LD_PRELOAD=/tmp/x.so",
            "rd.break",
            "single",
            "module_blacklist=vfio_pci",
            "iommu=off",
            "console=ttyS0",
        ],
        &[],
        &[],
    ));
    let errors = msgs(&validate(&m.partitions, &m.servers).0);
    assert_eq!(errors.len(), 7, "{errors:?}");
    for (i, e) in errors.iter().enumerate() {
        assert!(
            e.contains(&format!("spec.host.kernelArgs.present[{i}]"))
                && e.contains("spec.host.kernelArgs.allowKeys"),
            "{e}"
        );
    }
    // Opted in: a harmless key passes, a dangerous one never does.
    m.partitions[0].spec.host = Some(kernel_args(
        &["console=ttyS0", "vfio-pci.disable_vga=1"],
        &[],
        &["console"],
    ));
    assert_eq!(
        msgs(&validate(&m.partitions, &m.servers).0),
        Vec::<String>::new()
    );
    m.partitions[0].spec.host = Some(kernel_args(&["init=/bin/sh"], &[], &["init"]));
    let errors = msgs(&validate(&m.partitions, &m.servers).0);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("spec.host.kernelArgs.allowKeys[0]")
                && e.contains("not even with allowKeys")),
        "{errors:?}"
    );
}

/// Issue 37: switching the IOMMU off, which every vfio-pci slice (the confidential one among
/// them) needs, is refused without a host, even opted in. What only an SEV-SNP VM needs is
/// judged on the VM's config, which the webhook cannot see: `iommu=pt` passes here and the agent
/// refuses it (`desired::kernel_args`' tests), as `iommu.mode: Passthrough` is.
#[test]
fn switching_off_the_iommu_under_a_vfio_slice_is_refused_without_a_host() {
    let mut m = manifests();
    for (word, key) in [
        ("amd_iommu=off", "amd_iommu"),
        ("iommu=off", "iommu"),
        ("intel_iommu=off", "intel_iommu"),
    ] {
        m.partitions[0].spec.host = Some(kernel_args(&[word], &[], &[key]));
        let errors = msgs(&validate(&m.partitions, &m.servers).0);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("spec.host.kernelArgs.present[0]")
                && errors[0].contains("switches the IOMMU off")
                && errors[0]
                    .contains("slice \"confidential-vm\" (spec.slices[1], driver vfio-pci)")
                && errors[0].contains("remove it from present"),
            "{errors:?}"
        );
    }
    // Without a vfio-pci slice it is the admin's opt-in.
    let mut nvidia_only = m.clone();
    nvidia_only.partitions[0].spec.slices.truncate(1);
    nvidia_only.partitions[0].spec.host = Some(kernel_args(&["iommu=off"], &[], &["iommu"]));
    assert_eq!(
        msgs(&validate(&nvidia_only.partitions, &nvidia_only.servers).0),
        Vec::<String>::new()
    );
    // SNP-only prerequisites need the VM's config: left to the agent.
    m.partitions[0].spec.host = Some(kernel_args(&["iommu=pt"], &[], &[]));
    assert_eq!(
        msgs(&validate(&m.partitions, &m.servers).0),
        Vec::<String>::new()
    );
}
