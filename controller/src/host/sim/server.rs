//! A simulated SGLang process: reads the unit it was started with and plays the
//! startup timeline (phases, GPU memory, log lines, HTTP state) at the host's clock.

use super::SimHost;
use super::SimUnit;
use crate::host::model::*;
use crate::sglang::flags;
use crate::sglang::StartupPhase;
use crate::systemd::unit;

/// The observed unit, plus the GPUs the process holds while it lives.
pub(super) struct Run {
    pub unit: Unit,
    pub running: Option<Running>,
}

pub(super) struct Running {
    pub gpus: Vec<String>,
}

fn ts(clock: u64) -> String {
    let (h, m, s) = ((clock / 3600) % 24, (clock / 60) % 60, clock % 60);
    format!("[2026-11-30 {h:02}:{m:02}:{s:02}]")
}

/// Plays the unit `u` at `r` on host `sim`.
pub(super) fn run(sim: &SimHost, r: &UnitRef, u: &SimUnit) -> Run {
    let mut unit = Unit {
        active_state: "inactive".into(),
        sub_state: "dead".into(),
        file: u.file.clone(),
        needs_reload: u.loaded.is_some() && u.loaded != u.file,
        running_stale: u.running.is_some()
            && u.running != u.loaded.clone().or_else(|| u.file.clone()),
        last_ready: u.last_ready.clone(),
        failed_hash: u.failed_hash.clone(),
        ..Unit::default()
    };
    let (Some(t0), Some(content)) = (u.started_at, u.running.as_deref()) else {
        return Run {
            unit,
            running: None,
        };
    };
    let now = sim.file.clock;
    let failed = |mut unit: Unit, code: i32, lines: Vec<String>| {
        unit.active_state = "failed".into();
        unit.sub_state = "failed".into();
        unit.exit_status = Some(code);
        unit.log_tail = lines;
        Run {
            unit,
            running: None,
        }
    };
    let parsed = match unit::parse(content) {
        Ok(p) => p,
        Err(e) => {
            return failed(
                unit,
                203,
                vec![format!("{} systemd: bad unit file: {e}", ts(t0))],
            )
        }
    };
    unit.active_state = "active".into();
    unit.sub_state = "running".into();
    let argv = &parsed.exec_start;
    if argv.get(1).map(String::as_str) != Some("-m")
        || argv.get(2).map(String::as_str) != Some("sglang.launch_server")
    {
        // Not an SGLang unit: a plain service that keeps running.
        return Run {
            unit,
            running: None,
        };
    }
    // argparse: unknown flags end the process at once.
    let unknown: Vec<&String> = argv[3..]
        .iter()
        .filter(|a| a.starts_with("--"))
        .filter(|a| flags::lookup(a.split('=').next().unwrap_or(a)).is_none())
        .collect();
    if !unknown.is_empty() {
        let names: Vec<&str> = unknown.iter().map(|s| s.as_str()).collect();
        return failed(
            unit,
            2,
            vec![format!(
                "sglang serve: error: unrecognized arguments: {}",
                names.join(" ")
            )],
        );
    }
    let arg = |flag: &str| {
        argv.iter()
            .position(|a| a == flag)
            .and_then(|i| argv.get(i + 1))
            .cloned()
    };
    let tp: usize = arg("--tp-size").and_then(|v| v.parse().ok()).unwrap_or(1);
    let served = arg("--served-model-name")
        .or_else(|| arg("--model-path"))
        .unwrap_or_default();
    let env = |k: &str| {
        parsed
            .environment
            .iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    let visible = sim.visible_gpus(r.location);
    let gpus: Vec<String> = match env("CUDA_VISIBLE_DEVICES") {
        None => visible.clone(),
        Some(v) => {
            let mut out = Vec::new();
            for idx in v.split(',').filter(|s| !s.is_empty()) {
                match idx.trim().parse::<usize>().ok().and_then(|i| visible.get(i)) {
                    Some(g) => out.push(g.clone()),
                    None => {
                        return failed(
                            unit,
                            1,
                            vec![
                                format!("{} Init torch distributed begin.", ts(t0 + 2)),
                                format!("{} RuntimeError: CUDA error: invalid device ordinal (CUDA_VISIBLE_DEVICES={v}, {} GPUs visible)", ts(t0 + 3), visible.len()),
                            ],
                        )
                    }
                }
            }
            out
        }
    };
    if gpus.len() < tp {
        return failed(
            unit,
            1,
            vec![format!(
                "{} RuntimeError: tp_size {tp} needs {tp} GPUs but only {} are visible",
                ts(t0 + 3),
                gpus.len()
            )],
        );
    }
    let gpus: Vec<String> = gpus.into_iter().take(tp.max(1)).collect();
    // Test hook: SIM_CRASH_AT=load makes the process die while loading weights.
    if env("SIM_CRASH_AT").as_deref() == Some("load") && now >= t0 + sim.file.behaviour.init_seconds
    {
        return failed(
            unit,
            1,
            vec![
                format!(
                    "{} Load weight begin. avail mem=94.30 GB",
                    ts(t0 + sim.file.behaviour.init_seconds)
                ),
                format!(
                    "{} RuntimeError: CUDA error: an illegal memory access was encountered",
                    ts(t0 + sim.file.behaviour.init_seconds + 1)
                ),
            ],
        );
    }
    let b = &sim.file.behaviour;
    let translated = sim.file.iommu.mode() == IommuMode::Translated;
    let nccl_p2p = env("NCCL_P2P_DISABLE").as_deref() != Some("1");
    let custom_ar = !argv.iter().any(|a| a == "--disable-custom-all-reduce");
    let corrupt = b.p2p_corrupt && translated && tp >= 2;
    let tprefix = if tp > 1 { " TP0" } else { "" };
    let line = |t: u64, msg: &str| format!("{}{tprefix}] {msg}", &ts(t)[..ts(t).len() - 1]);
    let mut log = vec![line(t0, "Init torch distributed begin.")];
    let (t_load, t_kv, t_graph, t_warm) = (
        t0 + b.init_seconds,
        t0 + b.init_seconds + b.load_seconds,
        t0 + b.init_seconds + b.load_seconds + b.kv_seconds,
        t0 + b.init_seconds + b.load_seconds + b.kv_seconds + b.graph_seconds,
    );
    let t_ready = t_warm + b.warmup_seconds;
    let mut obs = ServerObservation {
        phase: Some(StartupPhase::Launching),
        ..ServerObservation::default()
    };
    let mem = |m: u64| vec![m; gpus.len()];
    obs.gpu_memory_mib = mem(b.base_mib);
    // A hung process: alive, holding its GPUs, its log and memory frozen where it stopped.
    let hung = |mut unit: Unit, log: Vec<String>, obs: ServerObservation, gpus: Vec<String>| {
        unit.log_tail = log;
        unit.server = Some(obs);
        Run {
            unit,
            running: Some(Running { gpus }),
        }
    };
    // NCCL with P2P over a translating IOMMU: hangs in init, memory flat.
    if corrupt && nccl_p2p {
        return hung(unit, log, obs, gpus);
    }
    if now >= t_load {
        log.push(line(
            t_load,
            "Init torch distributed ends. mem usage=0.74 GB",
        ));
        log.push(line(t_load, "Load weight begin. avail mem=94.30 GB"));
        obs.phase = Some(StartupPhase::LoadingWeights);
        let frac = (now - t_load).min(b.load_seconds) as f64 / b.load_seconds.max(1) as f64;
        obs.gpu_memory_mib = mem(b.base_mib + ((b.weights_mib - b.base_mib) as f64 * frac) as u64);
    }
    if now >= t_kv {
        log.push(line(t_kv, &format!("Load weight end. elapsed={:.2} s, type=Qwen3_5MoeForCausalLM, dtype=torch.bfloat16, avail mem=36.09 GB, mem usage={:.2} GB.", b.load_seconds as f64, b.weights_mib as f64 / 1024.0)));
        obs.gpu_memory_mib = mem(b.weights_mib);
        // SGLang's custom all-reduce does its own P2P through CUDA IPC: the first collective never returns.
        if corrupt && custom_ar {
            return hung(unit, log, obs, gpus);
        }
        obs.phase = Some(StartupPhase::AllocatingKvCache);
    }
    if now >= t_graph {
        log.push(line(
            t_graph,
            &format!(
                "KV Cache is allocated. #tokens: 1048576, K size: {:.2} GB, V size: {:.2} GB",
                b.kv_mib as f64 / 2048.0,
                b.kv_mib as f64 / 2048.0
            ),
        ));
        log.push(line(
            t_graph,
            "Capture cuda graph begin. This can take up to several minutes. avail mem=3.10 GB",
        ));
        obs.phase = Some(StartupPhase::CapturingCudaGraphs);
        obs.gpu_memory_mib = mem(b.weights_mib + b.kv_mib);
    }
    if now >= t_warm {
        log.push(line(
            t_warm,
            "Capture cuda graph end. Time elapsed: 45.00 s. mem usage=1.20 GB. avail mem=1.90 GB.",
        ));
        log.push(format!(
            "{} INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
            ts(t_warm)
        ));
        obs.phase = Some(StartupPhase::WarmingUp);
        obs.http = HttpState::Starting;
        obs.gpu_memory_mib = mem(b.weights_mib + b.kv_mib + 1228);
    }
    if now >= t_ready {
        log.push(format!(
            "{} The server is fired up and ready to roll!",
            ts(t_ready)
        ));
        obs.phase = Some(StartupPhase::Ready);
        obs.http = HttpState::Healthy;
        obs.models = vec![served];
        obs.server_info.insert("tp_size".into(), tp.to_string());
        if let Some(a) = arg("--speculative-algorithm") {
            // SGLang rewrites NEXTN to EAGLE when it resolves its arguments.
            let a = a.to_ascii_uppercase();
            obs.server_info.insert(
                "speculative_algorithm".into(),
                if a == "NEXTN" { "EAGLE".into() } else { a },
            );
        }
    }
    let keep = log.len().saturating_sub(20);
    unit.log_tail = log.split_off(keep);
    unit.server = Some(obs);
    Run {
        unit,
        running: Some(Running { gpus }),
    }
}
