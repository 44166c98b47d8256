use super::*;

fn server(extra: &str) -> Value {
    let text = format!(
        "{}{extra}",
        include_str!("../../../../examples/kpro6/server.yaml")
    );
    serde_json::to_value(serde_yaml::from_str::<serde_yaml::Value>(&text).unwrap()).unwrap()
}

#[test]
fn the_reference_examples_pass() {
    assert_eq!(check("InferenceServer", &server("")), vec![]);
    let p: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../../../../examples/kpro6/partition.yaml")).unwrap();
    assert_eq!(
        check("GpuPartition", &serde_json::to_value(p).unwrap()),
        vec![]
    );
}

#[test]
fn a_misspelt_field_is_refused_with_its_path() {
    let e = check("InferenceServer", &server("  enviroment: []\n"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].field, "spec.enviroment");
    assert!(e[0].message.contains("unknown field"), "{e:?}");
}

#[test]
fn ranges_enums_and_names_are_the_apiservers() {
    let mut doc = server("");
    doc["spec"]["listen"]["port"] = json!(70000);
    doc["spec"]["p2p"] = json!("Sometimes");
    doc["spec"]["speculative"]["numSteps"] = json!(0);
    doc["metadata"]["name"] = json!("Qwen_Server");
    doc["metadata"]["labls"] = json!({});
    let e = check("InferenceServer", &doc);
    let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
    for f in [
        "spec.listen.port",
        "spec.p2p",
        "spec.speculative.numSteps",
        "metadata.name",
        "metadata.labls",
    ] {
        assert!(fields.contains(&f), "{f} missing in {e:?}");
    }
}

#[test]
fn a_value_out_of_its_integer_format_is_refused() {
    let p: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../../../../examples/kpro6/partition.yaml")).unwrap();
    let mut doc = serde_json::to_value(p).unwrap();
    doc["spec"]["slices"][0]["consumer"]["lxc"]["vmid"] = json!(5_000_000_000u64);
    let e = check("GpuPartition", &doc);
    assert!(
        e.iter()
            .any(|e| e.field == "spec.slices[0].consumer.lxc.vmid"),
        "{e:?}"
    );
}

#[test]
fn paths_read_like_kubectls() {
    assert_eq!(field_path("/spec/slices/1/driver"), "spec.slices[1].driver");
    assert_eq!(field_path(""), "(document)");
}

#[test]
fn kernel_args_are_checked_by_the_schema_too() {
    let p: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../../../../examples/kpro6/partition.yaml")).unwrap();
    let mut doc = serde_json::to_value(p).unwrap();
    doc["spec"]["host"] = json!({
        "kernelArgs": {"present": ["vfio-pci.disable_idle_d3=1"], "absent": ["iommu=pt"]},
        "reboot": "Manual"
    });
    assert_eq!(check("GpuPartition", &doc), vec![]);
    doc["spec"]["host"]["kernelArgs"]["present"] = json!(["a b", "$(reboot)"]);
    doc["spec"]["host"]["reboot"] = json!("Sometimes");
    doc["spec"]["host"]["kernelArg"] = json!([]);
    let e = check("GpuPartition", &doc);
    let fields: Vec<&str> = e.iter().map(|e| e.field.as_str()).collect();
    for f in [
        "spec.host.kernelArgs.present[0]",
        "spec.host.kernelArgs.present[1]",
        "spec.host.reboot",
        "spec.host.kernelArg",
    ] {
        assert!(fields.contains(&f), "{f} missing in {e:?}");
    }
}
