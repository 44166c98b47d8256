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

/// Every pattern of the schemas, found by walking them.
fn patterns(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(p)) = o.get("pattern") {
                out.push(p.clone());
            }
            o.values().for_each(|c| patterns(c, out));
        }
        Value::Array(a) => a.iter().for_each(|c| patterns(c, out)),
        _ => {}
    }
}

/// Issue 37: a refusal by pattern says which form is expected, with an example, never the
/// regular expression; every pattern of the CRDs has its words.
#[test]
fn pattern_refusals_say_the_form_not_the_regular_expression() {
    use kube::CustomResourceExt;
    let mut all = vec![];
    for crd in [
        gpuplane_crds::GpuPartition::crd(),
        gpuplane_crds::InferenceServer::crd(),
    ] {
        patterns(&serde_json::to_value(&crd).unwrap(), &mut all);
    }
    patterns(&metadata_schema(), &mut all);
    assert!(all.len() >= 10, "{all:?}");
    for p in &all {
        assert!(
            PATTERNS.iter().any(|(q, _)| q == p),
            "pattern {p} has no words in PATTERNS"
        );
    }
    let p: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../../../../examples/kpro6/partition.yaml")).unwrap();
    let mut doc = serde_json::to_value(p).unwrap();
    doc["spec"]["host"] = json!({
        "kernelArgs": {"present": ["a b"], "absent": ["--x"], "allowKeys": ["a=b"]},
        "reboot": "Auto",
        "maintenanceWindow": {"start": "2:00", "end": "25:00"}
    });
    doc["spec"]["slices"][1]["consumer"]["vm"]["pciMapping"] = json!("1-vm");
    let e = check("GpuPartition", &doc);
    for (field, words) in [
        (
            "spec.host.maintenanceWindow.start",
            "\"2:00\" is not a time of day as HH:MM",
        ),
        (
            "spec.host.maintenanceWindow.end",
            "\"25:00\" is not a time of day",
        ),
        (
            "spec.host.kernelArgs.present[0]",
            "\"a b\" is not one kernel argument",
        ),
        ("spec.host.kernelArgs.absent[0]", "not starting with '-'"),
        ("spec.host.kernelArgs.allowKeys[0]", "the part before '='"),
        ("spec.slices[1].consumer.vm.pciMapping", "e.g. pro6000-vm"),
    ] {
        let m = e
            .iter()
            .find(|e| e.field == field)
            .unwrap_or_else(|| panic!("{field} missing in {e:?}"));
        assert!(m.message.contains(words), "{field}: {}", m.message);
        assert!(m.message.contains("e.g."), "says how: {}", m.message);
        assert!(
            !m.message.contains('^') && !m.message.contains("does not match"),
            "no regular expression: {}",
            m.message
        );
    }
}

/// Issue 37: untrusted text a refusal echoes is capped: a 5000-character argument, a list of
/// too many.
#[test]
fn echoed_values_are_capped() {
    let p: serde_yaml::Value =
        serde_yaml::from_str(include_str!("../../../../examples/kpro6/partition.yaml")).unwrap();
    let mut doc = serde_json::to_value(p).unwrap();
    let many: Vec<String> = (0..40)
        .map(|i| format!("vfio-pci.ids=10de:{i:04}"))
        .collect();
    doc["spec"]["host"] = json!({
        "kernelArgs": {"present": ["a".repeat(5000)], "absent": many},
    });
    let e = check("GpuPartition", &doc);
    let long = e
        .iter()
        .find(|e| e.field == "spec.host.kernelArgs.present[0]" && e.message.contains("longer"))
        .unwrap_or_else(|| panic!("{e:?}"));
    assert!(
        long.message.len() < 200
            && long
                .message
                .contains("(5000 characters) is longer than 256"),
        "{}",
        long.message
    );
    let list = e
        .iter()
        .find(|e| e.field == "spec.host.kernelArgs.absent")
        .unwrap_or_else(|| panic!("{e:?}"));
    assert!(
        list.message.len() < 200 && list.message.contains("(40 items) has more than 32"),
        "{}",
        list.message
    );
    for e in &e {
        assert!(e.message.len() < 600, "{}: {}", e.field, e.message);
    }
}

/// The validators read the committed CRD text instead of generating the schemas in every
/// process: that text must be exactly what the types generate.
#[test]
fn the_committed_crds_carry_the_generated_schemas() {
    let mut committed = crd_schemas();
    committed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut generated: Vec<(String, Value)> = gpuplane_crds::crds()
        .into_iter()
        .map(|crd| {
            let schema = crd.spec.versions[0].schema.as_ref().unwrap();
            let schema = serde_json::to_value(schema.open_api_v3_schema.as_ref().unwrap());
            (crd.spec.names.kind.clone(), schema.unwrap())
        })
        .collect();
    generated.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(committed.len(), 3);
    assert_eq!(
        committed, generated,
        "crds/gpuplane.dev_crds.yaml is stale: cargo run -p gpuplane-crds --bin crdgen"
    );
}
