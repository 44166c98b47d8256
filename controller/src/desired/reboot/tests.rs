use super::*;
use gpuplane_crds::{HostSpec, KernelArgs};

fn at(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

fn spec(reboot: RebootPolicy, window: Option<(&str, &str, Vec<Weekday>)>) -> GpuPartitionSpec {
    let mut s = crate::testutil::manifests().partitions[0].spec.clone();
    s.host = Some(HostSpec {
        kernel_args: Some(KernelArgs {
            present: vec!["vfio-pci.disable_idle_d3=1".into()],
            absent: vec![],
            allow_keys: vec![],
        }),
        reboot,
        maintenance_window: window.map(|(start, end, days)| MaintenanceWindow {
            start: start.into(),
            end: end.into(),
            days,
        }),
    });
    s
}

fn window(start: &str, end: &str, days: Vec<Weekday>) -> Window {
    parse_window(&MaintenanceWindow {
        start: start.into(),
        end: end.into(),
        days,
    })
    .unwrap()
}

#[test]
fn a_window_is_open_from_its_start_up_to_its_end_in_utc() {
    let w = window("02:00", "04:00", vec![]);
    // 2026-12-04 is a Friday.
    assert!(!w.open_at(at("2026-12-04T01:59:59Z")));
    assert!(w.open_at(at("2026-12-04T02:00:00Z")));
    assert!(w.open_at(at("2026-12-04T03:59:00Z")));
    assert!(!w.open_at(at("2026-12-04T04:00:00Z")));
    assert_eq!(w.describe(), "02:00-04:00 UTC");
}

#[test]
fn a_window_past_midnight_belongs_to_the_day_it_opens_on() {
    let w = window("23:00", "01:30", vec![Weekday::Sat]);
    assert!(!w.open_at(at("2026-12-04T23:30:00Z")), "Friday night");
    assert!(w.open_at(at("2026-12-05T23:30:00Z")), "Saturday night");
    assert!(
        w.open_at(at("2026-12-06T01:00:00Z")),
        "Saturday's window on Sunday morning"
    );
    assert!(!w.open_at(at("2026-12-06T01:30:00Z")));
    assert!(
        !w.open_at(at("2026-12-05T01:00:00Z")),
        "Friday's would-be window"
    );
    assert_eq!(w.describe(), "23:00-01:30 UTC on Sat");
}

#[test]
fn bad_windows_say_what_to_write() {
    let bad = |s: &str, e: &str| {
        parse_window(&MaintenanceWindow {
            start: s.into(),
            end: e.into(),
            days: vec![],
        })
        .unwrap_err()
    };
    assert!(bad("2:00", "04:00").starts_with("start: \"2:00\" is not a time of day as HH:MM"));
    assert!(bad("02:00", "24:00").starts_with("end: \"24:00\""));
    assert!(bad("03:00", "03:00").contains("would be empty"));
}

#[test]
fn manual_never_opens() {
    let s = spec(RebootPolicy::Manual, None);
    assert_eq!(
        RebootGate::decide(&s, Some("fleet"), true, at("2026-12-04T03:00:00Z")),
        RebootGate::Manual
    );
    assert_eq!(RebootGate::of(&s), RebootGate::Manual);
}

#[test]
fn auto_opens_on_a_pool_or_inside_the_window() {
    let now = at("2026-12-04T03:00:00Z");
    let later = at("2026-12-04T12:34:00Z");
    let pool_only = spec(RebootPolicy::Auto, None);
    let win = spec(RebootPolicy::Auto, Some(("02:00", "04:00", vec![])));
    let open = |g: RebootGate| match g {
        RebootGate::Now(by) => Ok(by),
        RebootGate::Later(why) => Err(format!("later: {why}")),
        RebootGate::Cannot(why) => Err(why),
        RebootGate::Manual => panic!("Manual"),
    };
    assert_eq!(
        open(RebootGate::decide(&pool_only, Some("fleet"), true, later)),
        Ok("holding a disruption slot of pool fleet".into())
    );
    assert!(open(RebootGate::decide(&pool_only, None, true, now)).is_err());
    assert_eq!(
        open(RebootGate::decide(&win, None, false, now)),
        Ok("inside spec.host.maintenanceWindow 02:00-04:00 UTC".into())
    );
    assert_eq!(
        open(RebootGate::decide(&win, None, false, later)),
        Err(
            "later: outside spec.host.maintenanceWindow 02:00-04:00 UTC (now Fri 12:34 UTC)".into()
        )
    );
    // A pool and a window: both must allow it.
    assert!(open(RebootGate::decide(&win, Some("fleet"), true, later)).is_err());
    assert!(open(RebootGate::decide(&win, Some("fleet"), true, now))
        .unwrap()
        .starts_with("holding a disruption slot of pool fleet, inside"));
    // An agent on files cannot ask a pool: the window decides, or nothing does.
    let e = open(RebootGate::decide(&pool_only, Some("fleet"), false, now)).unwrap_err();
    assert!(e.contains("set spec.host.maintenanceWindow"), "{e}");
    assert!(open(RebootGate::decide(&win, Some("fleet"), false, now)).is_ok());
    // Before a front door decides, Auto is closed.
    assert!(open(RebootGate::of(&pool_only)).is_err());
}
