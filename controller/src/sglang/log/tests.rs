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
