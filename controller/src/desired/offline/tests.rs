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
