//! The trust model: what a slice's admin allows ([`ServerPolicy`] on the cluster-scoped
//! `GpuPartition`) and what a tenant's namespaced `InferenceServer` may ask within it.
//!
//! The admin decides which namespaces may use a slice, which interpreters may run, under which
//! directories models lie, whether units may run on the host, the user they run as, which
//! hand-written units may be taken over, and the environment only the admin may set. A server
//! asks only within that; everything else is refused here, so by the agent, the CLI and the
//! admission webhook alike, each with the field and the reason.
//!
//! Pure: no I/O.

use super::{Problems, ResolvedSlice};
use crate::sglang::command;
use crate::systemd::name::service_unit_name;
use gpuplane_crds::{InferenceServerSpec, ServerPolicy, UnitLocation};

/// Prefix every server unit not adopted by the admin must carry: the agent's own namespace of
/// unit names, so no server can name (and so overwrite, restart or remove) a host unit.
pub const UNIT_PREFIX: &str = "gpuplane-";

/// Variables that make an interpreter, the dynamic loader or a library run other code or read
/// other files than the admin installed: whole families by prefix, then single names. A tenant
/// may not set them; the admin may (`servers.env`).
const DENIED_ENV_PREFIXES: &[&str] = &[
    "PYTHON", // PYTHONPATH, PYTHONSTARTUP, PYTHONWARNINGS (imports a module), PYTHONHOME, ...
    "LD_",    // LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT: the loader loads the tenant's library
    "GCONV_", // glibc iconv modules
    "MALLOC_",
    "GLIBC_TUNABLES",
    "SYSTEMD_",
    "TORCHINDUCTOR_", // compile caches and custom code paths
    "TRITON_",        // kernel caches and compiler paths: code that is loaded later
];

/// Single names refused for a tenant (see [`DENIED_ENV_PREFIXES`]).
const DENIED_ENV_NAMES: &[&str] = &[
    "BROWSER", // webbrowser runs it: with PYTHONWARNINGS, `id` ran as root (issue 11)
    "PATH",
    "HOME",
    "SHELL",
    "IFS",
    "ENV",
    "BASH_ENV",
    "PERL5OPT",
    "PERL5LIB",
    "NODE_OPTIONS",
    "HOSTALIASES",
    "RES_OPTIONS",
    "LOCALDOMAIN",
    "TMPDIR",
    "CC",
    "CXX",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "CUDA_INJECTION64_PATH", // CUDA loads this library into the process
    "HF_HOME",
    "HF_HUB_CACHE",
    "TRANSFORMERS_CACHE",
];

/// Why a tenant may not set `name`, or `None` if it may.
///
/// # Guarantees
/// Every name starting with `PYTHON` or `LD_`, and `BROWSER`, is refused (the escapes of
/// issue 11); the comparison ignores case, as some libraries read lower-case names too.
pub fn denied_env(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    if DENIED_ENV_PREFIXES.iter().any(|p| upper.starts_with(p)) {
        return Some("it lets the process load code or files other than the admin's");
    }
    if DENIED_ENV_NAMES.contains(&upper.as_str()) {
        return Some("it changes which programs, libraries or files the server uses");
    }
    None
}

/// Checks the admin's policy of slice `i` itself: absolute normalized paths, valid names.
pub(super) fn check_policy(pr: &mut Problems, i: usize, p: &ServerPolicy) {
    let field = |x: &str| format!("spec.slices[{i}].servers.{x}");
    if p.namespaces.is_empty() {
        pr.add(
            field("namespaces"),
            "name at least one namespace whose InferenceServers may use this slice",
        );
    }
    for (j, ns) in p.namespaces.iter().enumerate() {
        if !is_dns_label(ns) {
            pr.add(
                field(&format!("namespaces[{j}]")),
                format!("{ns:?} is not a namespace name (a DNS label)"),
            );
        }
    }
    if p.interpreters.is_empty() {
        pr.add(
            field("interpreters"),
            "name at least one interpreter (absolute path) servers may run",
        );
    }
    for (j, x) in p.interpreters.iter().enumerate() {
        if let Err(m) = absolute_path(x) {
            pr.add(field(&format!("interpreters[{j}]")), m);
        }
    }
    for (j, x) in p.model_roots.iter().enumerate() {
        if let Err(m) = absolute_path(x) {
            pr.add(field(&format!("modelRoots[{j}]")), m);
        }
    }
    if let Some(u) = &p.user {
        if !is_user(u) {
            pr.add(
                field("user"),
                format!(
                    "{u:?} is not a user name ([A-Za-z_][A-Za-z0-9_-]{{0,30}}) or a numeric UID"
                ),
            );
        }
    }
    if p.allow_host_placement && p.user.is_none() {
        pr.add(field("user"), "allowHostPlacement needs a user to run host units as (write root explicitly to run them as root)");
    }
    for (j, u) in p.adopt_units.iter().enumerate() {
        if let Err(m) = service_unit_name(u) {
            pr.add(field(&format!("adoptUnits[{j}]")), m);
        }
    }
    for (j, v) in p.env.iter().enumerate() {
        if command::MANAGED_ENV.contains(&v.name.as_str()) {
            pr.add(
                field(&format!("env[{j}].name")),
                format!("{} is managed by the agent", v.name),
            );
        }
        if p.env[..j].iter().any(|o| o.name == v.name) {
            pr.add(
                field(&format!("env[{j}].name")),
                format!("{} is set twice", v.name),
            );
        }
    }
}

