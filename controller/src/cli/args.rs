//! The command line: subcommands and their flags (clap).

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

// Parsed once per process: a large `Run` variant costs nothing worth boxing clap's fields for.
#[allow(clippy::large_enum_variant)]
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
    /// Check each InferenceServer where it would run, before anything is stopped: interpreter
    /// and versions, model files (safetensors headers, shards, MTP layers), heads against tp,
    /// weights against GPU memory, environment paths. Reads only; exit 1 when a check fails.
    Preflight {
        #[command(flatten)]
        input: InputArgs,
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
    Run(RunArgs),
    /// Exit 0 when the agent's probe listener (`run --health-addr`) answers PATH with 200, 1
    /// otherwise: the chart's liveness and readiness probes (exec probes, so the listener stays
    /// on loopback, out of other pods' reach).
    Healthz {
        /// The probe listener's address.
        #[arg(long, default_value = "127.0.0.1:9465")]
        addr: String,
        /// /healthz (liveness) or /readyz (readiness).
        #[arg(long, default_value = "/healthz")]
        path: String,
    },
    /// Serve the validating admission webhook (POST /validate, AdmissionReview v1) for both
    /// kinds over HTTPS: the CLI's host-independent validation at `kubectl apply` time.
    Webhook {
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0:8443")]
        listen: String,
        /// PEM certificate chain the API server is told to trust (caBundle).
        #[arg(long)]
        tls_cert: PathBuf,
        /// PEM private key of the certificate.
        #[arg(long)]
        tls_key: PathBuf,
        /// Kubeconfig for listing the cluster's objects (default: in-cluster, then ~/.kube/config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// The agents' user name (repeatable), e.g. system:serviceaccount:gpuplane-system:gpuplane:
        /// they may change only finalizers and status, and only on their node's objects.
        #[arg(long = "agent-user")]
        agent_users: Vec<String>,
        /// Refuse an agent whose token is bound to no pod or node (its node would be unknown):
        /// the chart mounts a projected, pod-bound token and sets this.
        #[arg(long)]
        require_agent_node: bool,
        /// Namespace of the agents' Leases: a partition for a node without a live one is
        /// admitted with a warning (nothing would act on it).
        #[arg(long)]
        lease_namespace: Option<String>,
        /// A network (CIDR) the API server calls the webhook from (repeatable; the chart passes
        /// networkPolicy.apiServerCIDRs): 64 of the 256 connection slots are kept for these
        /// peers, so reviews are answered however many other networks flood the webhook.
        #[arg(long = "trusted-peers", value_parser = parse_cidr)]
        trusted_peers: Vec<ipnet::IpNet>,
    },
    /// Show each host's GPUs (address, slot, NUMA, driver, owner slice, consumer) and each
    /// resource's conditions, like `kubectl get`: from the standalone agent's status directory,
    /// or with --kubeconfig from the cluster. Reads only what the agents published.
    Status {
        #[command(flatten)]
        source: StatusSourceArgs,
        /// `wide` (also path, UUID, serial and condition messages) or `yaml` (the documents).
        #[arg(short = 'o', long = "output", value_enum)]
        output: Option<StatusFormat>,
        /// Read again every --interval seconds; print only what changed.
        #[arg(short = 'w', long)]
        watch: bool,
        /// Seconds between reads of --watch.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
        interval: u64,
        /// With --watch: stop after this many reads (tests).
        #[arg(long, hide = true)]
        count: Option<u64>,
        /// The time ages are counted to, RFC 3339 (tests; default: now).
        #[arg(long, hide = true)]
        now: Option<jiff::Timestamp>,
    },
    /// Wait until every resource has a condition (`Ready` by default), like `kubectl wait`:
    /// from the standalone agent's status directory, or with --kubeconfig the cluster. Exits 0
    /// when met; 1 at once when a resource is Stalled or the manifests were refused, or when
    /// --timeout passes (each names who was not there).
    Wait {
        #[command(flatten)]
        source: StatusSourceArgs,
        /// The condition, as `condition=Ready` (kubectl's spelling) or `Ready`.
        #[arg(long = "for", default_value = "condition=Ready")]
        condition: String,
        /// Seconds to wait at most.
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86400))]
        timeout: u64,
    },
    /// Apply the plan step by step until converged, then print the status.
    Converge {
        #[command(flatten)]
        input: InputArgs,
        #[arg(long, value_enum, default_value = "text")]
        output: Format,
        /// Write the simulated host's final state to this file (loadable with --host sim:FILE);
        /// the host file itself is never changed by this.
        #[arg(long)]
        save_host: Option<PathBuf>,
        /// Log the writes instead of making them.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Where `status` and `wait` read what the agents published.
#[derive(clap::Args, Debug)]
pub struct StatusSourceArgs {
    /// The standalone agent's status directory (`run --manifests DIR --status-dir D`).
    #[arg(long, default_value = DEFAULT_STATUS_DIR)]
    pub status_dir: PathBuf,
    /// Read the cluster's GpuPartitions and InferenceServers instead.
    #[arg(long, conflicts_with_all = ["status_dir", "file"])]
    pub kubeconfig: Option<PathBuf>,
    /// The manifests the standalone agent runs (file or directory): `status` takes the GPU
    /// table's node and CONSUMER column from them (`-` without), `wait` the resources that
    /// must have a status.
    #[arg(short = 'f', long = "filename")]
    pub file: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct HostArgs {
    /// `sim:FILE` (a host description, read only: writes go to a copy in memory),
    /// `sim-rw:FILE` (the file is the host: every write lands in it), `sim:embedded` (the
    /// reference twin, default) or `local`.
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
    /// With `--host local`: seconds a write waits for a Proxmox lock another writer holds
    /// before it reports `WaitingForLock` and moves on (Proxmox's own default: 10).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub lock_timeout: u64,
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

/// Where the standalone agent writes status files unless told otherwise, and where
/// `gpuplane status` reads them.
pub const DEFAULT_STATUS_DIR: &str = "/var/lib/gpuplane/status";

/// Where the standalone agent writes its file_sd list of servers by default: beside the status
/// directory `status_dir`, not in it (`gpuplane status` reads every file there as a resource's
/// status); `--file-sd ''` writes none.
pub fn file_sd_path(file_sd: Option<PathBuf>, status_dir: &std::path::Path) -> Option<PathBuf> {
    match file_sd {
        Some(p) if p.as_os_str().is_empty() => None,
        Some(p) => Some(p),
        None => Some(
            status_dir
                .parent()
                .unwrap_or(std::path::Path::new("."))
                .join("prometheus/servers.json"),
        ),
    }
}

/// `gpuplane status -o`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusFormat {
    Wide,
    Yaml,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObserveFormat {
    Yaml,
    Json,
}

/// `--watch-scope`: one of [`WatchScope::NAMES`](crate::reconcile::scope::WatchScope::NAMES),
/// listed by `--help`.
fn watch_scope() -> impl clap::builder::TypedValueParser<Value = crate::reconcile::scope::WatchScope>
{
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(crate::reconcile::scope::WatchScope::NAMES)
        .try_map(|s| s.parse::<crate::reconcile::scope::WatchScope>())
}

/// The bearer token in `path` (`--sd-token-file`): its first line, trimmed; at least 16
/// characters of the token alphabet, so a mistake is an error, not an open door.
pub fn read_token(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--sd-token-file {}: {e}", path.display()))?;
    let t = text.lines().next().unwrap_or_default().trim().to_string();
    let ok = t.len() >= 16
        && t.len() <= 4096
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b));
    if ok {
        Ok(t)
    } else {
        Err(format!(
            "--sd-token-file {}: the first line must be a token of at least 16 characters (letters, digits, -._~+/=); e.g. openssl rand -hex 32 > {}",
            path.display(),
            path.display()
        ))
    }
}

/// A CIDR (`10.0.0.0/24`, `fd00::/64`), or a single address (a /32 or /128).
fn parse_cidr(s: &str) -> Result<ipnet::IpNet, String> {
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{s:?} is not a CIDR such as 10.0.0.0/24 or an address"))
}

/// `gpuplane run`'s arguments: the Kubernetes agent, or with `--manifests` the agent on files.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// Kubeconfig file (default: in-cluster configuration, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:9464")]
    pub metrics_addr: String,
    /// A file holding a bearer token that /sd/servers (the SGLang servers of every tenant on
    /// this node) then requires (`Authorization: Bearer TOKEN`; Prometheus's http_sd_configs
    /// `authorization.credentials_file`). Unset: /sd/servers answers anyone who reaches it.
    #[arg(long)]
    pub sd_token_file: Option<PathBuf>,
    /// Also serve /healthz and /readyz alone on this address (127.0.0.1:PORT), apart from the
    /// metrics listener, for probes no other pod can starve (`gpuplane healthz`).
    #[arg(long)]
    pub health_addr: Option<String>,
    /// Seconds between re-observations of the host when nothing changed in the API (drift check).
    #[arg(long, default_value_t = 30)]
    pub drift_interval: u64,
    /// Seconds between readiness checks of a starting server.
    #[arg(long, default_value_t = 5)]
    pub poll_interval: u64,
    /// Namespace of the per-node Lease (default: $POD_NAMESPACE, else "default").
    #[arg(long)]
    pub lease_namespace: Option<String>,
    /// Lease duration in seconds.
    #[arg(long, default_value_t = 15)]
    pub lease_duration: u64,
    /// This agent's identity in the Lease (default: hostname-pid).
    #[arg(long)]
    pub identity: Option<String>,
    /// With a simulated host: run its clock this many times faster than wall time.
    #[arg(long, default_value_t = 1)]
    pub sim_speed: u64,
    /// Which objects the agent watches: `node`, those labelled gpuplane.dev/node=<node>
    /// (objects of this node without the label get the condition NodeLabelMissing); or
    /// `cluster`, every object of the cluster, filtered by spec.nodeName (for clusters not
    /// labelled yet; every agent then holds the whole cluster).
    #[arg(long, default_value = "node", value_parser = watch_scope())]
    pub watch_scope: crate::reconcile::scope::WatchScope,
    /// Without Kubernetes: reconcile the manifests in this file or directory (watched for
    /// changes) instead of the API's objects; status goes to files under --status-dir.
    #[arg(long, conflicts_with_all = ["kubeconfig", "lease_namespace", "identity"])]
    pub manifests: Option<PathBuf>,
    /// With --manifests: where each resource's status file is written.
    #[arg(long, default_value = DEFAULT_STATUS_DIR)]
    pub status_dir: PathBuf,
    /// The address Prometheus reaches this node at, listed in `/sd/servers` (and the file_sd
    /// file) for a host server that listens on a wildcard (0.0.0.0, ::). The chart passes the
    /// pod's status.hostIP; unset: 127.0.0.1 (only a Prometheus on this machine reaches it).
    #[arg(long)]
    pub sd_node_address: Option<String>,
    /// With --manifests: where the SGLang servers are listed for Prometheus's file_sd_configs
    /// (the JSON of /sd/servers), replaced atomically after each pass; "" to write none.
    /// Default: `prometheus/servers.json` beside the status directory
    /// (/var/lib/gpuplane/prometheus/servers.json with the default --status-dir).
    #[arg(long)]
    pub file_sd: Option<PathBuf>,
    /// With --manifests: stop once settled or after this many reconciles (tests).
    #[arg(long, hide = true)]
    pub max_rounds: Option<u64>,
}

#[cfg(test)]
mod tests;
