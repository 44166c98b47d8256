//! The `gpuplane` command: `observe`, `plan`, `converge`.
//!
//! Exit codes: 0 converged (and every server Ready); 1 convergence stopped on a
//! condition (blocked, step failed, server not ready); 2 invalid input (bad manifest,
//! invalid spec, unknown host).

mod output;

use crate::apply::Door;
use crate::converge::{converge, Options};
use crate::desired::{resolve_partition, resolve_server, Desired, SpecError};
use crate::host::sim::SimHost;
use crate::host::Host;
use crate::manifests::Manifests;
use crate::plan::plan;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "gpuplane",
    version,
    about = "Declarative GPU host partitioning and SGLang servers: observe -> plan -> apply"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the observed host state (YAML, or JSON with --output json).
    Observe {
        #[command(flatten)]
        host: HostArgs,
        #[arg(long, value_enum, default_value = "yaml")]
        output: ObserveFormat,
    },
    /// Print the steps that would converge the host; changes nothing.
    Plan {
        #[command(flatten)]
        input: InputArgs,
        #[arg(long, value_enum, default_value = "text")]
        output: Format,
    },
    /// Print what the agent would run for each InferenceServer: argv, environment and the unit
    /// file, as rendered for the host given (P2P as currently decided, or forced off).
    Render {
        #[command(flatten)]
        input: InputArgs,
        /// Render as if P2P were disabled (NCCL_P2P_DISABLE=1, --disable-custom-all-reduce).
        #[arg(long)]
        p2p_disabled: bool,
    },
    /// Check GPU peer-to-peer correctness: copy random data between every GPU pair and compare.
    /// Reads only, apart from the agent's own cache (`/var/lib/gpuplane/p2p-cache.json`).
    P2pProbe {
        #[command(flatten)]
        host: HostArgs,
        /// Python interpreter with PyTorch.
        #[arg(long, default_value = "python3")]
        python: String,
        /// GPU addresses to probe (default: every GPU bound to nvidia).
        gpus: Vec<String>,
    },
    /// Run the agent: reconcile this node's GpuPartition and its InferenceServers from the
    /// Kubernetes API until stopped.
    Run {
        #[command(flatten)]
        host: HostArgs,
        /// Kubeconfig file (default: in-cluster configuration, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Address of /metrics, /healthz and /readyz.
        #[arg(long, default_value = "0.0.0.0:9464")]
        metrics_addr: String,
        /// Seconds between re-observations of the host when nothing changed in the API (drift check).
        #[arg(long, default_value_t = 30)]
        drift_interval: u64,
        /// Seconds between readiness checks of a starting server.
        #[arg(long, default_value_t = 5)]
        poll_interval: u64,
        /// Namespace of the per-node Lease (default: $POD_NAMESPACE, else "default").
        #[arg(long)]
        lease_namespace: Option<String>,
        /// Lease duration in seconds.
        #[arg(long, default_value_t = 15)]
        lease_duration: u64,
        /// This agent's identity in the Lease (default: hostname-pid).
        #[arg(long)]
        identity: Option<String>,
        /// With a simulated host: run its clock this many times faster than wall time.
        #[arg(long, default_value_t = 1)]
        sim_speed: u64,
    },
    /// Apply the plan step by step until converged, then print the status.
    Converge {
        #[command(flatten)]
        input: InputArgs,
        #[arg(long, value_enum, default_value = "text")]
        output: Format,
        /// Write the simulated host's final state to this file (loadable with --host sim:FILE).
        #[arg(long)]
        save_host: Option<PathBuf>,
        /// Log the writes instead of making them.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(clap::Args, Debug)]
pub struct HostArgs {
    /// `sim:FILE` (a host description), `sim:embedded` (the reference twin, default) or `local`.
    #[arg(long, default_value = "sim:embedded")]
    pub host: String,
    /// Vendor ID (hex, no 0x) of the devices treated as GPUs (display class 03xx).
    #[arg(long, default_value = "10de")]
    pub gpu_vendor: String,
    /// The kernel driver slices with `driver: nvidia` bind to (tests on emulated devices use
    /// their display driver, e.g. bochs-drm).
    #[arg(long, default_value = "nvidia")]
    pub gpu_driver: String,
    /// With `--host local`: read and write host paths under this directory instead of `/`.
    #[arg(long, default_value = "/")]
    pub host_root: PathBuf,
    /// With `--host local`: the node name (default: /etc/hostname).
    #[arg(long)]
    pub node_name: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct InputArgs {
    /// Manifest file or directory (default: the embedded reference split, examples/kpro6/).
    #[arg(short = 'f', long = "filename")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub host: HostArgs,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObserveFormat {
    Yaml,
    Json,
}

/// A CLI failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

fn input_error(message: impl Into<String>) -> Failure {
    Failure {
        code: 2,
        message: message.into(),
    }
}

/// Opens the host backend named by `--host`.
pub fn open_host(args: &HostArgs) -> Result<Box<dyn Host + Send>, Failure> {
    let spec = args.host.as_str();
    if spec == "local" {
        let mut h = crate::host::local::LocalHost::new(&args.host_root, &args.gpu_vendor);
        h.node_name = args.node_name.clone();
        return Ok(Box::new(h));
    }
    match spec.split_once(':') {
        Some(("sim", "embedded")) => Ok(Box::new(
            SimHost::from_yaml(crate::EMBEDDED_HOST, "embedded examples/hosts/kpro6.yaml")
                .map_err(|e| input_error(e.to_string()))?,
        )),
        Some(("sim", path)) => Ok(Box::new(
            SimHost::load(path).map_err(|e| input_error(e.to_string()))?,
        )),
        _ => Err(input_error(format!(
            "--host {spec:?}: use sim:FILE, sim:embedded or local"
        ))),
    }
}

/// Reads the manifests, picks the partition for the host's node and validates everything.
pub fn load_desired(input: &InputArgs, host: &mut dyn Host) -> Result<Desired, Failure> {
    let manifests = match &input.file {
        Some(p) => Manifests::load(p).map_err(|e| input_error(e.to_string()))?,
        None => {
            let mut m = Manifests::default();
            for (name, text) in crate::EMBEDDED_MANIFESTS {
                m.add_text(text, name)
                    .map_err(|e| input_error(e.to_string()))?;
            }
            m
        }
    };
    let observed = host.observe().map_err(|e| Failure {
        code: 1,
        message: e.to_string(),
    })?;
    let mine: Vec<_> = manifests
        .partitions
        .iter()
        .filter(|p| p.spec.node_name == observed.node_name)
        .collect();
    let partition = match mine.as_slice() {
        [p] => *p,
        [] => {
            let others: Vec<String> = manifests
                .partitions
                .iter()
                .map(|p| {
                    format!(
                        "{} (nodeName {})",
                        p.metadata.name.as_deref().unwrap_or("?"),
                        p.spec.node_name
                    )
                })
                .collect();
            return Err(input_error(format!(
                "no GpuPartition has spec.nodeName {:?} (this host); found: {}",
                observed.node_name,
                if others.is_empty() {
                    "none".to_string()
                } else {
                    others.join(", ")
                }
            )));
        }
        many => {
            let names: Vec<&str> = many
                .iter()
                .map(|p| p.metadata.name.as_deref().unwrap_or("?"))
                .collect();
            return Err(input_error(format!(
                "{} GpuPartitions name node {:?} ({}); one host has one partition",
                many.len(),
                observed.node_name,
                names.join(", ")
            )));
        }
    };
    let dp = resolve_partition(
        partition,
        &observed,
        &input.host.gpu_vendor,
        &input.host.gpu_driver,
    )
    .map_err(spec_failure)?;
    let mut servers = Vec::new();
    let mut errors: Vec<SpecError> = Vec::new();
    for s in manifests
        .servers
        .iter()
        .filter(|s| s.spec.partition_ref.name == dp.name)
    {
        match resolve_server(s, &dp) {
            Ok(d) => servers.push(d),
            Err(e) => errors.extend(e),
        }
    }
    errors.extend(crate::desired::check_servers_together(&servers));
    if !errors.is_empty() {
        return Err(spec_failure(errors));
    }
    let units: Vec<_> = servers.iter().map(|s| s.unit.clone()).collect();
    host.watch_units(&units);
    Ok(Desired {
        partition: dp,
        servers,
        removed_units: vec![],
    })
}

fn spec_failure(errors: Vec<SpecError>) -> Failure {
    let lines: Vec<String> = errors.iter().map(|e| format!("  - {e}")).collect();
    input_error(format!(
        "invalid spec (reason InvalidSpec), nothing was changed:\n{}",
        lines.join("\n")
    ))
}

/// Runs the CLI; returns the exit code.
pub fn run(cli: Cli) -> i32 {
    match dispatch(cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("error: {}", f.message);
            f.code
        }
    }
}

fn dispatch(cli: Cli) -> Result<i32, Failure> {
    match cli.command {
        Command::Observe { host, output } => {
            let mut h = open_host(&host)?;
            let st = h.observe().map_err(|e| Failure {
                code: 1,
                message: e.to_string(),
            })?;
            let text = match output {
                ObserveFormat::Yaml => serde_yaml::to_string(&st).map_err(|e| Failure {
                    code: 1,
                    message: e.to_string(),
                })?,
                ObserveFormat::Json => {
                    serde_json::to_string_pretty(&st).map_err(|e| Failure {
                        code: 1,
                        message: e.to_string(),
                    })? + "\n"
                }
            };
            print!("{text}");
            Ok(0)
        }
        Command::Run {
            host,
            kubeconfig,
            metrics_addr,
            drift_interval,
            poll_interval,
            lease_namespace,
            lease_duration,
            identity,
            sim_speed,
        } => {
            let node = host
                .node_name
                .clone()
                .ok_or_else(|| input_error("gpuplane run needs --node-name"))?;
            // A simulated host is live in run mode: others may edit its file to make drift.
            let backend: Box<dyn Host + Send> = match host.host.split_once(':') {
                Some(("sim", path)) if path != "embedded" => Box::new(
                    SimHost::live(path, sim_speed).map_err(|e| input_error(e.to_string()))?,
                ),
                _ => open_host(&host)?,
            };
            let hostname = std::fs::read_to_string("/etc/hostname")
                .unwrap_or_default()
                .trim()
                .to_string();
            let opts = crate::reconcile::RunOptions {
                node,
                gpu_vendor: host.gpu_vendor.clone(),
                gpu_driver: host.gpu_driver.clone(),
                kubeconfig,
                metrics_addr,
                drift_interval: std::time::Duration::from_secs(drift_interval.max(1)),
                poll_interval: std::time::Duration::from_secs(poll_interval.max(1)),
                lease_namespace: lease_namespace
                    .or_else(|| std::env::var("POD_NAMESPACE").ok())
                    .unwrap_or_else(|| "default".into()),
                lease_duration: std::time::Duration::from_secs(lease_duration.max(3)),
                identity: identity.unwrap_or_else(|| format!("{hostname}-{}", std::process::id())),
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| Failure {
                    code: 1,
                    message: e.to_string(),
                })?;
            rt.block_on(crate::reconcile::run(opts, backend))
                .map_err(|m| Failure {
                    code: 1,
                    message: m,
                })?;
            Ok(0)
        }
        Command::Render {
            input,
            p2p_disabled,
        } => {
            let mut h = open_host(&input.host)?;
            let desired = load_desired(&input, h.as_mut())?;
            let st = h.observe().map_err(|e| Failure {
                code: 1,
                message: e.to_string(),
            })?;
            let mut out = Vec::new();
            for s in &desired.servers {
                let rendered = crate::plan::servers::observed_server_unit(
                    s,
                    &st,
                    &desired.partition.host_driver,
                    p2p_disabled,
                )
                .map_err(|e| Failure {
                    code: 1,
                    message: e.to_string(),
                })?;
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
        Command::P2pProbe { host, python, gpus } => {
            let mut h = open_host(&host)?;
            let st = h.observe().map_err(|e| Failure {
                code: 1,
                message: e.to_string(),
            })?;
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
                        return Err(input_error(format!(
                            "{g} is not a GPU bound to nvidia on this host"
                        )))
                    }
                }
            }
            let step = crate::plan::Step::ProbeP2p {
                location: crate::host::model::Location::Host,
                python,
                gpus: gpus.clone(),
                cuda_indices: indices,
            };
            let out = Door::new(h.as_mut()).apply(&step).map_err(|e| Failure {
                code: 1,
                message: e.to_string(),
            })?;
            println!("{}", out.detail.unwrap_or_default());
            let st = h.observe().map_err(|e| Failure {
                code: 1,
                message: e.to_string(),
            })?;
            let failing = st
                .p2p_probe(&gpus)
                .map(|p| p.failing_pairs.len())
                .unwrap_or(0);
            Ok(if failing == 0 { 0 } else { 1 })
        }
        Command::Plan { input, output } => {
            let mut h = open_host(&input.host)?;
            let desired = load_desired(&input, h.as_mut())?;
            let st = h.observe().map_err(|e| Failure {
                code: 1,
                message: e.to_string(),
            })?;
            let p = plan(&desired, &st);
            output::print_plan(&p, output);
            Ok(if p.blockers.is_empty() { 0 } else { 1 })
        }
        Command::Converge {
            input,
            output,
            save_host,
            dry_run,
        } => {
            let mut h = open_host(&input.host)?;
            let desired = load_desired(&input, h.as_mut())?;
            let report = {
                let mut door = Door::new(h.as_mut()).dry_run(dry_run);
                converge(&desired, &mut door, &Options::default())
            };
            let status = crate::status::compute(&desired, &report, &Default::default());
            output::print_converge(&desired, &report, &status, output);
            if let Some(path) = save_host {
                match h.save() {
                    Some(Ok(text)) => std::fs::write(&path, text).map_err(|e| Failure {
                        code: 1,
                        message: format!("cannot write {}: {e}", path.display()),
                    })?,
                    Some(Err(e)) => {
                        return Err(Failure {
                            code: 1,
                            message: e.to_string(),
                        })
                    }
                    None => {
                        return Err(input_error("--save-host works only with a simulated host"))
                    }
                }
            }
            let all_ready = status
                .values()
                .all(|s| s.condition("Ready").is_some_and(|c| c.status == "True"));
            Ok(if report.converged() && all_ready {
                0
            } else {
                1
            })
        }
    }
}