/// Checks what server `spec` in namespace `ns` asks of slice `sl` against the admin's policy.
///
/// # Guarantees
/// On no new problem: the slice has a policy naming `ns`, the interpreter is one the admin
/// listed, every model path lies under a model root (or is a hub id the admin allows), Host
/// placement is allowed (with a user), the unit is `gpuplane-...` or adopted, and no env name
/// is denied or set by the admin.
pub(super) fn check_server(
    pr: &mut Problems,
    ns: &str,
    spec: &InferenceServerSpec,
    sl: &ResolvedSlice,
) {
    let Some(p) = &sl.servers else {
        pr.add("spec.partitionRef.slice", format!("slice {:?} admits no InferenceServers; its GpuPartition's admin must allow them (spec.slices[].servers)", sl.name));
        return;
    };
    if !p.namespaces.iter().any(|n| n == ns) {
        pr.add(
            "metadata.namespace",
            format!(
                "namespace {ns:?} may not use slice {:?}; it admits InferenceServers of: {}",
                sl.name,
                p.namespaces.join(", ")
            ),
        );
    }
    if !p.interpreters.contains(&spec.python) {
        pr.add(
            "spec.python",
            format!(
                "{:?} is not an interpreter slice {:?} allows; use one of: {}",
                spec.python,
                sl.name,
                p.interpreters.join(", ")
            ),
        );
    }
    model_allowed(pr, "spec.model.path", &spec.model.path, p);
    if let Some(d) = spec
        .speculative
        .as_ref()
        .and_then(|s| s.draft_model_path.as_deref())
    {
        model_allowed(pr, "spec.speculative.draftModelPath", d, p);
    }
    let placed = pr.errors.iter().any(|e| e.field == "spec.unit.location");
    if spec.unit.location == UnitLocation::Host && !p.allow_host_placement && !placed {
        pr.add("spec.unit.location", format!("slice {:?} does not allow units on the host (its admin may set servers.allowHostPlacement)", sl.name));
    }
    unit_name_allowed(pr, spec, p);
    extra_args_confined(pr, spec, p);
    for (i, v) in spec.env.iter().enumerate() {
        if let Some(why) = denied_env(&v.name) {
            pr.add(format!("spec.env[{i}].name"), format!("{} may not be set by a server: {why}; the slice's admin may set it (servers.env)", v.name));
        } else if p.env.iter().any(|a| a.name == v.name) {
            pr.add(
                format!("spec.env[{i}].name"),
                format!(
                    "{} is set by the slice's admin (servers.env); remove it",
                    v.name
                ),
            );
        }
    }
}

/// Whether the admin of `sl` lets the agent take over unit `full_name` (`x.service`).
pub(super) fn adopted(sl: &ResolvedSlice, full_name: &str) -> bool {
    sl.servers.as_ref().is_some_and(|p| {
        p.adopt_units
            .iter()
            .any(|a| service_unit_name(a).is_ok_and(|x| x == full_name))
    })
}

/// The unit is in the agent's namespace (`gpuplane-...`) or one the admin lets it adopt.
fn unit_name_allowed(pr: &mut Problems, spec: &InferenceServerSpec, p: &ServerPolicy) {
    let Ok(full) = service_unit_name(&spec.unit.name) else {
        return; // said by the unit name check
    };
    let adopted = p
        .adopt_units
        .iter()
        .any(|a| service_unit_name(a).is_ok_and(|x| x == full));
    if !full.starts_with(UNIT_PREFIX) && !adopted {
        pr.add("spec.unit.name", format!("{full} is outside the agent's unit names: name it {UNIT_PREFIX}{}, or the slice's admin may let it adopt this unit (servers.adoptUnits)", spec.unit.name));
    }
}

