use super::*;

/// The committed YAML must match what the types generate, or `kubectl apply -f crds/`
/// would install a schema that differs from the code. Regenerate with
/// `cargo run -p gpuplane-crds --bin crdgen`.
#[test]
fn committed_crd_yaml_is_fresh() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CRDS_FILE);
    let committed = std::fs::read_to_string(&path).expect("committed CRD YAML exists");
    let generated = crds_yaml().expect("CRDs serialize");
    assert!(
        committed == generated,
        "{} is stale: run `cargo run -p gpuplane-crds --bin crdgen`",
        path.display()
    );
}

#[test]
fn crds_have_status_subresource_and_printer_columns() {
    for crd in [GpuPartition::crd(), InferenceServer::crd()] {
        let v = &crd.spec.versions[0];
        assert!(v
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some());
        let cols = v
            .additional_printer_columns
            .as_ref()
            .expect("printer columns");
        assert!(cols.iter().any(|c| c.name == "Ready"));
        assert!(crd
            .spec
            .names
            .short_names
            .as_ref()
            .is_some_and(|s| !s.is_empty()));
    }
    assert_eq!(GpuPartition::crd().spec.scope, "Cluster");
    assert_eq!(InferenceServer::crd().spec.scope, "Namespaced");
}

#[test]
fn pci_address_pattern_is_in_the_schema() {
    let yaml = crds_yaml().unwrap();
    assert!(yaml.contains(partition::PCI_ADDRESS_PATTERN));
}

#[test]
fn kernel_arg_pattern_is_in_the_schema() {
    let yaml = crds_yaml().unwrap();
    assert_eq!(
        yaml.matches(partition::KERNEL_ARG_PATTERN).count(),
        2,
        "present and absent"
    );
    assert!(yaml.contains(&format!("maxItems: {}", partition::KERNEL_ARGS_MAX)));
    // allowKeys: the key pattern, its length and count.
    assert_eq!(yaml.matches(partition::KERNEL_ARG_KEY_PATTERN).count(), 1);
    let spec: GpuPartitionSpec = serde_json::from_str(
        r#"{"nodeName":"n","slices":[],"host":{"kernelArgs":{"present":["console=ttyS0"],"allowKeys":["console"]}}}"#,
    )
    .unwrap();
    let k = spec.host.unwrap().kernel_args.unwrap();
    assert_eq!(k.allow_keys, ["console"]);
    assert!(yaml.contains(&format!(
        "maxItems: {}",
        partition::KERNEL_ARG_ALLOW_KEYS_MAX
    )));
    assert!(yaml.contains(&format!("maxLength: {}", partition::KERNEL_ARG_KEY_MAX_LEN)));
}

