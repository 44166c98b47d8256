//! The `gpuplane` command: `observe`, `plan`, `converge`, `render`, `p2p-probe`, `run`,
//! `webhook`, `status`.
//!
//! Exit codes: 0 converged (and every server Ready); 1 convergence stopped on a
//! condition (blocked, step failed, server not ready); 2 invalid input (bad manifest,
//! invalid spec, unknown host).
//!
//! | file          | holds                                                        |
//! |---------------|--------------------------------------------------------------|
//! | `args.rs`     | the subcommands and their flags                              |
//! | `input.rs`    | opening the host backend, loading and validating manifests   |
//! | `commands.rs` | one function per subcommand                                  |
//! | `output.rs`   | printing plans, converge reports and status                  |
//! | `status_cmd.rs` | `gpuplane status`: the clock, the terminal, the watch loop |
//! | `failure.rs`  | the error every command returns, with its exit code          |

mod args;
mod commands;
mod failure;
mod input;
mod output;
mod status_cmd;
mod wait_cmd;

pub use args::{Cli, Command, Format, HostArgs, InputArgs, ObserveFormat, RunArgs, StatusFormat};
pub use failure::Failure;
pub use input::{desired_for_host, load_desired, open_host};

/// Runs the CLI; returns the exit code.
pub fn run(cli: Cli) -> i32 {
    match dispatch(cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("error: {f}");
            f.code()
        }
    }
}

fn dispatch(cli: Cli) -> Result<i32, Failure> {
    match cli.command {
        Command::Observe { host, output } => commands::observe(&host, output),
        Command::Run(args) => run_agent(args),
        Command::Render {
            input,
            p2p_disabled,
        } => commands::render(&input, p2p_disabled),
        Command::P2pProbe { host, python, gpus } => commands::p2p_probe(&host, python, gpus),
        Command::Plan { input, output } => commands::plan(&input, output),
        Command::Preflight { input } => commands::preflight(&input),
        Command::Healthz { addr, path } => match crate::metrics::probe_health(&addr, &path) {
            Ok(()) => Ok(0),
            Err(e) => {
                eprintln!("{e}");
                Ok(1)
            }
        },
        Command::Webhook {
            listen,
            tls_cert,
            tls_key,
            kubeconfig,
            agent_users,
            require_agent_node,
            lease_namespace,
            trusted_peers,
        } => commands::webhook(crate::webhook::WebhookOptions {
            listen,
            tls_cert,
            tls_key,
            kubeconfig,
            agents: crate::webhook::Agents {
                users: agent_users,
                require_node: require_agent_node,
                namespace: lease_namespace.clone(),
            },
            lease_namespace,
            trusted_peers,
        }),
        Command::Status {
            source,
            output,
            watch,
            interval,
            count,
            now,
        } => {
            let source = status_source(source)?;
            let format = match output {
                None => crate::status_view::Format::Table,
                Some(StatusFormat::Wide) => crate::status_view::Format::Wide,
                Some(StatusFormat::Yaml) => crate::status_view::Format::Yaml,
            };
            let watch = watch.then_some(std::time::Duration::from_secs(interval));
            status_cmd::status(&source, format, watch, count, now)
        }
        Command::Wait {
            source,
            condition,
            timeout,
        } => {
            let source = status_source(source)?;
            wait_cmd::wait(&source, &condition, std::time::Duration::from_secs(timeout))
        }
        Command::Converge {
            input,
            output,
            save_host,
            dry_run,
        } => commands::converge(&input, output, save_host.as_deref(), dry_run),
    }
}

/// `gpuplane run`: the agent on manifest files with `--manifests`, else the Kubernetes agent.
fn run_agent(args: RunArgs) -> Result<i32, Failure> {
    let RunArgs {
        host,
        kubeconfig,
        metrics_addr,
        sd_token_file,
        health_addr,
        drift_interval,
        poll_interval,
        lease_namespace,
        lease_duration,
        identity,
        sim_speed,
        watch_scope,
        manifests,
        status_dir,
        sd_node_address,
        file_sd,
        max_rounds,
    } = args;
    let sd_token = match &sd_token_file {
        Some(f) => Some(args::read_token(f).map_err(Failure::input)?),
        None => None,
    };
    if let Some(manifests) = manifests {
        let opts = crate::standalone::StandaloneOptions {
            manifests,
            file_sd: args::file_sd_path(file_sd, &status_dir),
            status_dir,
            sd_node_address,
            gpu_vendor: host.gpu_vendor.clone(),
            gpu_driver: host.gpu_driver.clone(),
            metrics_addr,
            sd_token,
            drift_interval: std::time::Duration::from_secs(drift_interval.max(1)),
            poll_interval: std::time::Duration::from_secs(poll_interval.max(1)),
            max_rounds,
        };
        return commands::run_standalone(&host, opts, sim_speed);
    }
    let node = host
        .node_name
        .clone()
        .ok_or_else(|| Failure::input("gpuplane run needs --node-name"))?;
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
        health_addr,
        drift_interval: std::time::Duration::from_secs(drift_interval.max(1)),
        poll_interval: std::time::Duration::from_secs(poll_interval.max(1)),
        lease_namespace: lease_namespace
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into()),
        lease_duration: std::time::Duration::from_secs(lease_duration.max(3)),
        identity: identity.unwrap_or_else(|| format!("{hostname}-{}", std::process::id())),
        watch_scope,
        sd_node_address,
        sd_token,
    };
    commands::run_agent(&host, opts, sim_speed)
}

/// Where `status` and `wait` read: the cluster with a kubeconfig, else the status directory
/// (with the manifests, when given, for the consumers and the resources to expect).
fn status_source(a: args::StatusSourceArgs) -> Result<crate::status_view::Source, Failure> {
    Ok(match a.kubeconfig {
        Some(k) => crate::status_view::Source::Cluster(
            crate::status_view::kube::Cluster::connect(&k).map_err(Failure::Failed)?,
        ),
        None => crate::status_view::Source::Dir {
            dir: a.status_dir,
            manifests: a.file,
        },
    })
}
