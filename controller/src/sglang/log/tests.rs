use super::*;

fn v(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

#[test]
fn phases_from_real_formats() {
    assert_eq!(
        phase(&v(&[
            "[2026-01-01 12:00:00 TP0] Init torch distributed begin."
        ])),
        Some(StartupPhase::Launching)
    );
    assert_eq!(
        phase(&v(&[
            "[2026-01-01 12:00:00 TP0] Load weight begin. avail mem=94.30 GB",
            "[2026-01-01 12:00:20 TP1] Load weight end. elapsed=20.00 s, type=Qwen3, dtype=torch.bfloat16, avail mem=36.09 GB, mem usage=58.21 GB."
        ])),
        Some(StartupPhase::AllocatingKvCache)
    );
    assert_eq!(
        phase(&v(&["[2026-01-01 12:01:00 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=24.16 GB"])),
        Some(StartupPhase::CapturingCudaGraphs)
    );
    assert_eq!(
        phase(
            &v(&["[T] Capture target decode CUDA graph begin. backend=full"])
                .iter()
                .map(|s| s.replace("[T]", "[2026-01-01 00:00:00]"))
                .collect::<Vec<_>>()
        ),
        Some(StartupPhase::CapturingCudaGraphs)
    );
    assert_eq!(
        phase(&v(&[
            "[2026-01-01 12:02:00] The server is fired up and ready to roll!"
        ])),
        Some(StartupPhase::Ready)
    );
    assert_eq!(phase(&v(&["random"])), None);
}

/// Words of SGLang's startup log, for fuzz input that reaches every phase.
const LOG_WORDS: &[&str] = &[
    "[2026-01-01 12:00:00 TP0] ",
    "Init torch distributed begin.",
    "Init parallel begin.",
    "] Load weight begin.",
    "] Load weight end.",
    "KV Cache is allocated",
    "] Capture ",
    " begin.",
    "Uvicorn running on",
    "Application startup complete",
    "The server is fired up and ready to roll!",
    "\n",
    "\r",
    "é",
    "]",
];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: crate::testutil::cases(2048),
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Any journal lines: never a panic, and the phase is one some line names.
    #[test]
    fn any_log_lines_give_a_phase_without_panic(
        lines in proptest::collection::vec(
            proptest::prop_oneof!["(?s).{0,80}", crate::testutil::noisy(LOG_WORDS)],
            0..12,
        )
    ) {
        let p = phase(&lines);
        let one_by_one = lines.iter().filter_map(|l| phase(std::slice::from_ref(l))).max();
        proptest::prop_assert_eq!(p, one_by_one);
    }
}

/// The phase's start is the first line that reached it; lines of an earlier run (logged before
/// the process started) do not count.
#[test]
fn phase_since_is_the_first_line_of_the_phase_in_this_run() {
    let lines = v(&[
        "[2026-01-01 11:00:00] The server is fired up and ready to roll!",
        "[2026-01-01 12:00:00 TP0] Init parallel begin.",
        "[2026-01-01 12:00:05 TP0] Load weight begin. avail mem=94.30 GB",
        "[2026-01-01 12:00:06 TP1] Load weight begin. avail mem=94.30 GB",
        "Loading safetensors checkpoint shards:  50% Completed | 1/2",
    ]);
    let times = [Some(100), Some(200), Some(205), Some(206), Some(230)];
    assert_eq!(
        phase_since(&lines, &times, Some(150)),
        (Some(StartupPhase::LoadingWeights), Some(205))
    );
    // Without the start time the earlier run's "fired up" line wins, as `phase` always did.
    assert_eq!(
        phase_since(&lines, &times, None).0,
        Some(StartupPhase::Ready)
    );
    assert_eq!(
        phase_since(&lines, &[], Some(150)),
        (Some(StartupPhase::Ready), None)
    );
}
