//! The chart's alerts and dashboard as files (`charts/gpuplane/files/`), checked by Prometheus's
//! own tool: `promtool check rules`, `promtool test rules` on `e2e/prometheus/alerts_test.yaml`,
//! every alert with a runbook, and the chart's monitoring template shipping these very files.
//! (The dashboard's queries run on a real Prometheus in `tests/kube_gitops.rs`.)
//!
//!     cargo test -p gpuplane-e2e --test prometheus_rules -- --nocapture

use gpuplane_e2e::paths::repo_root;
use serde_yaml::Value as Yaml;
use std::process::Command;

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("promtool (install it with e2e/setup/observability-tools.sh)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    text
}

#[test]
fn alerts_pass_promtool_check_and_their_unit_tests() {
    let out = promtool(&["check", "rules", "charts/gpuplane/files/alerts.yaml"]);
    println!("{}", out.trim_end());
    let out = promtool(&["test", "rules", "e2e/prometheus/alerts_test.yaml"]);
    println!("{}", out.trim_end());
}

/// The serving recording rules (`files/serving-rules.yaml`): promtool's check, and its unit
/// tests where one server spells SGLang's metrics `sglang:` and the other `sglang_`.
#[test]
fn serving_rules_pass_promtool_check_and_their_unit_tests_in_both_spellings() {
    let out = promtool(&["check", "rules", "charts/gpuplane/files/serving-rules.yaml"]);
    println!("{}", out.trim_end());
    let out = promtool(&["test", "rules", "e2e/prometheus/serving_rules_test.yaml"]);
    println!("{}", out.trim_end());
    // Every rule reading SGLang's series takes both spellings.
    let rules: Yaml = serde_yaml::from_str(
        &std::fs::read_to_string(repo_root().join("charts/gpuplane/files/serving-rules.yaml"))
            .unwrap(),
    )
    .unwrap();
    let tests = std::fs::read_to_string(repo_root().join("e2e/prometheus/serving_rules_test.yaml"))
        .unwrap();
    for r in rules["groups"][0]["rules"].as_sequence().unwrap() {
        let (name, expr) = (r["record"].as_str().unwrap(), r["expr"].as_str().unwrap());
        let expr = expr.replace("gpuplane:sglang_", "gpuplane:");
        assert!(
            !expr.contains("sglang:") && !expr.contains("sglang_") || expr.contains("sglang[:_]"),
            "{name} reads one spelling only: {expr}"
        );
        let output = !name.ends_with("_bucket:rate5m");
        assert!(
            !output || tests.contains(name),
            "{name} has no promtool unit test"
        );
    }
}

#[test]
fn every_alert_has_a_runbook_and_is_unit_tested() {
    let root = repo_root();
    let rules: Yaml = serde_yaml::from_str(
        &std::fs::read_to_string(root.join("charts/gpuplane/files/alerts.yaml")).unwrap(),
    )
    .unwrap();
    let tests = std::fs::read_to_string(root.join("e2e/prometheus/alerts_test.yaml")).unwrap();
    let alerts: Vec<&Yaml> = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .collect();
    assert!(alerts.len() >= 6, "{} alerts", alerts.len());
    for a in alerts {
        let name = a["alert"].as_str().unwrap();
        assert!(
            a["annotations"]["runbook"]
                .as_str()
                .is_some_and(|r| r.len() > 20),
            "{name} has no runbook line"
        );
        assert!(
            tests.contains(&format!("alertname: {name}\n")),
            "{name} has no promtool unit test"
        );
    }
}

#[test]
fn the_chart_ships_these_files() {
    let root = repo_root();
    let t =
        std::fs::read_to_string(root.join("charts/gpuplane/templates/monitoring.yaml")).unwrap();
    for needle in [
        "kind: PrometheusRule",
        r#".Files.Get "files/alerts.yaml""#,
        r#".Files.Get "files/serving-rules.yaml""#,
        r#".Files.Get "files/serving-dashboard.json""#,
        "kind: ServiceMonitor",
        r#".Files.Get "files/dashboard.json""#,
        ".Values.prometheusRule.enabled",
        ".Values.serviceMonitor.enabled",
        ".Values.grafanaDashboard.enabled",
    ] {
        assert!(
            t.contains(needle),
            "templates/monitoring.yaml lacks {needle}"
        );
    }
    let values: Yaml = serde_yaml::from_str(
        &std::fs::read_to_string(root.join("charts/gpuplane/values.yaml")).unwrap(),
    )
    .unwrap();
    for k in ["prometheusRule", "serviceMonitor", "grafanaDashboard"] {
        assert_eq!(
            values[k]["enabled"].as_bool(),
            Some(false),
            "{k} is optional"
        );
    }
    let d: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("charts/gpuplane/files/dashboard.json")).unwrap(),
    )
    .unwrap();
    for p in d["panels"].as_array().unwrap() {
        assert!(
            p["targets"][0]["expr"]
                .as_str()
                .is_some_and(|e| !e.contains('$')),
            "panel {} must have a query without template variables (the e2e runs it verbatim)",
            p["title"]
        );
    }
}
