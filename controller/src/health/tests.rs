use super::*;
use crate::host::health::{EccCounters, PcieCounters, PcieHealth, PortHealth};
use gpuplane_crds::GpuHealthState::*;

const GPU: &str = "0000:81:00.0";

fn gpu(health: PcieHealth) -> PciDevice {
    PciDevice {
        address: GPU.into(),
        vendor: "10de".into(),
        class: "030200".into(),
        health,
        ..Default::default()
    }
}

fn aer(correctable: u64, nonfatal: u64, fatal: u64) -> Option<AerCounts> {
    Some(AerCounts {
        correctable,
        nonfatal,
        fatal,
        named: Default::default(),
    })
}

fn at_port(c: PcieCounters) -> PcieHealth {
    PcieHealth {
        port: Some(PortHealth {
            address: "0000:80:01.0".into(),
            counters: c,
        }),
        ..Default::default()
    }
}

fn xid(address: &str, n: u32, text: &str) -> GpuEvent {
    GpuEvent {
        address: address.into(),
        xid: Some(n),
        line: format!("NVRM: Xid (PCI:{}): {n}, {text}", &address[..10]),
    }
}

#[test]
fn a_quiet_gpu_is_healthy_with_nothing_to_say() {
    let j = judge(&gpu(PcieHealth::default()), &[]);
    assert_eq!(
        j,
        Judgment {
            state: Healthy,
            repair: None,
            evidence: vec![]
        }
    );
}

#[test]
fn pcie_errors_by_severity_at_the_gpu_or_its_port() {
    let mut named = AerCounts {
        fatal: 1,
        ..Default::default()
    };
    named.named.insert("fatal: Surprise Down Error".into(), 1);
    let fatal = PcieCounters {
        aer: Some(named),
        link: None,
    };
    let j = judge(&gpu(at_port(fatal)), &[]);
    assert_eq!((j.state, j.repair), (Unhealthy, Some(GpuRepair::ResetGpu)));
    assert_eq!(
        j.evidence,
        ["1 fatal PCIe error(s) at its port 0000:80:01.0 (Surprise Down Error 1)"]
    );

    let own = |a| PcieHealth {
        device: PcieCounters { aer: a, link: None },
        ..Default::default()
    };
    assert_eq!(judge(&gpu(own(aer(0, 2, 0))), &[]).state, Suspect);
    let below = judge(&gpu(own(aer(CORRECTABLE_SUSPECT - 1, 0, 0))), &[]);
    assert_eq!(below.state, Healthy);
    assert!(
        below.evidence[0].contains("not judged"),
        "{:?}",
        below.evidence
    );
    assert_eq!(
        judge(&gpu(own(aer(CORRECTABLE_SUSPECT, 0, 0))), &[]).state,
        Suspect
    );
}

#[test]
fn a_narrowed_link_is_suspect_a_slow_one_only_shown() {
    let link = |speed, width| PcieHealth {
        device: PcieCounters {
            aer: None,
            link: Some(LinkState {
                speed,
                max_speed: 32000,
                width,
                max_width: 16,
            }),
        },
        ..Default::default()
    };
    let narrow = judge(&gpu(link(32000, 8)), &[]);
    assert_eq!(
        (narrow.state, narrow.evidence.as_slice()),
        (Suspect, &["link x8 of x16".to_string()][..])
    );
    let slow = judge(&gpu(link(2500, 16)), &[]);
    assert_eq!(slow.state, Healthy);
    assert_eq!(
        slow.evidence,
        ["link at 2.5 GT/s of 32.0 GT/s: not judged (a GPU slows its link when idle)"]
    );
}

#[test]
fn the_link_is_judged_at_the_gpu_against_both_ends() {
    let l = |speed, max_speed, width, max_width| LinkState {
        speed,
        max_speed,
        width,
        max_width,
    };
    let with = |dev: Option<LinkState>, port: Option<LinkState>| PcieHealth {
        device: PcieCounters {
            aer: None,
            link: dev,
        },
        port: Some(PortHealth {
            address: "0000:80:01.0".into(),
            counters: PcieCounters {
                aer: None,
                link: port,
            },
        }),
        ..Default::default()
    };
    // An x16 board in an x8 slot at Gen4 runs as it should.
    let slot = with(Some(l(16000, 32000, 8, 16)), Some(l(16000, 16000, 8, 8)));
    assert_eq!(judge(&gpu(slot), &[]), Judgment::default());
    // The same board trained to x4 in that slot is narrowed.
    let narrowed = with(Some(l(16000, 32000, 4, 16)), Some(l(16000, 16000, 4, 8)));
    assert_eq!(judge(&gpu(narrowed), &[]).evidence, ["link x4 of x8"]);
    // A conventional PCI device (no link files) behind a port: the port's width is not its
    // (qemu's root port above a bochs-display reads x1 of x32).
    let legacy = with(None, Some(l(2500, 16000, 1, 32)));
    assert_eq!(judge(&gpu(legacy), &[]), Judgment::default());
}

