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
    let text = &slices(
        r#"
    - name: a
      gpus: {slots: ["1", "2"]}
      driver: nvidia
    - name: b
      gpus: {uuids: ["GPU-624a3d49-0000-1111-2222-333344445555"]}
      driver: vfio-pci
    - name: c
      gpus: {serials: ["1654924066922"], count: 1}
      driver: nvidia
"#,
    );
    let mut m = crate::manifests::Manifests::default();
    m.add_text(text, "p.yaml").unwrap();
    let (errors, _) = validate(&m.partitions, &m.servers);
    let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        msgs,
        ["GpuPartition/p: spec.slices[2].gpus: set exactly one of addresses, numaNode, count, uuids, serials or slots (this slice sets count and serials)"]
    );
}

/// Partition `p` of node `n` with the slices `yaml` (list items, indented by four).
fn slices(yaml: &str) -> String {
    format!(
        "apiVersion: gpuplane.dev/v1alpha1\nkind: GpuPartition\nmetadata: {{name: p}}\nspec:\n  nodeName: n\n  slices:\n{}",
        yaml.trim_start_matches('\n')
    )
}

/// A partition from YAML.
fn partition(text: &str) -> Vec<GpuPartition> {
    let mut m = crate::manifests::Manifests::default();
    m.add_text(text, "p.yaml").unwrap();
    m.partitions
}

/// Issue 37: two slices on one NUMA node were refused with "GPU ffff:00:01.0 is also in slice
/// "a"", an address of the stand-in host that the node does not have. The message names the
/// NUMA node and the slices, as the user wrote them; the same holds for one UUID, serial or slot
/// in two slices, and no message of any overlapping spec names a made-up address.
#[test]
fn overlapping_slices_are_named_in_the_specs_terms_never_by_a_made_up_address() {
    let two_on_numa_0 = slices(crate::testutil::TWO_ON_NUMA_0);
    let errors = msgs(&validate(&partition(&two_on_numa_0), &[]).0);
    assert_eq!(
        errors,
        [
            r#"GpuPartition/p: spec.slices[1].gpus.numaNode: NUMA node 0 is also the selector of slice "inference" (spec.slices[0]): each would take every GPU on that node, and a GPU may belong to one slice only; select one of the two by another NUMA node, or by addresses, uuids, serials, slots or count"#
        ]
    );
    let uuid = "GPU-624a3d49-0000-1111-2222-333344445555";
    let by_identity = slices(&format!(
        r#"
    - {{name: a, gpus: {{uuids: ["{uuid}"]}}, driver: nvidia}}
    - {{name: b, gpus: {{serials: ["1654924066922"]}}, driver: nvidia}}
    - {{name: c, gpus: {{uuids: ["GPU-other", "{uuid}"]}}, driver: vfio-pci}}
    - {{name: d, gpus: {{slots: ["7"]}}, driver: nvidia}}
    - {{name: e, gpus: {{slots: ["7"]}}, driver: nvidia}}
    - {{name: f, gpus: {{numaNode: 1}}, driver: nvidia}}
    - {{name: g, gpus: {{count: 2}}, driver: nvidia}}
    - {{name: h, gpus: {{numaNode: 1}}, driver: nvidia}}
"#
    ));
    let errors = msgs(&validate(&partition(&by_identity), &[]).0);
    assert_eq!(
        errors,
        [
            format!(r#"GpuPartition/p: spec.slices[2].gpus.uuids[1]: "{uuid}" is also listed by slice "a" (spec.slices[0]); a GPU may belong to one slice only: list it in one of the two"#),
            r#"GpuPartition/p: spec.slices[4].gpus.slots[0]: "7" is also listed by slice "d" (spec.slices[3]); a GPU may belong to one slice only: list it in one of the two"#.to_string(),
            r#"GpuPartition/p: spec.slices[7].gpus.numaNode: NUMA node 1 is also the selector of slice "f" (spec.slices[5]): each would take every GPU on that node, and a GPU may belong to one slice only; select one of the two by another NUMA node, or by addresses, uuids, serials, slots or count"#.to_string(),
        ]
    );
    // The reference with its second slice moved onto NUMA node 0, its server asking for 8 GPUs.
    let mut m = crate::testutil::manifests();
    m.partitions[0].spec.slices[1].gpus.numa_node = Some(0);
    m.partitions[0].spec.slices[1].driver = gpuplane_crds::GpuDriver::Nvidia;
    m.partitions[0].spec.slices[1].consumer = None;
    m.servers[0].spec.tensor_parallel_size = 8;
    let errors = msgs(&validate(&m.partitions, &m.servers).0);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("NUMA node 0 is also the selector of slice \"inference\"")),
        "{errors:?}"
    );
    for e in &errors {
        assert!(!e.contains("ffff:"), "a made-up address: {e}");
    }
}

/// Whatever a message of the resolution says, a made-up address in it is replaced by what the
/// spec said of that GPU.
#[test]
fn a_made_up_address_left_in_a_message_is_said_in_the_users_terms() {
    let mut made_up = MadeUp::new();
    made_up.insert("ffff:00:01.0".into(), "a GPU on NUMA node 0".into());
    let e = SpecError {
        resource: crate::resource_key::ResourceKey::partition("p"),
        field: "spec.slices[1].gpus".into(),
        message: "GPU ffff:00:01.0 is also in slice \"a\"; see ffff:00:01.0".into(),
    };
    let out = in_users_terms(vec![e], &made_up);
    assert_eq!(
        out[0].message,
        "a GPU on NUMA node 0 is also in slice \"a\"; see a GPU on NUMA node 0"
    );
}

/// Issue 37: `accept-layout: "yes"` and `allow-unverified-gpus: "yes"` were accepted and
/// ignored in silence. Both are host-independent: the webhook refuses them.
#[test]
fn the_layout_annotations_take_only_values_the_agent_acts_on() {
    let with = |k: &str, v: &str| {
        let mut m = manifests();
        m.partitions[0]
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(k.into(), v.into());
        msgs(&validate(&m.partitions, &m.servers).0)
    };
    let accept = "gpuplane.dev/accept-layout";
    for bad in [
        "yes",
        "true",
        "0B1C2D3E4F50",
        "0b1c2d3e4f5",
        "0b1c2d3e4f50a",
        "",
        "0b1c2d3e4f5g",
    ] {
        let e = with(accept, bad);
        assert_eq!(e.len(), 1, "{bad:?}: {e:?}");
        assert!(
            e[0].starts_with(&format!(
                "GpuPartition/kpro6: metadata.annotations[\"{accept}\"]: {bad:?} is not a layout hash (12 lower-case hex digits); copy the hash from the partition's stall message"
            )),
            "{e:?}"
        );
    }
    assert_eq!(with(accept, "0b1c2d3e4f50"), Vec::<String>::new());
    let unverified = "gpuplane.dev/allow-unverified-gpus";
    for bad in ["yes", "1", "True", ""] {
        let e = with(unverified, bad);
        assert_eq!(e.len(), 1, "{bad:?}: {e:?}");
        assert!(
            e[0].contains(&format!("{bad:?} is neither \"true\" nor \"false\"")),
            "{e:?}"
        );
    }
    for ok in ["true", "false"] {
        assert_eq!(with(unverified, ok), Vec::<String>::new());
    }
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
        crate::testutil::DANGEROUS_KERNEL_ARGS,
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
