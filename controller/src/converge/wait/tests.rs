use super::clean;

/// Finding 8: a crashed server's log went into status and events unsanitized and uncapped.
#[test]
fn a_hostile_log_tail_is_bounded_and_one_line_each() {
    let mut lines: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
    lines.push(format!("\u{1b}]0;pwned\u{7}{}", "é".repeat(10_000)));
    let c = clean(&lines);
    assert_eq!(c.len(), 30);
    assert_eq!(c[0], "line 71");
    let last = c.last().unwrap();
    assert!(
        last.len() <= 512 && !last.chars().any(|ch| ch.is_control()),
        "{last:?}"
    );
}

use super::{StartupTrack, WaitOutcome};
use crate::host::model::{HostState, Location, ServerObservation, Unit, UnitRef};
use crate::sglang::StartupPhase;

fn with_server(unit: &UnitRef, phase: StartupPhase, since: Option<u64>) -> HostState {
    let mut st = HostState::default();
    st.units.insert(
        unit.key(),
        Unit {
            active_state: "active".into(),
            server: Some(ServerObservation {
                phase: Some(phase),
                phase_since: since,
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    st
}

/// The stall clock starts at the journal line that began the phase, not when the agent looked:
/// an agent that polls every 5 s still reports a 10 s stall 10 s after the server's last line.
#[test]
fn a_stall_counts_from_the_line_that_began_the_phase() {
    let u = UnitRef {
        location: Location::Host,
        name: "gpuplane-sglang-x.service".into(),
    };
    let mut p = StartupTrack::new(1000);
    let launching = with_server(&u, StartupPhase::Launching, Some(1000));
    assert_eq!(p.check(&launching, &u, "m", 10, 600, 1001), None);
    // The weights began loading at 1002; the agent looks at 1006.
    let loading = with_server(&u, StartupPhase::LoadingWeights, Some(1002));
    assert_eq!(p.check(&loading, &u, "m", 10, 600, 1006), None);
    assert_eq!(
        p.stall_due_in(1006),
        Some(6),
        "due 10 s after the line, not after the look"
    );
    assert_eq!(p.check(&loading, &u, "m", 10, 600, 1011), None);
    match p.check(&loading, &u, "m", 10, 600, 1012) {
        Some(WaitOutcome::Stalled {
            stalled_seconds,
            phase,
            ..
        }) => {
            assert_eq!((stalled_seconds, phase.as_str()), (10, "LoadingWeights"))
        }
        o => panic!("{o:?}"),
    }
}

/// A line from before this wait began (an earlier run still in the journal's tail, a clock
/// that jumped) never makes a stall due sooner than `stall_after` after the wait began; without
/// a time the clock starts when the agent saw the phase.
#[test]
fn a_phase_time_before_the_wait_or_unknown_starts_the_clock_no_earlier_than_the_wait() {
    let u = UnitRef {
        location: Location::Host,
        name: "gpuplane-sglang-x.service".into(),
    };
    let mut p = StartupTrack::new(1000);
    let old = with_server(&u, StartupPhase::LoadingWeights, Some(10));
    assert_eq!(p.check(&old, &u, "m", 10, 600, 1003), None);
    assert_eq!(p.stall_due_in(1003), Some(7));
    let mut q = StartupTrack::new(1000);
    let unknown = with_server(&u, StartupPhase::LoadingWeights, None);
    assert_eq!(q.check(&unknown, &u, "m", 10, 600, 1004), None);
    assert_eq!(q.stall_due_in(1004), Some(10));
}

/// Issue 23: smoke tests left the observation, so a wait with a smoke test ends only once the
/// test of the running unit has a result; meanwhile a Ready server is not a stall, however long
/// the test takes, and only the deadline ends the wait.
#[test]
fn with_a_smoke_test_ready_waits_for_the_result_of_this_unit() {
    use crate::host::model::{HttpState, SmokeResult};
    let u = UnitRef {
        location: Location::Host,
        name: "gpuplane-sglang-x.service".into(),
    };
    let mut st = with_server(&u, StartupPhase::Ready, Some(1000));
    let unit = st.units.get_mut(&u.key()).unwrap();
    unit.file = Some("[Service]\nExecStart=/p -m sglang.launch_server\n".into());
    let hash = crate::digest::sha256(unit.file.as_deref().unwrap());
    let obs = unit.server.as_mut().unwrap();
    obs.http = HttpState::Healthy;
    obs.models = vec!["m".into()];
    let mut p = StartupTrack::new(1000);
    p.smoke_test = true;
    assert_eq!(
        p.check(&st, &u, "m", 10, 600, 1100),
        None,
        "no result, no stall"
    );
    let with = |st: &mut HostState, h: &str| {
        let obs = st.units.get_mut(&u.key()).unwrap().server.as_mut().unwrap();
        obs.smoke = Some(SmokeResult {
            unit_hash: h.into(),
            requests: 1,
            failures: vec![],
        });
    };
    with(&mut st, "an older unit's");
    assert_eq!(p.check(&st, &u, "m", 10, 600, 1200), None);
    assert!(matches!(
        p.check(&st, &u, "m", 10, 600, 1600),
        Some(WaitOutcome::DeadlineExceeded { .. })
    ));
    with(&mut st, &hash);
    assert!(matches!(
        p.check(&st, &u, "m", 10, 600, 1300),
        Some(WaitOutcome::Ready { .. })
    ));
    let mut plain = StartupTrack::new(1000);
    with(&mut st, "an older unit's");
    assert!(
        matches!(
            plain.check(&st, &u, "m", 10, 600, 1001),
            Some(WaitOutcome::Ready { .. })
        ),
        "without a smoke test Ready is Ready"
    );
}
