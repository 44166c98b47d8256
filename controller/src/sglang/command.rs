//! The launch command and the systemd unit of an SGLang server.
//!
//! Pure functions of the spec plus two facts decided by the planner: the CUDA
//! indices of the slice's GPUs where the unit runs, and whether P2P is disabled.
//! Every argument is one argv word; the systemd renderer escapes it, so no spec
//! text can change the unit's meaning.

use crate::systemd::unit::UnitSpec;
use gpuplane_crds::InferenceServerSpec;

/// Environment variables the agent itself sets; a spec may not set them in `env`.
pub const MANAGED_ENV: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NCCL_P2P_DISABLE",
];

/// Flags the agent renders from spec fields; `extraArgs` may not repeat them.
pub const MANAGED_FLAGS: &[&str] = &[
    "--model-path",
    "--served-model-name",
    "--tp-size",
    "--speculative-algorithm",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--speculative-draft-model-path",
    "--tool-call-parser",
    "--reasoning-parser",
    "--mem-fraction-static",
    "--host",
    "--port",
    "--enable-metrics",
    "--disable-custom-all-reduce",
];

/// The argv: `<python> -m sglang.launch_server <flags...>`.
pub fn argv(spec: &InferenceServerSpec, p2p_disabled: bool) -> Vec<String> {
    argv_with_fields(spec, p2p_disabled)
        .into_iter()
        .map(|(w, _)| w)
        .collect()
}

/// The argv, each word with the spec field it came from (`spec.model.path`,
/// `spec.extraArgs[2]`), or `None` for words the agent writes itself. Validation uses the
/// fields to name what to fix when a word cannot be rendered.
pub fn argv_with_fields(
    spec: &InferenceServerSpec,
    p2p_disabled: bool,
) -> Vec<(String, Option<String>)> {
    let mut a: Vec<(String, Option<String>)> = vec![
        (spec.python.clone(), Some("spec.python".into())),
        ("-m".into(), None),
        ("sglang.launch_server".into(), None),
    ];
    let mut flag = |name: &str, value: String, field: Option<&str>| {
        a.push((name.to_string(), None));
        a.push((value, field.map(str::to_string)));
    };
    flag(
        "--model-path",
        spec.model.path.clone(),
        Some("spec.model.path"),
    );
    flag(
        "--served-model-name",
        spec.model.served_name.clone(),
        Some("spec.model.servedName"),
    );
    flag("--tp-size", spec.tensor_parallel_size.to_string(), None);
    if let Some(s) = &spec.speculative {
        flag(
            "--speculative-algorithm",
            s.algorithm.to_ascii_uppercase(),
            Some("spec.speculative.algorithm"),
        );
        if let Some(v) = s.num_steps {
            flag("--speculative-num-steps", v.to_string(), None);
        }
        if let Some(v) = s.eagle_topk {
            flag("--speculative-eagle-topk", v.to_string(), None);
        }
        if let Some(v) = s.num_draft_tokens {
            flag("--speculative-num-draft-tokens", v.to_string(), None);
        }
        if let Some(v) = &s.draft_model_path {
            flag(
                "--speculative-draft-model-path",
                v.clone(),
                Some("spec.speculative.draftModelPath"),
            );
        }
    }
    if let Some(v) = &spec.tool_call_parser {
        flag("--tool-call-parser", v.clone(), Some("spec.toolCallParser"));
    }
    if let Some(v) = &spec.reasoning_parser {
        flag(
            "--reasoning-parser",
            v.clone(),
            Some("spec.reasoningParser"),
        );
    }
    if let Some(v) = spec.mem_fraction_static {
        flag("--mem-fraction-static", v.to_string(), None);
    }
    flag("--host", spec.listen.host.clone(), Some("spec.listen.host"));
    flag("--port", spec.listen.port.to_string(), None);
    if spec.enable_metrics {
        a.push(("--enable-metrics".into(), None));
    }
    if p2p_disabled {
        a.push(("--disable-custom-all-reduce".into(), None));
    }
    a.extend(
        spec.extra_args
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), Some(format!("spec.extraArgs[{i}]")))),
    );
    a
}

