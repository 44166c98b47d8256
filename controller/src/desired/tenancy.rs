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
use crate::sglang::args::{self, Word};
use crate::sglang::command;
use crate::sglang::flag_policy::{self, Who};
use crate::systemd::name::service_unit_name;
use gpuplane_crds::{EnvVar, InferenceServerSpec, ServerPolicy, UnitLocation};

/// Prefix every server unit not adopted by the admin must carry: the agent's own namespace of
/// unit names, so no server can name (and so overwrite, restart or remove) a host unit.
pub const UNIT_PREFIX: &str = "gpuplane-";

/// Variables whose names an admin may not hand to tenants (`servers.allowedEnv`): they make an
/// interpreter, the dynamic loader or a library run other code or read other files than the
/// admin installed, whole families by prefix. The admin may still set them itself
/// (`servers.env`), where the value is the admin's.
const NEVER_TENANT_PREFIXES: &[&str] = &["PYTHON", "LD_"];

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
    check_allowed_flags(pr, &field, &p.allowed_flags);
    check_allowed_env(pr, &field, &p.allowed_env);
    check_env(pr, &field, &p.env);
}
/// `allowedFlags`: SGLang flags by their full names, none that the agent sets itself.
fn check_allowed_flags(pr: &mut Problems, field: &dyn Fn(&str) -> String, flags: &[String]) {
    for (j, f) in flags.iter().enumerate() {
        let field = field(&format!("allowedFlags[{j}]"));
        match crate::sglang::flags::lookup(f) {
            None => pr.add(
                field,
                format!("{f:?} is not an SGLang 0.5.23 flag (full names, with the leading --)"),
            ),
            Some(_) if command::MANAGED_FLAGS.contains(&f.as_str()) => pr.add(
                field,
                format!("{f} is set by the agent from the server's spec; it cannot be allowed"),
            ),
            Some(_) => {}
        }
    }
}

/// `allowedEnv`: names or `PREFIX*`, none covering what the agent sets or what loads code.
fn check_allowed_env(pr: &mut Problems, field: &dyn Fn(&str) -> String, names: &[String]) {
    for (j, n) in names.iter().enumerate() {
        let field = field(&format!("allowedEnv[{j}]"));
        let prefix = n.strip_suffix('*');
        // Whether the entry would let a server set a name that starts with `family`.
        let covers = |family: &str| match prefix {
            Some(pre) => family.starts_with(pre) || pre.starts_with(family),
            None => n.starts_with(family),
        };
        if n.is_empty() || prefix == Some("") {
            pr.add(field, "name a variable, or a prefix followed by *");
        } else if let Some(m) = command::MANAGED_ENV
            .iter()
            .find(|m| prefix.map_or(n == *m, |pre| m.starts_with(pre)))
        {
            pr.add(
                field,
                format!("{n} covers {m}, which the agent sets; it cannot be allowed"),
            );
        } else if NEVER_TENANT_PREFIXES.iter().any(|f| covers(f)) {
            pr.add(field, format!("{n} lets a server load code the admin did not install (PYTHON*, LD_*); set the value yourself in servers.env instead"));
        }
    }
}

/// `env`: the admin's own values, none of the agent's names, each name once.
fn check_env(pr: &mut Problems, field: &dyn Fn(&str) -> String, env: &[EnvVar]) {
    for (j, v) in env.iter().enumerate() {
        if command::MANAGED_ENV.contains(&v.name.as_str()) {
            pr.add(
                field(&format!("env[{j}].name")),
                format!("{} is managed by the agent", v.name),
            );
        }
        if env[..j].iter().any(|o| o.name == v.name) {
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
    extra_args_allowed(pr, spec, p);
    for (i, v) in spec.env.iter().enumerate() {
        if p.env.iter().any(|a| a.name == v.name) {
            pr.add(
                format!("spec.env[{i}].name"),
                format!(
                    "{} is set by the slice's admin (servers.env); remove it",
                    v.name
                ),
            );
        } else if !env::tenant_may_set(&v.name, &p.allowed_env) {
            pr.add(format!("spec.env[{i}].name"), format!("{} is not among the variables a server may set (CUDA, NCCL, PyTorch and thread tunables: controller/src/desired/tenancy/env.rs); a variable can load code, redirect downloads or move a code cache, so the slice's admin decides: it may set the value (servers.env) or allow the name (servers.allowedEnv)", v.name));
        }
    }
}

/// Whether the admin of `sl` lets the agent take over unit `full_name` (`x.service`).
pub(crate) fn adopted(sl: &ResolvedSlice, full_name: &str) -> bool {
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

/// `extraArgs` within what the slice allows: every flag is one any server may set (the serving
/// tunables of `sglang/flag-policy.tsv`) or one the admin lists (`servers.allowedFlags`), and
/// every value of a flag that table says takes a path is absolute, without `.` or `..`, and
/// under a model root; a template flag's value may instead name a built-in template.
///
/// # Caveats
/// Values of admin-allowed flags the table calls plain (`--lora-paths name=/x`, JSON) are the
/// admin's to trust: allowing the flag allows them.
fn extra_args_allowed(pr: &mut Problems, spec: &InferenceServerSpec, p: &ServerPolicy) {
    for w in args::split(&spec.extra_args) {
        // Unknown flags and stray words are said by the syntax check (`sglang::args`).
        let Word::Flag {
            at,
            opt,
            flag: Some(flag),
            values,
        } = w
        else {
            continue;
        };
        if command::MANAGED_FLAGS.contains(&flag.name.as_str()) {
            continue; // said by the syntax check: use the spec field
        }
        let field = format!("spec.extraArgs[{at}]");
        let rule = flag_policy::rule(&flag.name);
        if rule.who == Who::Admin && !p.allowed_flags.contains(&flag.name) {
            let why = rule
                .why
                .strip_prefix("code or reach: ")
                .unwrap_or(&rule.why);
            pr.add(field, format!("{opt} may not be set by a server: {why}; the slice's admin may allow it (servers.allowedFlags)"));
            continue;
        }
        for (k, v) in values {
            let path = match rule.value {
                flag_policy::Value::Plain => false,
                flag_policy::Value::Path => true,
                flag_policy::Value::Template => !flag_policy::is_template_name(v),
            };
            if path {
                confined(pr, &format!("spec.extraArgs[{k}]"), &opt, v, p);
            }
        }
    }
}

/// A path value of flag `opt` is absolute, normalized and under a model root. The unit runs in
/// an empty private directory, but a relative path is refused all the same: what it means
/// would depend on where SGLang resolves it.
fn confined(pr: &mut Problems, field: &str, opt: &str, v: &str, p: &ServerPolicy) {
    if !v.starts_with('/') {
        pr.add(field, format!("{v:?} is a relative path; {opt} takes a file or directory: give an absolute path under a model root of this slice ({})", roots(p)));
    } else if let Err(m) = absolute_path(v) {
        pr.add(field, m);
    } else if !p.model_roots.iter().any(|r| under(v, r)) {
        pr.add(
            field,
            format!(
                "{v:?} is not under a model root of this slice ({})",
                roots(p)
            ),
        );
    }
}

/// A model path is under a model root, or a hub id where the admin allows those. A value that
/// is neither (`~/models/x`, `shared/models/x`) is left to the syntax check, whose one message
/// says so: it is not called a hub id here.
fn model_allowed(pr: &mut Problems, field: &str, path: &str, p: &ServerPolicy) {
    if !path.starts_with('/') {
        if super::model_ref::check(path).is_err() {
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

mod env;

#[cfg(test)]
mod tests;
