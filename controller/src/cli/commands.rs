//! One function per subcommand; each returns the exit code or a [`Failure`].

use super::args::{Format, HostArgs, InputArgs, ObserveFormat};
use super::failure::Failure;
use super::input::{load_desired, load_selected, open_host};
use super::output;
use crate::converge::Options;
use crate::door::Door;
use crate::host::sim::SimHost;
use crate::host::Host;
use gpuplane_crds::condition::{types, ConditionStatus};
use std::path::Path;

/// `gpuplane observe`: the host state as YAML or JSON.
pub fn observe(host: &HostArgs, format: ObserveFormat) -> Result<i32, Failure> {
    let mut h = open_host(host)?;
    let st = h.observe()?;
    let text = match format {
        ObserveFormat::Yaml => serde_yaml::to_string(&st)?,
        ObserveFormat::Json => serde_json::to_string_pretty(&st)? + "\n",
    };
    print!("{text}");
    Ok(0)
}

/// The backend of a long-running agent: `sim-rw:FILE` is live (others may edit its file to make
/// drift, and each write is saved to it); `sim:FILE` is a copy in memory.
fn agent_host(host: &HostArgs, sim_speed: u64) -> Result<Box<dyn Host + Send>, Failure> {
    Ok(match host.host.split_once(':') {
        Some(("sim-rw", path)) => {
            Box::new(SimHost::live(path, sim_speed).map_err(|e| Failure::input(e.to_string()))?)
        }
        // A read-only copy in memory: its clock never moves and nothing the agent does is kept,
        // so a server would sit Starting for ever with nothing saying why (issue 37).
        Some(("sim", path)) => {
            return Err(Failure::input(format!(
                "gpuplane run needs a host that keeps what the agent does: --host sim-rw:{path} (the simulated host in that file, written back after each step, its clock running) or --host local; sim:FILE is a read-only copy whose clock never moves"
            )))
        }
        _ => open_host(host)?,
    })
}

/// `gpuplane run --manifests DIR`: the agent without Kubernetes, until stopped.
pub fn run_standalone(
    host: &HostArgs,
    opts: crate::standalone::StandaloneOptions,
    sim_speed: u64,
) -> Result<i32, Failure> {
    let backend = agent_host(host, sim_speed)?;
    crate::standalone::run(opts, backend).map_err(Failure::Failed)?;
    Ok(0)
}

/// `gpuplane run`: the Kubernetes agent, until the process is stopped.
pub fn run_agent(
    host: &HostArgs,
    opts: crate::reconcile::RunOptions,
    sim_speed: u64,
) -> Result<i32, Failure> {
    let backend = agent_host(host, sim_speed)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(crate::reconcile::run(opts, backend))
        .map_err(Failure::Failed)?;
    Ok(0)
}

/// `gpuplane webhook`: the admission webhook, until the process is stopped.
pub fn webhook(opts: crate::webhook::WebhookOptions) -> Result<i32, Failure> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(crate::webhook::serve(opts))
        .map_err(Failure::Failed)?;
    Ok(0)
}

/// `gpuplane render`: argv, environment and unit file of each server, as the planner builds them.
pub fn render(input: &InputArgs, p2p_disabled: bool) -> Result<i32, Failure> {
    let mut h = open_host(&input.host)?;
    let desired = load_desired(input, h.as_mut())?;
    let st = h.observe()?;
    let mut out = Vec::new();
    for s in &desired.servers {
        let rendered = crate::plan::servers::observed_server_unit(
            s,
            &st,
            &desired.partition.host_driver,
            p2p_disabled,
        )?;
        let (spec, unit) = (rendered.spec, rendered.file);
        out.push(serde_json::json!({
            "server": s.id,
            "unit": s.unit.name,
            "argv": spec.exec_start,
            "env": spec.environment.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "unitFile": unit,
        }));
    }
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    Ok(0)
}

/// `gpuplane p2p-probe`: copies random data between GPU pairs; exit 1 when a pair is corrupt,
/// exit 0 with "nothing to probe" when fewer than two GPUs are given or bound to nvidia.
pub fn p2p_probe(host: &HostArgs, python: String, gpus: Vec<String>) -> Result<i32, Failure> {
    let mut h = open_host(host)?;
    let st = h.observe()?;
    let mut on_nvidia: Vec<String> = st
        .gpus(&host.gpu_vendor)
        .filter(|d| d.driver.as_deref() == Some("nvidia"))
        .map(|d| d.address.clone())
        .collect();
    on_nvidia.sort();
    let gpus = if gpus.is_empty() {
        on_nvidia.clone()
    } else {
        gpus
    };
    let mut indices = Vec::new();
    for g in &gpus {
        match on_nvidia.iter().position(|a| a == g) {
            Some(i) => indices.push(i as u32),
            None => {
                return Err(Failure::input(format!(
                    "{g} is not a GPU bound to nvidia on this host"
                )))
            }
        }
    }
    if gpus.len() < 2 {
        // One GPU (or none) has no peer: a normal host, not an error.
        let which = match gpus.first() {
            Some(g) => format!("there is only {g}"),
            None => "this host has none".to_string(),
        };
        println!("nothing to probe: P2P needs at least two GPUs bound to nvidia; {which}");
        return Ok(0);
    }
    let step = crate::step::Step::ProbeP2p {
        location: crate::host::model::Location::Host,
        python,
        user: None,
        gpus: gpus.clone(),
        cuda_indices: indices,
    };
    let out = Door::new(h.as_mut()).apply(&step)?;
    println!("{}", out.detail.unwrap_or_default());
    let st = h.observe()?;
    let failing = st
        .p2p_probe(&gpus, crate::host::model::Location::Host)
        .map(|p| p.failing_pairs.len())
        .unwrap_or(0);
    Ok(if failing == 0 { 0 } else { 1 })
}

