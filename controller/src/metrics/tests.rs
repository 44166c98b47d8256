use super::*;
use gpuplane_crds::condition::Time;

fn cond(t: &str, s: &str, r: &str) -> Condition {
    Condition {
        type_: t.into(),
        status: s.into(),
        reason: r.into(),
        message: String::new(),
        observed_generation: Some(1),
        last_transition_time: Time(jiff::Timestamp::now()),
    }
}

#[test]
fn bus_ids_are_spelt_as_dcgm_spells_them() {
    assert_eq!(dcgm_bus_id("0000:c1:00.0"), "00000000:C1:00.0");
    assert_eq!(dcgm_bus_id("0000:81:00.0"), "00000000:81:00.0");
    assert_eq!(dcgm_bus_id("00000000:07:00.0"), "00000000:07:00.0");
}

#[test]
fn a_changed_reason_replaces_the_condition_series() {
    let m = Metrics::new().unwrap();
    m.set_conditions(
        "GpuPartition",
        "",
        "kpro6",
        &[cond("Ready", "False", "GpuInUse")],
    );
    m.set_conditions(
        "GpuPartition",
        "",
        "kpro6",
        &[cond("Ready", "True", "Converged")],
    );
    let text = m.render();
    assert!(text.contains(
        r#"gpuplane_resource_condition{kind="GpuPartition",name="kpro6",namespace="",reason="Converged",status="True",type="Ready"} 1"#
    ), "{text}");
    assert!(!text.contains("GpuInUse"), "the old series stayed: {text}");
    m.forget("GpuPartition", "", "kpro6");
    assert!(!m.render().contains("gpuplane_resource_condition{"));
}

