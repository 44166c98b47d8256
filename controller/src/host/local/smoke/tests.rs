use super::*;

fn req(name: &str, sleep_ms: u64, ok: bool) -> Request {
    let name2 = name.to_string();
    Request {
        name: name.into(),
        send: Box::new(move |deadline| {
            let took = Duration::from_millis(sleep_ms);
            std::thread::sleep(took.min(deadline));
            if took > deadline {
                Err(format!("{name2}: timed out"))
            } else if ok {
                Ok(())
            } else {
                Err(format!("{name2}: wrong answer"))
            }
        }),
    }
}

/// The observation never waits for a test: it starts one and returns; the result is there
/// on a later look, for that unit only.
#[test]
fn a_test_runs_beside_the_observation_and_is_kept_per_unit() {
    let r = Runner::default();
    let t0 = Instant::now();
    let first = r.result_or_start("k", "h1", Duration::from_secs(5), || {
        vec![req("a", 300, true), req("b", 0, false)]
    });
    assert_eq!(first, None);
    assert!(t0.elapsed() < Duration::from_millis(250), "did not wait");
    assert!(r.is_running("k"));
    // Asked again while it runs: not started twice.
    assert_eq!(
        r.result_or_start("k", "h1", Duration::from_secs(5), || panic!(
            "started twice"
        )),
        None
    );
    let mut done = None;
    for _ in 0..100 {
        done = r.result_or_start("k", "h1", Duration::from_secs(5), Vec::new);
        if done.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let done = done.expect("finished");
    assert_eq!(
        (done.requests, done.failures.clone()),
        (2, vec!["b: wrong answer".to_string()])
    );
    // Another unit (a new spec) is tested anew.
    assert_eq!(
        r.result_or_start("k", "h2", Duration::from_secs(5), || vec![req(
            "a", 0, true
        )]),
        None
    );
}

/// A slow server cannot make a test last longer than its budget.
#[test]
fn requests_past_the_budget_are_failures_not_waits() {
    let t0 = Instant::now();
    let res = run(
        vec![
            req("a", 400, true),
            req("b", 400, true),
            req("c", 400, true),
        ],
        Duration::from_secs(10),
        Duration::from_millis(500),
        "h".into(),
    );
    assert!(t0.elapsed() < Duration::from_millis(1500));
    assert_eq!(res.requests, 3);
    assert_eq!(res.failures.len(), 2, "{:?}", res.failures);
    assert!(
        res.failures[0].starts_with("b: timed out"),
        "{:?}",
        res.failures
    );
    assert!(res.failures[1].starts_with("c: "), "{:?}", res.failures);
}