#[test]
fn xids_by_the_catalogue() {
    let one = |n: u32, text: &str| {
        let j = judge(&gpu(PcieHealth::default()), &[xid(GPU, n, text)]);
        (j.state, j.repair)
    };
    for n in [13, 31, 43, 45, 63, 92, 94] {
        assert_eq!(one(n, "x"), (Healthy, None), "Xid {n}");
    }
    for n in [46, 48, 62, 64, 95, 109, 119, 120] {
        assert_eq!(
            one(n, "x"),
            (Unhealthy, Some(GpuRepair::ResetGpu)),
            "Xid {n}"
        );
    }
    assert_eq!(one(74, "x"), (Unhealthy, Some(GpuRepair::ContactSupport)));
    assert_eq!(
        one(79, "GPU has fallen off the bus."),
        (Lost, Some(GpuRepair::RebootNode))
    );
    assert_eq!(one(999, "x"), (Suspect, None), "unknown: a person looks");
    let changed = |to: &str| {
        one(
            154,
            &format!("GPU recovery action changed from 0x0 (None) to 0x2 ({to})"),
        )
    };
    assert_eq!(
        changed("Node Reboot Required"),
        (Unhealthy, Some(GpuRepair::RebootNode))
    );
    assert_eq!(
        changed("GPU Reset Required"),
        (Unhealthy, Some(GpuRepair::ResetGpu))
    );
    assert_eq!(
        changed("Drain and Reset"),
        (Unhealthy, Some(GpuRepair::ResetGpu))
    );
    assert_eq!(changed("None"), (Healthy, None));
    assert_eq!(
        changed("Something New"),
        (Unhealthy, Some(GpuRepair::ContactSupport))
    );
}

#[test]
fn only_the_gpus_own_events_count_and_the_worst_decides() {
    let other = xid("0000:41:00.0", 48, "DBE");
    assert_eq!(
        judge(&gpu(PcieHealth::default()), std::slice::from_ref(&other)).state,
        Healthy
    );

    let events = [
        xid(GPU, 13, "app"),
        other,
        xid(GPU, 79, "gone"),
        xid(GPU, 48, "DBE"),
    ];
    let j = judge(&gpu(PcieHealth::default()), &events);
    assert_eq!((j.state, j.repair), (Lost, Some(GpuRepair::RebootNode)));
    assert!(
        j.evidence[0].starts_with("Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"),
        "{:?}",
        j.evidence
    );
    assert!(j.evidence[1].starts_with("Xid 48 "), "{:?}", j.evidence);
    assert!(j.evidence[2].starts_with("Xid 13 "), "{:?}", j.evidence);
    assert_eq!(j.evidence.len(), 3);

    // The same Xid again and again is one finding, counted.
    let many: Vec<GpuEvent> = (0..20).map(|_| xid(GPU, 48, "DBE")).collect();
    let j = judge(&gpu(PcieHealth::default()), &many);
    assert_eq!(j.evidence.len(), 1, "{:?}", j.evidence);
    assert!(
        j.evidence[0].ends_with("DBE (20 times, the last shown)"),
        "{:?}",
        j.evidence
    );
    // Evidence is bounded however many kinds of Xid there are.
    let kinds: Vec<GpuEvent> = (1000..1020).map(|n| xid(GPU, n, "new")).collect();
    assert_eq!(
        judge(&gpu(PcieHealth::default()), &kinds).evidence.len(),
        EVIDENCE_MAX
    );
}

#[test]
fn a_gpu_that_does_not_answer_or_is_gone_is_lost() {
    let silent = PcieHealth {
        not_responding: true,
        ..Default::default()
    };
    let j = judge(&gpu(silent), &[]);
    assert_eq!((j.state, j.repair), (Lost, Some(GpuRepair::RebootNode)));
    assert_eq!(missing().state, Lost);
    let fell = GpuEvent {
        address: GPU.into(),
        xid: None,
        line: "NVRM: The NVIDIA GPU 0000:81:00.0".into(),
    };
    assert_eq!(judge(&gpu(PcieHealth::default()), &[fell]).state, Lost);
}

/// The table in `docs/health.md` lists exactly the code's rows, with the same class.
#[test]
fn the_documented_xid_table_is_the_codes() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/health.md")).unwrap();
    let rows: Vec<(u32, String, String)> = doc
        .lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split('|').map(str::trim).collect();
            let n = c.get(1)?.parse().ok()?;
            Some((
                n,
                c.get(2)?.trim_matches('`').to_string(),
                c.get(3)?.to_string(),
            ))
        })
        .collect();
    let code: Vec<(u32, String, String)> = xid::TABLE
        .iter()
        .map(|(n, name, class)| (*n, name.to_string(), format!("{class:?}")))
        .collect();
    assert_eq!(rows, code);
}

#[test]
fn the_drivers_memory_counters() {
    let with = |ecc: EccCounters| PcieHealth {
        ecc: Some(ecc),
        ..Default::default()
    };
    let zero = EccCounters {
        uncorrected: Some(0),
        corrected: Some(3),
        remapped_correctable: Some(0),
        remapped_uncorrectable: Some(0),
        ..Default::default()
    };
    assert_eq!(
        judge(&gpu(with(zero)), &[]),
        Judgment::default(),
        "corrected errors: not judged"
    );
    let j = judge(
        &gpu(with(EccCounters {
            uncorrected: Some(2),
            ..zero
        })),
        &[],
    );
    assert_eq!((j.state, j.repair), (Unhealthy, Some(GpuRepair::ResetGpu)));
    assert_eq!(
        j.evidence,
        ["2 uncorrectable ECC error(s) since the driver loaded"]
    );
    let j = judge(
        &gpu(with(EccCounters {
            remap_pending: true,
            ..zero
        })),
        &[],
    );
    assert_eq!((j.state, j.repair), (Unhealthy, Some(GpuRepair::ResetGpu)));
    let j = judge(
        &gpu(with(EccCounters {
            remap_failure: true,
            remap_pending: true,
            ..zero
        })),
        &[],
    );
    assert_eq!(
        (j.state, j.repair),
        (Unhealthy, Some(GpuRepair::ContactSupport))
    );
    let j = judge(
        &gpu(with(EccCounters {
            remapped_uncorrectable: Some(2),
            ..zero
        })),
        &[],
    );
    assert_eq!(j.state, Healthy);
    assert_eq!(
        j.evidence,
        ["2 memory row(s) remapped: not judged (a repair that worked)"]
    );
}