/// `gpuplane plan`: the steps, changing nothing; exit 1 when something blocks.
pub fn plan(input: &InputArgs, format: Format) -> Result<i32, Failure> {
    let mut h = open_host(&input.host)?;
    let desired = load_desired(input, h.as_mut())?;
    let st = h.observe()?;
    let p = crate::plan::plan(&desired, &st);
    output::print_plan(&p, format);
    Ok(if p.blockers.is_empty() { 0 } else { 1 })
}

/// `gpuplane preflight`: each server's preflight facts and verdict, as JSON; reads only.
pub fn preflight(input: &InputArgs) -> Result<i32, Failure> {
    let mut h = open_host(&input.host)?;
    let desired = load_desired(input, h.as_mut())?;
    let st = h.observe()?;
    let mut failed = false;
    let mut out = serde_json::Map::new();
    for s in &desired.servers {
        let v = match st.preflight.get(&s.id) {
            Some(f) => {
                let v = crate::desired::preflight::judge(s, f);
                failed |= !v.problems.is_empty();
                serde_json::json!({
                    "passed": v.problems.is_empty(),
                    "problems": v.problems,
                    "summary": v.summary,
                    "facts": f,
                })
            }
            None => {
                serde_json::json!({"passed": null, "summary": "not checked: the host cannot look (container stopped, or a simulated host without files)"})
            }
        };
        out.insert(s.id.clone(), v);
    }
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    Ok(if failed { 1 } else { 0 })
}

/// The crash-recovery harness's hook: `GPUPLANE_KILL_AFTER_WRITE=N` kills `converge` with
/// SIGKILL right after its N-th host write.
fn kill_after_write() -> Result<Option<u64>, Failure> {
    let name = crate::door::KILL_AFTER_WRITE_ENV;
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => v.trim().parse().map(Some).map_err(|_| {
            Failure::input(format!("{name}={v:?}: expected the number of a host write"))
        }),
    }
}

/// `gpuplane converge`: applies the plan step by step; exit 0 only when converged and Ready.
pub fn converge(
    input: &InputArgs,
    format: Format,
    save_host: Option<&Path>,
    dry_run: bool,
) -> Result<i32, Failure> {
    crate::crashpoint::arm_from_env().map_err(Failure::input)?;
    let mut h = open_host(&input.host)?;
    let pass = crate::pass::Pass::begin();
    let crate::pass::select::Selected { desired, seed, .. } =
        load_selected(input, h.as_mut(), &pass)?;
    let report = {
        let mut door = Door::new(h.as_mut())
            .dry_run(dry_run)
            .kill_after(kill_after_write()?);
        crate::converge::converge_seeded(
            &desired,
            &mut door,
            &Options::default(),
            &mut Default::default(),
            seed,
        )
    };
    let status = crate::status::compute(&desired, &report, &Default::default(), &pass.time());
    output::print_converge(&desired, &report, &status, format);
    if let Some(file) = super::input::read_only_sim_file(&input.host) {
        if report.writes > 0 && !dry_run {
            eprintln!(
                "note: {file} was not changed (--host sim:FILE is read-only): the {} host writes were made on a copy in memory. Keep the result with --save-host OUT, or make the file the host with --host sim-rw:{file}.",
                report.writes
            );
        }
    }
    if let Some(path) = save_host {
        match h.save() {
            Some(Ok(text)) => crate::atomic_file::write(path, text.as_bytes(), 0o644)
                .map(|_| ())
                .map_err(|e| Failure::Failed(format!("cannot write {}: {e}", path.display())))?,
            Some(Err(e)) => return Err(e.into()),
            None => {
                return Err(Failure::input(
                    "--save-host works only with a simulated host",
                ))
            }
        }
    }
    let all_ready = status.values().all(|s| {
        s.condition(types::READY)
            .is_some_and(|c| c.status == ConditionStatus::True.as_str())
    });
    // A smoke test that failed is a failed converge, whatever Ready says: a CI job running
    // `converge` must see it. (A rollback that restored a unit which passes reads
    // SmokeTested=True with Degraded=RolledBack, and exits 0.)
    let smoke_failed = status.values().any(|s| {
        s.condition(types::SMOKE_TESTED)
            .is_some_and(|c| c.status == ConditionStatus::False.as_str())
    });
    Ok(if report.converged() && all_ready && !smoke_failed {
        0
    } else {
        1
    })
}
