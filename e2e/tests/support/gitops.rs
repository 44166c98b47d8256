//! The GitOps checks shipped in `examples/gitops/`, run by real interpreters:
//!
//! - Argo CD's `health.lua` by Debian's Lua 5.1 (`lua5.1`, e2e/setup/observability-tools.sh),
//!   the way Argo's `TestLuaHealthScript` runs them: the object as the global `obj`, the script's
//!   returned table compared with `health_test.yaml` (status and message);
//! - Flux's `healthCheckExprs` by the `cel-interpreter` crate, with Flux's order: a status
//!   whose `observedGeneration` differs from `metadata.generation` is InProgress, then the first
//!   of `inProgress`, `failed`, `current` that is true decides, and none true is InProgress.

use gpuplane_crds::kstatus::Kstatus;
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Argo's customizations folder of `kind` (`gpuplane.dev/<Kind>`).
pub fn argo_dir(kind: &str) -> PathBuf {
    repo()
        .join("examples/gitops/argocd/resource_customizations/gpuplane.dev")
        .join(kind)
}

/// A Lua 5.1 literal for a JSON value (as Argo converts an object: null is nil, arrays are
/// 1-based sequences, strings byte for byte).
fn lua_literal(v: &Json) -> String {
    match v {
        Json::Null => "nil".into(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => n.to_string(),
        Json::String(s) => lua_string(s),
        Json::Array(a) => {
            let items: Vec<String> = a.iter().map(lua_literal).collect();
            format!("{{{}}}", items.join(", "))
        }
        Json::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("[{}] = {}", lua_string(k), lua_literal(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// A quoted Lua string: every byte outside printable ASCII as a decimal escape.
fn lua_string(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b}")),
        }
    }
    out.push('"');
    out
}

/// Runs `script` on `obj` with `lua5.1`; returns (status, message).
pub fn lua_health(script: &Path, obj: &Json) -> (String, String) {
    let program = format!(
        "obj = {}\nlocal hs = dofile({})\nio.write(hs.status, \"\\n\", hs.message or \"\")\n",
        lua_literal(obj),
        lua_string(&script.display().to_string())
    );
    let out = Command::new("lua5.1")
        .args(["-e", &program])
        .output()
        .expect("lua5.1 (install it with e2e/setup/observability-tools.sh)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "lua5.1 {}: {}{text}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, message) = text.split_once('\n').unwrap_or((&text, ""));
    (status.to_string(), message.to_string())
}

/// One of Flux's `healthCheckExprs` entries.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckExpr {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub in_progress: String,
    #[serde(default)]
    pub failed: String,
    pub current: String,
}

/// The `healthCheckExprs` of the Flux example Kustomization.
fn flux_exprs() -> Vec<HealthCheckExpr> {
    let path = repo().join("examples/gitops/flux/kustomization.yaml");
    let text = std::fs::read_to_string(&path).expect("the Flux example");
    let k: serde_yaml::Value = serde_yaml::from_str(&text).expect("Flux example YAML");
    serde_yaml::from_value(k["spec"]["healthCheckExprs"].clone()).expect("healthCheckExprs")
}

/// The example's entry for `obj`'s apiVersion and kind.
pub fn flux_expr_for(obj: &Json) -> HealthCheckExpr {
    flux_exprs()
        .into_iter()
        .find(|e| e.api_version == obj["apiVersion"] && e.kind == obj["kind"])
        .unwrap_or_else(|| {
            panic!(
                "no healthCheckExprs entry for {} {}",
                obj["apiVersion"], obj["kind"]
            )
        })
}

/// A CEL boolean `expr` over `obj`'s top-level fields, as Flux binds them.
fn cel_bool(expr: &str, obj: &Json) -> bool {
    let program = cel_interpreter::Program::compile(expr)
        .unwrap_or_else(|e| panic!("CEL does not compile: {expr}: {e}"));
    let mut ctx = cel_interpreter::Context::default();
    for (k, v) in obj.as_object().expect("an object") {
        ctx.add_variable(k.as_str(), v.clone())
            .unwrap_or_else(|e| panic!("CEL variable {k}: {e}"));
    }
    match program.execute(&ctx) {
        Ok(cel_interpreter::Value::Bool(b)) => b,
        other => panic!("CEL {expr} on {obj}: {other:?}"),
    }
}

/// Flux's verdict on `obj` with `e` (RFC-0009's order).
pub fn flux_status(e: &HealthCheckExpr, obj: &Json) -> Kstatus {
    if let (Some(g), Some(og)) = (
        obj["metadata"]["generation"].as_i64(),
        obj["status"]["observedGeneration"].as_i64(),
    ) {
        if g != og {
            return Kstatus::InProgress;
        }
    }
    for (expr, status) in [
        (&e.in_progress, Kstatus::InProgress),
        (&e.failed, Kstatus::Failed),
        (&e.current, Kstatus::Current),
    ] {
        if !expr.is_empty() && cel_bool(expr, obj) {
            return status;
        }
    }
    Kstatus::InProgress
}