/// Paths in `extraArgs` (`--chat-template /x`, `--tokenizer-path`, `--download-dir`,
/// `--lora-paths name=/x`, ...) lie under a model root: a value, or the part after `=` in a
/// `name=value` word, that starts with `/` is checked like the model path; one that starts with
/// `~`, `./` or `../` is refused (it would be resolved against a directory nobody chose). And
/// `--trust-remote-code` with a hub model is refused: it would run code fetched from the hub.
///
/// # Caveats
/// A path inside a JSON value (`--model-loader-extra-config '{...}'`) is not looked for; the
/// server still runs as the slice's `user`, whose file permissions are the last word.
fn extra_args_confined(pr: &mut Problems, spec: &InferenceServerSpec, p: &ServerPolicy) {
    for (i, word) in spec.extra_args.iter().enumerate() {
        let field = format!("spec.extraArgs[{i}]");
        if word == "--trust-remote-code" && !spec.model.path.starts_with('/') {
            pr.add(field, format!("--trust-remote-code with the hub model {:?} would run code fetched from the hub as the server; download the model under a model root of this slice ({})", spec.model.path, roots(p)));
            continue;
        }
        let value = match word.strip_prefix("--") {
            Some(rest) => match rest.split_once('=') {
                Some((_, v)) => v,
                None => continue,
            },
            None => word.as_str(),
        };
        let path = value.split_once('=').map_or(value, |(_, v)| v);
        for candidate in [value, path] {
            if candidate.starts_with('~')
                || candidate.starts_with("./")
                || candidate.starts_with("../")
            {
                pr.add(field.clone(), format!("{candidate:?} is a relative path; give an absolute path under a model root of this slice ({})", roots(p)));
                break;
            }
            if candidate.starts_with('/') {
                if absolute_path(candidate).is_err()
                    || !p.model_roots.iter().any(|r| under(candidate, r))
                {
                    pr.add(
                        field.clone(),
                        format!(
                            "{candidate:?} is not under a model root of this slice ({})",
                            roots(p)
                        ),
                    );
                }
                break;
            }
        }
    }
}

/// A model path is under a model root, or a hub id where the admin allows those. A value that
/// is neither (`~/models/x`, `shared/models/x`) is left to the syntax check, whose one message
/// says so: it is not called a hub id here.
fn model_allowed(pr: &mut Problems, field: &str, path: &str, p: &ServerPolicy) {
    if !path.starts_with('/') {
        if super::server::model_location(path).is_err() {
            return;
        }
        if !p.allow_hub_models {
            pr.add(field, format!("{path:?} is a Hugging Face repo id; this slice serves only local models (under {})", roots(p)));
        }
        return;
    }
    if !p.model_roots.iter().any(|r| under(path, r)) {
        pr.add(
            field,
            format!(
                "{path:?} is not under a model root of this slice ({})",
                roots(p)
            ),
        );
    }
}

/// The model roots, for messages.
fn roots(p: &ServerPolicy) -> String {
    if p.model_roots.is_empty() {
        "none: its admin lists them in servers.modelRoots".into()
    } else {
        p.model_roots.join(", ")
    }
}

/// `path` is `root` or inside it, component-wise (`/models-x` is not under `/models`).
pub fn under(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    path == root || root.is_empty() || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
}

/// An absolute path without `.`/`..` components or control characters.
fn absolute_path(x: &str) -> Result<(), String> {
    if !x.starts_with('/')
        || x.split('/').any(|c| c == "." || c == "..")
        || x.chars().any(char::is_control)
    {
        return Err(format!(
            "{x:?} must be an absolute path without '.', '..' or control characters"
        ));
    }
    Ok(())
}

/// systemd's strict user rule, or a numeric UID.
fn is_user(u: &str) -> bool {
    if !u.is_empty() && u.bytes().all(|b| b.is_ascii_digit()) {
        return u.parse::<u32>().is_ok_and(|n| n != 65535 && n != u32::MAX);
    }
    let mut b = u.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && u.len() <= 31
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

/// A Kubernetes namespace name: DNS label.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests;