#[test]
fn pool_is_cluster_scoped_and_max_unavailable_reads_counts_and_percentages() {
    assert_eq!(GpuNodePool::crd().spec.scope, "Cluster");
    let yaml = crds_yaml().unwrap();
    assert!(yaml.contains("x-kubernetes-int-or-string: true"));
    assert_eq!(MaxUnavailable::Count(2).slots(20), Some(2));
    assert_eq!(MaxUnavailable::Count(0).slots(20), Some(0));
    assert_eq!(MaxUnavailable::Percent("25%".into()).slots(50), Some(12));
    assert_eq!(MaxUnavailable::Percent("10%".into()).slots(3), Some(1));
    assert_eq!(MaxUnavailable::Percent("lots".into()).slots(3), None);
    assert_eq!(MaxUnavailable::Percent("150%".into()).slots(3), None);
    let spec: GpuNodePoolSpec = serde_json::from_str(r#"{"maxUnavailable":"25%"}"#).unwrap();
    assert_eq!(
        spec.max_unavailable(),
        MaxUnavailable::Percent("25%".into())
    );
    let spec: GpuNodePoolSpec = serde_json::from_str("{}").unwrap();
    assert_eq!(spec.max_unavailable(), MaxUnavailable::Count(1));
    let spec: GpuNodePoolSpec = serde_json::from_str(r#"{"maxUnavailable":null}"#).unwrap();
    assert_eq!(spec.max_unavailable(), MaxUnavailable::Count(1));
    assert!(!spec.paused);
}

/// Kubernetes reads a percentage `maxUnavailable` rounded down and `"0%"` as none: `"0%"` freezes
/// the pool like `0` (it granted one slot before). A value that is neither a count ≥ 0 nor a
/// percentage 0%–100% gives no slots, and `check` says what is wrong and how to write it.
#[test]
fn zero_percent_freezes_like_zero_and_invalid_values_are_refused_with_the_fix() {
    assert_eq!(MaxUnavailable::Percent("0%".into()).slots(20), Some(0));
    assert_eq!(MaxUnavailable::Percent("0%".into()).slots(1), Some(0));
    assert_eq!(MaxUnavailable::Percent("100%".into()).slots(7), Some(7));
    assert_eq!(MaxUnavailable::Percent("1%".into()).slots(7), Some(1));
    assert_eq!(MaxUnavailable::Count(-1).slots(20), None);
    for bad in [
        "150%", "abc", "25", "", "%", "-5%", "+5%", " 5%", "5 %", "2.5%", "0x10%",
    ] {
        let m = MaxUnavailable::Percent(bad.into());
        assert_eq!(m.slots(20), None, "{bad:?}");
        let why = m.check().unwrap_err();
        assert!(
            why.contains(&format!(
                "{bad:?} is not a count ≥ 0 or a percentage 0%–100%"
            )),
            "{why}"
        );
        assert!(why.contains("write "), "{why}");
    }
    assert!(MaxUnavailable::Percent("25".into())
        .check()
        .unwrap_err()
        .contains(r#"write 25 or "25%""#));
    assert!(MaxUnavailable::Count(-1)
        .check()
        .unwrap_err()
        .contains(r#"-1 is not a count ≥ 0 or a percentage 0%–100%; write e.g. 1 or "25%""#));
    for good in [
        MaxUnavailable::Count(0),
        MaxUnavailable::Count(3),
        MaxUnavailable::Percent("0%".into()),
        MaxUnavailable::Percent("25%".into()),
        MaxUnavailable::Percent("100%".into()),
    ] {
        assert_eq!(good.check(), Ok(()), "{good:?}");
        assert!(good.slots(4).is_some());
    }
}

/// A pool label value must be a name a `GpuNodePool` can have: a DNS-1123 subdomain of at most
/// 63 characters (a label value's limit).
#[test]
fn pool_names_are_dns_subdomains_a_label_can_hold() {
    for good in ["fleet", "inference-fleet", "a", "fleet.eu-1", "0fleet9"] {
        assert!(is_pool_name(good), "{good}");
    }
    let long = "a".repeat(64);
    for bad in [
        "", "Fleet", "fleet_a", "-fleet", "fleet-", "fleet..a", "fleet.-a", "a b", "flé", &long,
    ] {
        assert!(!is_pool_name(bad), "{bad:?}");
    }
    assert!(is_pool_name(&"a".repeat(63)));
}

/// The generated pages of `docs/` match the code: a new reason, field or rule cannot go
/// undocumented (`cargo run -p gpuplane-crds --bin crdgen` writes them).
#[test]
fn the_generated_docs_pages_are_fresh_and_list_every_reason() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (page, text) in [
        (crate::docs::TROUBLESHOOTING, crate::docs::troubleshooting()),
        (crate::docs::API_REFERENCE, crate::docs::api_reference()),
    ] {
        let committed = std::fs::read_to_string(root.join(page)).unwrap_or_default();
        assert!(
            committed == text,
            "{page} is stale: run `cargo run -p gpuplane-crds --bin crdgen`"
        );
    }
    // Each reason exactly once, and nothing that is not a reason.
    let page = crate::docs::troubleshooting();
    let listed: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    let mut code: Vec<&str> = crate::reason::Reason::ALL
        .iter()
        .map(|r| r.as_str())
        .collect();
    let mut sorted = listed.clone();
    sorted.sort();
    code.sort();
    assert_eq!(sorted, code);
}

/// Every CEL rule's message is in the API reference, at its field.
#[test]
fn the_api_reference_lists_every_field_and_rule() {
    let page = crate::docs::api_reference();
    for r in crate::cel::RULES {
        assert!(
            page.contains(&crate::docs::cell(r.message)),
            "{} missing",
            r.id
        );
    }
    for field in [
        "`spec.slices[].gpus.numaNode`",
        "`spec.speculative.numDraftTokens`",
        "`spec.maxUnavailable`",
    ] {
        assert!(page.contains(field), "{field} missing");
    }
}

/// The corpus parses, and each case names a rule of its object's kind.
#[test]
fn every_cel_case_names_a_rule_of_its_kind() {
    let cases = crate::cel::corpus::cases();
    assert!(cases.len() >= 25);
    for c in &cases {
        let rule = crate::cel::RULES.iter().find(|r| r.id == c.rule);
        assert!(
            rule.is_some_and(|r| c.object["kind"] == r.kind),
            "{}: rule {} is not one of {}",
            c.name,
            c.rule,
            c.object["kind"]
        );
    }
}