#[test]
fn build_info_and_process_metrics_are_exposed() {
    let text = Metrics::new().unwrap().render();
    assert!(text.contains(&format!(
        "gpuplane_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(text.contains("process_resident_memory_bytes "), "{text}");
    assert!(text.contains("process_start_time_seconds "), "{text}");
}

/// GET `path` on `port` with the bounded client.
fn get(port: u16, path: &str) -> (u16, String) {
    crate::http::client::get("127.0.0.1", port, path, Duration::from_secs(5)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_metrics_health_and_readiness_even_with_a_silent_client_connected() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let ready = Arc::new(AtomicBool::new(false));
    tokio::spawn(serve_on(listener, Metrics::new().unwrap(), ready.clone()));
    // A client that connects and says nothing must not keep others waiting.
    let _silent = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let r = tokio::task::spawn_blocking(move || {
        let metrics = get(port, "/metrics");
        let health = get(port, "/healthz");
        let not_ready = get(port, "/readyz");
        ready.store(true, Ordering::SeqCst);
        (
            metrics,
            health,
            not_ready,
            get(port, "/readyz"),
            get(port, "/nope"),
        )
    })
    .await
    .unwrap();
    assert_eq!(r.0 .0, 200);
    assert!(r.0 .1.contains("gpuplane_build_info"), "{}", r.0 .1);
    assert_eq!(r.1, (200, "ok\n".into()));
    assert_eq!(r.2 .0, 503);
    assert_eq!(r.3, (200, "ok\n".into()));
    assert_eq!(r.4 .0, 404);
}

/// The errors counter's label is a closed set, distinct from condition reasons: every
/// category shows under its own value, and nothing else can.
#[test]
fn errors_are_counted_by_a_closed_category() {
    let m = Metrics::new().unwrap();
    for c in ErrorCategory::ALL {
        m.count_error(c);
    }
    m.count_error(ErrorCategory::Blocked);
    let text = m.render();
    let names: Vec<&str> = ErrorCategory::ALL.iter().map(|c| c.as_str()).collect();
    let mut seen = 0;
    for line in text
        .lines()
        .filter(|l| l.starts_with("gpuplane_reconcile_errors_total{"))
    {
        let v = line.split('"').nth(1).unwrap();
        assert!(names.contains(&v), "{line}");
        seen += 1;
    }
    assert_eq!(seen, names.len(), "{text}");
    assert!(
        text.contains("gpuplane_reconcile_errors_total{category=\"blocked\"} 2"),
        "{text}"
    );
}

/// A connection to `port` on 127.0.0.1 from the loopback address `from` (another peer).
async fn connect_from(from: &str, port: u16) -> tokio::net::TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    s.connect(([127, 0, 0, 1], port).into()).await.unwrap()
}

/// Issue 23: one client holding idle connections (any pod reaches the metrics port) took all 16
/// slots, so scrapes and the liveness probe on the same listener timed out and the kubelet
/// restarted the agent. Now it gets its 4, others are served, and liveness has its own listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holding_connections_starves_neither_scrapes_nor_liveness() {
    let port = serve_ready(Metrics::new().unwrap()).await;
    let health = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let health_addr = health.local_addr().unwrap().to_string();
    tokio::spawn(serve_health_on(health, Arc::new(AtomicBool::new(true))));
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(connect_from("127.0.0.2", port).await);
    }
    let t = std::time::Instant::now();
    let (scrape, live) = tokio::task::spawn_blocking(move || {
        (
            get(port, "/metrics"),
            probe_health(&health_addr, "/healthz"),
        )
    })
    .await
    .unwrap();
    assert_eq!(scrape.0, 200);
    assert_eq!(live, Ok(()));
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_listener_serves_only_health_and_readiness() {
    let health = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = health.local_addr().unwrap().port();
    let ready = Arc::new(AtomicBool::new(false));
    tokio::spawn(serve_health_on(health, ready.clone()));
    let addr = format!("127.0.0.1:{port}");
    let (h, m, not_ready, is_ready) = tokio::task::spawn_blocking(move || {
        let (h, m) = (get(port, "/healthz"), get(port, "/metrics"));
        let not_ready = probe_health(&addr, "/readyz");
        ready.store(true, Ordering::SeqCst);
        (h, m, not_ready, probe_health(&addr, "/readyz"))
    })
    .await
    .unwrap();
    assert_eq!(h, (200, "ok\n".into()));
    assert_eq!(m.0, 404);
    assert!(not_ready.is_err_and(|e| e.contains("503")));
    assert_eq!(is_ready, Ok(()));
    assert!(probe_health("127.0.0.1:1", "/healthz").is_err());
}

/// `/sd/servers` is Prometheus's HTTP SD contract: 200, `application/json`, `[]` before the first
/// reconcile, then exactly the list the latest reconcile set (replaced, never merged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_server_list_as_prometheus_http_sd_json() {
    use std::io::{Read, Write};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let m = Metrics::new().unwrap();
    tokio::spawn(serve_on(
        listener,
        m.clone(),
        Arc::new(AtomicBool::new(true)),
    ));
    let raw = move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"GET /sd/servers HTTP/1.0\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let (before, after, replaced) = tokio::task::spawn_blocking(move || {
        let before = raw();
        m.set_server_sd(r#"[{"targets":["10.0.0.5:30000"],"labels":{"model":"q"}}]"#.into());
        let after = raw();
        m.set_server_sd("[]".into());
        (before, after, raw())
    })
    .await
    .unwrap();
    for r in [&before, &after, &replaced] {
        assert!(
            r.starts_with("HTTP/1.0 200") || r.starts_with("HTTP/1.1 200"),
            "{r}"
        );
        assert!(
            r.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{r}"
        );
    }
    assert!(before.ends_with("\r\n\r\n[]"), "{before}");
    assert!(after.ends_with(r#"[{"targets":["10.0.0.5:30000"],"labels":{"model":"q"}}]"#));
    assert!(replaced.ends_with("\r\n\r\n[]"), "{replaced}");
}

/// Issue 37: eight loopback aliases (each within its own cap of 4) took all 32 slots and every
/// scrape was refused; now their network holds at most 16, and a scrape from another network
/// is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_aliases_of_one_network_do_not_starve_the_scrapes() {
    let port = serve_ready(Metrics::new().unwrap()).await;
    let mut idle = Vec::new();
    for a in 2..10 {
        for _ in 0..4 {
            idle.push(connect_from(&format!("127.0.0.{a}"), port).await);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A scrape from another network (its source bound to 127.0.1.1).
    let scrape = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = connect_from("127.0.1.1", port).await;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    };
    assert!(
        scrape.starts_with("HTTP/1.0 200") || scrape.starts_with("HTTP/1.1 200"),
        "{scrape:?}"
    );
    drop(idle);
}

/// Issue 37: `/sd/servers` lists every tenant's servers; with a token set it answers only a
/// request that carries it (401 with `WWW-Authenticate: Bearer` otherwise), `/metrics` stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_list_requires_the_bearer_token_when_one_is_set() {
    use std::io::{Read, Write};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let m = Metrics::new().unwrap();
    m.set_sd_token(Some("s3cret-token-0123456789".into()));
    tokio::spawn(serve_on(listener, m, Arc::new(AtomicBool::new(true))));
    let ask = move |path: &str, auth: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let req = format!("GET {path} HTTP/1.0\r\nHost: x\r\n{auth}\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let (none, wrong, right, metrics) = tokio::task::spawn_blocking(move || {
        (
            ask("/sd/servers", ""),
            ask(
                "/sd/servers",
                "Authorization: Bearer s3cret-token-0123456780\r\n",
            ),
            ask(
                "/sd/servers",
                "Authorization: Bearer s3cret-token-0123456789\r\n",
            ),
            ask("/metrics", ""),
        )
    })
    .await
    .unwrap();
    assert!(
        none.contains(" 401 ")
            && none
                .to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
        "{none}"
    );
    assert!(wrong.contains(" 401 "), "{wrong}");
    assert!(right.contains(" 200 ") && right.ends_with("[]"), "{right}");
    assert!(metrics.contains(" 200 "), "{metrics}");
}

/// Serves `m` (ready) on a loopback port of its own; returns the port.
async fn serve_ready(m: Metrics) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(serve_on(listener, m, Arc::new(AtomicBool::new(true))));
    port
}
