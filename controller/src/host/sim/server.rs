//! A simulated SGLang process: reads the unit it was started with and plays the
//! startup timeline (phases, GPU memory, log lines, HTTP state) at the host's clock.

use super::{Behaviour, SimHost, SimUnit};
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

/// The journal's timestamp for clock second `clock`.
fn ts(clock: u64) -> String {
    let (h, m, s) = ((clock / 3600) % 24, (clock / 60) % 60, clock % 60);
    format!("[2026-11-30 {h:02}:{m:02}:{s:02}]")
}

/// How a process ended before it could serve: its exit status and last log lines.
struct Exit {
    code: i32,
    log: Vec<String>,
}

/// Plays the unit `u` at `r` on host `sim`.
pub(super) fn run(sim: &SimHost, r: &UnitRef, u: &SimUnit) -> Run {
    let mut unit = idle_unit(u);
    let (Some(t0), Some(content)) = (u.started_at, u.running.as_deref()) else {
        return Run {
            unit,
            running: None,
        };
    };
    let parsed = sim.memo.unit(content);
    let parsed = match Result::as_ref(&parsed) {
        Ok(p) => p,
        Err(e) => {
            return failed(
                unit,
                Exit {
                    code: 203,
                    log: vec![format!("{} systemd: bad unit file: {e}", ts(t0))],
                },
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
    match launch(sim, r, parsed, t0) {
        Err(exit) => failed(unit, exit),
        Ok(process) => {
            let (log, mut obs) = play(sim, &process, t0);
            let listen = parsed.arg("--host").unwrap_or_else(|| "127.0.0.1".into());
            obs.reached_at = reached_at(sim, r.location, &listen);
            unit.log_tail = log;
            unit.server = Some(obs);
            Run {
                unit,
                running: Some(Running { gpus: process.gpus }),
            }
        }
    }
}

/// Where the agent would reach a server listening on `listen` at `loc`, as the local backend
/// decides it (`host/local/server.rs`): a host server's wildcard or loopback listen is reached on
/// 127.0.0.1, another address as it is (the simulated host owns every address); a container's
/// from its config's static addresses (`container_net::pick`), none for DHCP.
fn reached_at(sim: &SimHost, loc: crate::host::model::Location, listen: &str) -> Option<String> {
    use crate::host::local::container_net::{config_addresses, pick};
    match loc {
        crate::host::model::Location::Host => {
            if matches!(listen, "0.0.0.0" | "::" | "127.0.0.1" | "::1" | "localhost") {
                Some("127.0.0.1".into())
            } else {
                listen
                    .parse::<std::net::IpAddr>()
                    .ok()
                    .map(|ip| ip.to_string())
            }
        }
        crate::host::model::Location::Container(v) => {
            let conf = sim.file.containers.get(&v).map(|c| c.config.as_str())?;
            pick(listen, &config_addresses(conf))
        }
    }
}

/// The unit as systemd shows it while nothing runs: its file, reload state and the agent's records.
fn idle_unit(u: &SimUnit) -> Unit {
    Unit {
        active_state: "inactive".into(),
        sub_state: "dead".into(),
        file: u.file.clone(),
        needs_reload: u.loaded.is_some() && u.loaded != u.file,
        running_stale: u.running.is_some()
            && u.running != u.loaded.clone().or_else(|| u.file.clone()),
        last_ready: u.last_ready.clone(),
        failed_hash: u.failed_hash.clone(),
        ..Unit::default()
    }
}

/// The unit after its process exited with `exit`.
fn failed(mut unit: Unit, exit: Exit) -> Run {
    unit.active_state = "failed".into();
    unit.sub_state = "failed".into();
    unit.exit_status = Some(exit.code);
    unit.log_tail = exit.log;
    Run {
        unit,
        running: None,
    }
}

/// An SGLang process past its checks: what it serves and on which GPUs, how it does P2P.
struct Process {
    tp: usize,
    served: String,
    speculative_algorithm: Option<String>,
    gpus: Vec<String>,
    nccl_p2p: bool,
    custom_all_reduce: bool,
}

/// Starts SGLang as the unit says: argparse, the GPUs it may use, the test crash hook.
fn launch(sim: &SimHost, r: &UnitRef, parsed: &unit::ParsedUnit, t0: u64) -> Result<Process, Exit> {
    let argv = &parsed.exec_start;
    check_flags(argv)?;
    let tp: usize = parsed
        .arg("--tp-size")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let served = parsed
        .arg("--served-model-name")
        .or_else(|| parsed.arg("--model-path"))
        .unwrap_or_default();
    let gpus = cuda_gpus(
        sim.visible_gpus(r.location),
        parsed.env("CUDA_VISIBLE_DEVICES"),
        t0,
    )?;
    if gpus.len() < tp {
        return Err(Exit {
            code: 1,
            log: vec![format!(
                "{} RuntimeError: tp_size {tp} needs {tp} GPUs but only {} are visible",
                ts(t0 + 3),
                gpus.len()
            )],
        });
    }
    let gpus: Vec<String> = gpus.into_iter().take(tp.max(1)).collect();
    crash_hook(sim, parsed.env("SIM_CRASH_AT").as_deref(), t0)?;
    Ok(Process {
        tp,
        served,
        speculative_algorithm: parsed.arg("--speculative-algorithm"),
        gpus,
        nccl_p2p: parsed.env("NCCL_P2P_DISABLE").as_deref() != Some("1"),
        custom_all_reduce: !argv.iter().any(|a| a == "--disable-custom-all-reduce"),
    })
}

/// argparse: unknown flags end the process at once.
fn check_flags(argv: &[String]) -> Result<(), Exit> {
    let unknown: Vec<&String> = argv[3..]
        .iter()
        .filter(|a| a.starts_with("--"))
        .filter(|a| flags::lookup(a.split('=').next().unwrap_or(a)).is_none())
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = unknown.iter().map(|s| s.as_str()).collect();
    Err(Exit {
        code: 2,
        log: vec![format!(
            "sglang serve: error: unrecognized arguments: {}",
            names.join(" ")
        )],
    })
}

/// The GPUs CUDA gives the process: `visible`, or those `CUDA_VISIBLE_DEVICES` picks from them.
fn cuda_gpus(
    visible: Vec<String>,
    cuda_visible: Option<String>,
    t0: u64,
) -> Result<Vec<String>, Exit> {
    let Some(v) = cuda_visible else {
        return Ok(visible);
    };
    let mut out = Vec::new();
    for idx in v.split(',').filter(|s| !s.is_empty()) {
        match idx.trim().parse::<usize>().ok().and_then(|i| visible.get(i)) {
            Some(g) => out.push(g.clone()),
            None => {
                return Err(Exit {
                    code: 1,
                    log: vec![
                        format!("{} Init torch distributed begin.", ts(t0 + 2)),
                        format!("{} RuntimeError: CUDA error: invalid device ordinal (CUDA_VISIBLE_DEVICES={v}, {} GPUs visible)", ts(t0 + 3), visible.len()),
                    ],
                })
            }
        }
    }
    Ok(out)
}

/// Test hook: SIM_CRASH_AT=load makes the process die while loading weights.
fn crash_hook(sim: &SimHost, crash_at: Option<&str>, t0: u64) -> Result<(), Exit> {
    let init = sim.file.behaviour.init_seconds;
    if crash_at == Some("load") && sim.file.clock >= t0 + init {
        return Err(Exit {
            code: 1,
            log: vec![
                format!("{} Load weight begin. avail mem=94.30 GB", ts(t0 + init)),
                format!(
                    "{} RuntimeError: CUDA error: an illegal memory access was encountered",
                    ts(t0 + init + 1)
                ),
            ],
        });
    }
    Ok(())
}

/// Plays SGLang's startup up to the host's clock; log tail and observation. On a host whose
/// IOMMU translates DMA and whose P2P is corrupt, the process hangs where P2P is first used,
/// alive and holding its GPUs, its log and memory frozen where it stopped.
fn play(sim: &SimHost, p: &Process, t0: u64) -> (Vec<String>, ServerObservation) {
    let b = &sim.file.behaviour;
    let now = sim.file.clock;
    let translated = sim.file.iommu.mode() == IommuMode::Translated;
    let corrupt = b.p2p_corrupt && translated && p.tp >= 2;
    let mut s = Startup::new(b, p, t0);
    // NCCL with P2P over a translating IOMMU: hangs in init, memory flat.
    if corrupt && p.nccl_p2p {
        return (s.log, s.obs);
    }
    let (t_load, t_kv, t_graph, t_warm) = (
        t0 + b.init_seconds,
        t0 + b.init_seconds + b.load_seconds,
        t0 + b.init_seconds + b.load_seconds + b.kv_seconds,
        t0 + b.init_seconds + b.load_seconds + b.kv_seconds + b.graph_seconds,
    );
    let t_ready = t_warm + b.warmup_seconds;
    if now >= t_load {
        s.loading_weights(t_load, now);
    }
    if now >= t_kv {
        s.weights_loaded(t_kv);
        // SGLang's custom all-reduce does its own P2P through CUDA IPC: the first collective never returns.
        if corrupt && p.custom_all_reduce {
            return (s.log, s.obs);
        }
        s.obs.phase = Some(StartupPhase::AllocatingKvCache);
    }
    if now >= t_graph {
        s.capturing_graphs(t_graph);
    }
    if now >= t_warm {
        s.warming_up(t_warm);
    }
    if now >= t_ready {
        s.ready(t_ready, p);
    }
    let keep = s.log.len().saturating_sub(20);
    (s.log.split_off(keep), s.obs)
}

/// A startup being played: the log so far and what the server shows.
struct Startup<'a> {
    b: &'a Behaviour,
    /// `" TP0"` on log lines of a tensor-parallel server.
    tprefix: &'static str,
    gpus: usize,
    log: Vec<String>,
    obs: ServerObservation,
}

impl<'a> Startup<'a> {
    /// The process just started: first log line, base memory on each GPU.
    fn new(b: &'a Behaviour, p: &Process, t0: u64) -> Startup<'a> {
        let mut s = Startup {
            b,
            tprefix: if p.tp > 1 { " TP0" } else { "" },
            gpus: p.gpus.len(),
            log: vec![],
            obs: ServerObservation {
                phase: Some(StartupPhase::Launching),
                ..ServerObservation::default()
            },
        };
        s.log.push(s.line(t0, "Init torch distributed begin."));
        s.obs.gpu_memory_mib = s.mem(b.base_mib);
        s
    }

    /// A log line of the scheduler at clock `t`.
    fn line(&self, t: u64, msg: &str) -> String {
        let stamp = ts(t);
        format!("{}{}] {msg}", &stamp[..stamp.len() - 1], self.tprefix)
    }

    /// `m` MiB on each GPU.
    fn mem(&self, m: u64) -> Vec<u64> {
        vec![m; self.gpus]
    }

    /// NCCL init done at `t`; weights load, memory growing until `now`.
    fn loading_weights(&mut self, t: u64, now: u64) {
        let b = self.b;
        self.log
            .push(self.line(t, "Init torch distributed ends. mem usage=0.74 GB"));
        self.log
            .push(self.line(t, "Load weight begin. avail mem=94.30 GB"));
        self.obs.phase = Some(StartupPhase::LoadingWeights);
        let frac = (now - t).min(b.load_seconds) as f64 / b.load_seconds.max(1) as f64;
        self.obs.gpu_memory_mib =
            self.mem(b.base_mib + ((b.weights_mib - b.base_mib) as f64 * frac) as u64);
    }

    /// Weights loaded at `t`.
    fn weights_loaded(&mut self, t: u64) {
        let b = self.b;
        self.log.push(self.line(t, &format!("Load weight end. elapsed={:.2} s, type=Qwen3_5MoeForCausalLM, dtype=torch.bfloat16, avail mem=36.09 GB, mem usage={:.2} GB.", b.load_seconds as f64, b.weights_mib as f64 / 1024.0)));
        self.obs.gpu_memory_mib = self.mem(b.weights_mib);
    }

    /// KV cache allocated at `t`; CUDA graph capture begins.
    fn capturing_graphs(&mut self, t: u64) {
        let b = self.b;
        self.log.push(self.line(
            t,
            &format!(
                "KV Cache is allocated. #tokens: 1048576, K size: {:.2} GB, V size: {:.2} GB",
                b.kv_mib as f64 / 2048.0,
                b.kv_mib as f64 / 2048.0
            ),
        ));
        self.log.push(self.line(
            t,
            "Capture cuda graph begin. This can take up to several minutes. avail mem=3.10 GB",
        ));
        self.obs.phase = Some(StartupPhase::CapturingCudaGraphs);
        self.obs.gpu_memory_mib = self.mem(b.weights_mib + b.kv_mib);
    }

    /// Graphs captured at `t`; the HTTP server listens and warms up.
    fn warming_up(&mut self, t: u64) {
        let b = self.b;
        self.log.push(self.line(
            t,
            "Capture cuda graph end. Time elapsed: 45.00 s. mem usage=1.20 GB. avail mem=1.90 GB.",
        ));
        self.log.push(format!(
            "{} INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
            ts(t)
        ));
        self.obs.phase = Some(StartupPhase::WarmingUp);
        self.obs.http = HttpState::Starting;
        self.obs.gpu_memory_mib = self.mem(b.weights_mib + b.kv_mib + 1228);
    }

    /// Ready at `t`: healthy, serving its model, its effective settings in `/server_info`.
    fn ready(&mut self, t: u64, p: &Process) {
        self.log.push(format!(
            "{} The server is fired up and ready to roll!",
            ts(t)
        ));
        self.obs.phase = Some(StartupPhase::Ready);
        self.obs.http = HttpState::Healthy;
        self.obs.models = vec![p.served.clone()];
        self.obs
            .server_info
            .insert("tp_size".into(), p.tp.to_string());
        if let Some(a) = &p.speculative_algorithm {
            // SGLang rewrites NEXTN to EAGLE when it resolves its arguments.
            let a = a.to_ascii_uppercase();
            self.obs.server_info.insert(
                "speculative_algorithm".into(),
                if a == "NEXTN" { "EAGLE".into() } else { a },
            );
        }
    }
}
