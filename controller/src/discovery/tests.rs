use super::select::{targets, Node};
use super::{render, Target, MAX_LABEL_BYTES, MAX_TARGETS};
use crate::host::model::{HostState, Location, ServerObservation, Unit, UnitRef};
use gpuplane_crds::condition::{types, Condition};

fn cond(ty: &str, status: &str, reason: &str) -> Condition {
    Condition {
        type_: ty.into(),
        status: status.into(),
        reason: reason.into(),
        message: String::new(),
        last_transition_time: crate::clock::now(),
        observed_generation: None,
    }
}

/// The reference split, its server's unit on the host running `args` and reached at `reached`.
fn setup(args: &str, reached: Option<&str>) -> (crate::desired::Desired, HostState) {
    let mut twin = crate::testutil::twin();
    let m = crate::testutil::manifests();
    let d = crate::testutil::desired(&mut twin, &m);
    let mut host = HostState::default();
    let file =
        format!("[Service]\nExecStart=/root/ml-env/bin/python3 -m sglang.launch_server {args}\n");
    host.units.insert(
        d.servers[0].unit.key(),
        Unit {
            active_state: "active".into(),
            file: Some(file),
            server: Some(ServerObservation {
                reached_at: reached.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    (d, host)
}

const ARGS: &str = "--model-path /m --served-model-name qwen3.5-122b --tp-size 4 --host 0.0.0.0 --port 30000 --enable-metrics";

#[test]
fn a_ready_container_server_with_metrics_is_listed_at_the_containers_address_with_its_labels() {
    let (d, host) = setup(ARGS, Some("10.0.0.129"));
    let ready = [cond(types::READY, "True", "ServerReady")];
    let node = Node {
        name: "kpro6",
        address: Some("192.0.2.6"),
    };
    let t = targets(&d, &host, &node, |_| &ready);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].targets, vec!["10.0.0.129:30000".to_string()]);
    let labels: Vec<(&str, &str)> = t[0]
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        labels,
        vec![
            ("inference_server", "qwen35-122b"),
            ("model", "qwen3.5-122b"),
            ("namespace", "default"),
            ("node", "kpro6"),
            ("partition", "kpro6"),
            ("slice", "inference"),
            ("tp", "4"),
        ]
    );
}

#[test]
fn not_ready_rolled_back_without_metrics_or_unreachable_servers_are_not_listed() {
    let node = Node {
        name: "kpro6",
        address: None,
    };
    let ready = vec![cond(types::READY, "True", "ServerReady")];
    let cases: Vec<(&str, Option<&str>, Vec<Condition>)> = vec![
        (
            ARGS,
            Some("10.0.0.129"),
            vec![cond(types::READY, "False", "StartupStalled")],
        ),
        (ARGS, Some("10.0.0.129"), vec![]),
        (
            ARGS,
            Some("10.0.0.129"),
            vec![
                cond(types::READY, "True", "ServerReady"),
                cond(types::DEGRADED, "True", "RolledBack"),
            ],
        ),
        (
            "--port 30000 --host 0.0.0.0",
            Some("10.0.0.129"),
            ready.clone(),
        ),
        (ARGS, None, ready.clone()),
    ];
    for (args, reached, conds) in cases {
        let (d, host) = setup(args, reached);
        let t = targets(&d, &host, &node, |_| &conds);
        assert!(t.is_empty(), "{args} {reached:?} {conds:?}: {t:?}");
    }
    // A Degraded server for another reason still serves its own spec: listed.
    let (d, host) = setup(ARGS, Some("10.0.0.129"));
    let conds = vec![
        cond(types::READY, "True", "ServerReady"),
        cond(types::DEGRADED, "True", "EffectiveConfigDrift"),
    ];
    assert_eq!(targets(&d, &host, &node, |_| &conds).len(), 1);
}

#[test]
fn a_host_server_on_a_wildcard_is_listed_at_the_nodes_address_on_loopback_at_loopback() {
    let ready = [cond(types::READY, "True", "ServerReady")];
    for (listen, node_addr, want) in [
        ("0.0.0.0", Some("192.0.2.6"), "192.0.2.6:31000"),
        ("0.0.0.0", None, "127.0.0.1:31000"),
        ("::", Some("fd00::6"), "[fd00::6]:31000"),
        ("127.0.0.1", Some("192.0.2.6"), "127.0.0.1:31000"),
        ("192.0.2.7", Some("192.0.2.6"), "192.0.2.7:31000"),
    ] {
        let args = format!("--served-model-name m --host {listen} --port=31000 --enable-metrics");
        let reached = if listen.starts_with("192") {
            listen
        } else {
            "127.0.0.1"
        };
        let (mut d, mut host) = setup(&args, Some(reached));
        let old = d.servers[0].unit.key();
        d.servers[0].unit = UnitRef {
            location: Location::Host,
            name: d.servers[0].unit.name.clone(),
        };
        let u = host.units.remove(&old).unwrap();
        host.units.insert(d.servers[0].unit.key(), u);
        let node = Node {
            name: "kpro6",
            address: node_addr,
        };
        let t = targets(&d, &host, &node, |_| &ready);
        assert_eq!(t[0].targets, vec![want.to_string()], "{listen}");
        assert_eq!(t[0].labels["tp"], "1", "SGLang's default tp");
    }
}

#[test]
fn the_json_is_prometheus_http_sd_shape_empty_as_an_array_bounded_and_sanitized() {
    assert_eq!(render(&[]), "[]");
    let long = "x".repeat(10_000);
    let t = Target::new(
        "10.0.0.5:30000".into(),
        &[("model", "a\"b\n\u{1b}[31mred"), ("namespace", &long)],
    );
    let v: serde_json::Value = serde_json::from_str(&render(&[t])).unwrap();
    assert_eq!(v[0]["targets"][0], "10.0.0.5:30000");
    let model = v[0]["labels"]["model"].as_str().unwrap();
    assert!(!model.chars().any(|c| c.is_control()), "{model:?}");
    assert!(model.starts_with("a\"b "));
    assert!(v[0]["labels"]["namespace"].as_str().unwrap().len() <= MAX_LABEL_BYTES);
    let many: Vec<Target> = (0..MAX_TARGETS + 10)
        .map(|i| Target::new(format!("10.0.0.1:{i}"), &[]))
        .collect();
    let v: serde_json::Value = serde_json::from_str(&render(&many)).unwrap();
    assert_eq!(v.as_array().unwrap().len(), MAX_TARGETS);
}