/// What the slice's admin decides about how a server runs (`GpuPartition` slice `servers`),
/// and where: the parts of the unit a tenant cannot choose.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Runtime {
    /// `User=`; `None` leaves systemd's default (root).
    pub user: Option<String>,
    /// The admin's environment, written before the tenant's.
    pub env: Vec<(String, String)>,
    /// The unit runs on the host itself (more sandboxing: see [`super::sandbox`]).
    pub on_host: bool,
}

/// The environment, in order: CUDA device selection, the P2P switch, then the user's env.
///
/// `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes CUDA number devices by PCI address, the order
/// `cuda_indices` were computed in (CUDA's default order is "fastest first").
pub fn env(
    spec: &InferenceServerSpec,
    cuda_indices: &[u32],
    p2p_disabled: bool,
) -> Vec<(String, String)> {
    let visible = cuda_indices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut e = vec![
        ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
        ("CUDA_VISIBLE_DEVICES".to_string(), visible),
    ];
    if p2p_disabled {
        e.push(("NCCL_P2P_DISABLE".into(), "1".into()));
    }
    e.extend(spec.env.iter().map(|v| (v.name.clone(), v.value.clone())));
    e
}

/// The unit for `spec`, run by `id` (`namespace/name`, shown in the description), as the
/// admin's `rt` says: its user, its environment (between the agent's and the tenant's), and
/// the sandboxing for where the unit runs.
pub fn unit_spec(
    id: &str,
    spec: &InferenceServerSpec,
    rt: &Runtime,
    cuda_indices: &[u32],
    p2p_disabled: bool,
) -> UnitSpec {
    let mut environment = env(spec, cuda_indices, p2p_disabled);
    let tenant = environment.split_off(environment.len() - spec.env.len());
    environment.extend(rt.env.iter().cloned());
    environment.extend(tenant);
    let run_dir = super::sandbox::runtime_directory(&spec.unit.name);
    let mut sandbox = super::sandbox::options(rt.on_host);
    sandbox.push(("RuntimeDirectory".into(), run_dir.clone()));
    UnitSpec {
        description: format!("SGLang server {} {}", spec.model.served_name, owner_tag(id)),
        exec_start: argv(spec, p2p_disabled),
        environment,
        working_directory: Some(format!("/run/{run_dir}")),
        user: rt.user.clone(),
        // The agent decides about restarts: a crash must stay visible as `failed`.
        restart: Some("no".into()),
        timeout_start_sec: None,
        after: vec!["network-online.target".into()],
        wanted_by: vec!["multi-user.target".into()],
        sandbox,
    }
}

/// The end of a server unit's `Description=`: which InferenceServer (`namespace/name`) the
/// agent wrote it for.
fn owner_tag(id: &str) -> String {
    format!("(gpuplane InferenceServer {id})")
}

/// Whether unit file `file` is one the agent wrote for server `id` (its description's tag).
pub fn written_for(file: &str, id: &str) -> bool {
    crate::systemd::unit::parse(file)
        .ok()
        .and_then(|u| u.description)
        .is_some_and(|d| d.ends_with(&owner_tag(id)))
}

/// Whether a flag's value is a secret (`--api-key`, `--ssl-keyfile-password`, ...).
pub fn is_secret_flag(flag: &str) -> bool {
    flag.starts_with("--")
        && ["api-key", "password", "secret"]
            .iter()
            .any(|s| flag.ends_with(&format!("-{s}")))
}

/// `argv` with the values of secret-bearing flags (`--api-key`, `--admin-api-key`,
/// `--ssl-keyfile-password`, and any `…-api-key`, `…-password`, `…-secret`) replaced by `***`,
/// for showing it in status and events. Both `--flag value` and `--flag=value` are covered.
pub fn redacted(argv: &[String]) -> Vec<String> {
    let secret = is_secret_flag;
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for a in argv {
        if hide_next {
            out.push("***".to_string());
            hide_next = false;
            continue;
        }
        match a.split_once('=') {
            Some((flag, _)) if flag.starts_with("--") && secret(flag) => {
                out.push(format!("{flag}=***"))
            }
            _ => {
                hide_next = a.starts_with("--") && secret(a);
                out.push(a.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
