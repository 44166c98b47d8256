//! What preflight reads for each server, from its validated spec: the one place a spec becomes
//! a [`PreflightRequest`]. Pure.
//!
//! # Guarantees
//! - Model reads are confined to the slice's `modelRoots` (the trust model of
//!   [`super::tenancy`]): the request carries them and the backends refuse anything outside.
//! - Only absolute model paths are read; a hub id has nothing local to check.

use super::{Desired, DesiredServer};
use crate::host::model::{HostState, Location, PreflightRequest};

/// Environment variables whose values are paths the server needs (`:`-separated lists split).
const PATH_VARS: &[&str] = &["CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"];

/// The preflight requests of every server of `d`.
pub fn requests(d: &Desired) -> Vec<PreflightRequest> {
    d.servers.iter().map(|s| request(d, s)).collect()
}

/// The preflight request of one server.
pub fn request(d: &Desired, s: &DesiredServer) -> PreflightRequest {
    let abs = |p: &str| p.starts_with('/').then(|| p.to_string());
    let roots = d
        .partition
        .slice(&s.spec.partition_ref.slice)
        .and_then(|sl| sl.servers.as_ref())
        .map(|p| p.model_roots.clone())
        .unwrap_or_default();
    // The unit's environment: the admin's first, the tenant's after (the later one wins).
    let mut env: Vec<(String, String)> = s.runtime.env.clone();
    env.extend(s.spec.env.iter().map(|e| (e.name.clone(), e.value.clone())));
    let mut env_paths: Vec<(String, String)> = vec![];
    for var in PATH_VARS {
        let Some((_, value)) = env.iter().rev().find(|(k, _)| k == var) else {
            continue;
        };
        for p in value.split(':').filter(|p| p.starts_with('/')) {
            env_paths.push((var.to_string(), p.to_string()));
        }
    }
    PreflightRequest {
        server: s.id.clone(),
        location: s.unit.location,
        python: s.spec.python.clone(),
        user: s.runtime.user.clone(),
        model_dir: abs(&s.spec.model.path),
        draft_dir: s
            .spec
            .speculative
            .as_ref()
            .and_then(|sp| sp.draft_model_path.as_deref())
            .and_then(abs),
        env_paths,
        gpus: s.gpus.clone(),
        roots,
        unit: s.unit.clone(),
        served_name: s.spec.model.served_name.clone(),
        smoke: s.spec.smoke_test.clone(),
    }
}

/// What preflight concluded about one server.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Why the server cannot run as specified, each naming the file or the number.
    pub problems: Vec<String>,
    /// What was found (versions, weights, memory, KV headroom), for status.
    pub summary: String,
}

/// `--mem-fraction-static` assumed when the spec leaves it to SGLang (its default is at most this).
pub const DEFAULT_MEM_FRACTION: f64 = 0.9;

/// Speculative algorithms that, without a draft model, draft with the model's own MTP layers
/// (SGLang rewrites NEXTN to EAGLE; FROZEN_KV_MTP is Gemma 4's).
const SELF_DRAFTING: &[&str] = &["NEXTN", "EAGLE", "FROZEN_KV_MTP"];

const GIB: f64 = (1u64 << 30) as f64;

/// Judges the facts preflight read for `s`. Pure.
pub fn judge(s: &DesiredServer, f: &crate::host::model::PreflightFacts) -> Verdict {
    let mut v = Verdict::default();
    let spec = &s.spec;
    let place = s.unit.location.to_string();
    if let Some(e) = &f.interpreter.error {
        v.problems.push(e.clone());
    }
    for p in &f.missing_paths {
        v.problems.push(format!(
            "{p} (named in the unit's environment) does not exist on {place}"
        ));
    }
    if let Some(m) = &f.model {
        v.problems.extend(m.problems.iter().cloned());
        heads_fit(&mut v, m, spec.tensor_parallel_size);
    }
    if let Some(sp) = &spec.speculative {
        let algo = sp.algorithm.to_ascii_uppercase();
        match (&f.draft, &f.model) {
            (Some(d), _) => v
                .problems
                .extend(d.problems.iter().map(|p| format!("draft model: {p}"))),
            (None, Some(m))
                if SELF_DRAFTING.contains(&algo.as_str())
                    && sp.draft_model_path.is_none()
                    && m.config.mtp.is_none()
                    && m.problems.is_empty() =>
            {
                v.problems.push(format!(
                        "speculative {algo} drafts with the model's own MTP layers, but {}/config.json declares none (none of {} is set above 0); set speculative.draftModelPath or drop speculative",
                        m.path.trim_end_matches('/'),
                        crate::modelfiles::config::MTP_KEYS.join(", ")
                    ));
            }
            _ => {}
        }
    }
    let mut parts = vec![];
    let i = &f.interpreter;
    if i.error.is_none() {
        let ver = |x: &Option<String>| x.clone().unwrap_or_else(|| "?".into());
        parts.push(format!(
            "sglang {}, torch {}, CUDA {}",
            ver(&i.sglang),
            ver(&i.torch),
            ver(&i.cuda)
        ));
    }
    memory_fits(&mut v, &mut parts, s, f);
    v.summary = parts.join("; ");
    v
}

/// SGLang's rule (`QKVParallelLinear`, the models' asserts): attention heads divide by tp; KV
/// heads divide by tp, or (fewer KV heads than tp) tp divides by them and they are replicated.
fn heads_fit(v: &mut Verdict, m: &crate::modelfiles::DirFacts, tp: u32) {
    let tp = u64::from(tp.max(1));
    let cfg = format!("{}/config.json", m.path.trim_end_matches('/'));
    let Some(heads) = m.config.num_attention_heads else {
        return;
    };
    if !heads.is_multiple_of(tp) {
        v.problems.push(format!(
            "{cfg}: num_attention_heads {heads} is not divisible by tensorParallelSize {tp}"
        ));
    }
    let kv = m.config.num_key_value_heads.unwrap_or(heads);
    let fits = if kv == 0 {
        false
    } else if tp >= kv {
        tp.is_multiple_of(kv)
    } else {
        kv.is_multiple_of(tp)
    };
    if !fits {
        v.problems.push(format!(
            "{cfg}: num_key_value_heads {kv} and tensorParallelSize {tp}: one must divide the other"
        ));
    }
}

/// Weights per GPU at this tp against the smallest slice GPU's memory × memFractionStatic; the
/// rest of that budget is the KV cache's headroom (an estimate: activations and CUDA graphs
/// also take some).
fn memory_fits(
    v: &mut Verdict,
    parts: &mut Vec<String>,
    s: &DesiredServer,
    f: &crate::host::model::PreflightFacts,
) {
    let Some(m) = &f.model else { return };
    if !m.problems.is_empty() {
        return;
    }
    let tp = u64::from(s.spec.tensor_parallel_size.max(1));
    let weights = m.weight_bytes + f.draft.as_ref().map_or(0, |d| d.weight_bytes);
    let per_gpu = weights as f64 / tp as f64;
    let mut line = format!(
        "weights {:.1} GiB in {} shards, {:.1} GiB per GPU at tp {tp}",
        weights as f64 / GIB,
        m.shards,
        per_gpu / GIB
    );
    let mems: Vec<u64> = s
        .gpus
        .iter()
        .filter_map(|g| f.gpu_memory_mib.get(g).copied())
        .collect();
    if mems.len() != s.gpus.len() || mems.is_empty() {
        line.push_str("; GPU memory unknown (no nvidia-smi): fit not checked");
        parts.push(line);
        return;
    }
    let mib = mems.iter().copied().min().unwrap_or(0);
    let frac = s.spec.mem_fraction_static.unwrap_or(DEFAULT_MEM_FRACTION);
    let budget = mib as f64 * (1u64 << 20) as f64 * frac;
    let budget_txt = format!(
        "{:.1} GiB × memFractionStatic {frac} = {:.1} GiB",
        mib as f64 / 1024.0,
        budget / GIB
    );
    if per_gpu > budget {
        v.problems.push(format!(
            "weights need {:.1} GiB per GPU at tensorParallelSize {tp} ({} bytes in {}), more than the GPU's {budget_txt}",
            per_gpu / GIB,
            weights,
            m.path
        ));
    } else {
        line.push_str(&format!(
            " of {budget_txt}; KV cache headroom about {:.1} GiB per GPU",
            (budget - per_gpu) / GIB
        ));
    }
    parts.push(line);
}

/// The driver refuses a userspace that is not its own version exactly (`NVRM: API mismatch`,
/// `Failed to initialize NVML: Driver/library version mismatch`): a server in a container
/// whose `libnvidia-ml.so.<version>` is not the host's loaded module would crash at start.
/// Read while the container still runs, so the old server keeps serving.
pub fn container_driver_mismatch(s: &DesiredServer, h: &HostState) -> Option<String> {
    let Location::Container(v) = s.unit.location else {
        return None;
    };
    let c = h.containers.get(&v)?;
    match (&c.nvidia_userspace_version, &h.nvidia.module_version) {
        (Some(u), Some(k)) if u != k => Some(format!(
            "container {v} has the NVIDIA userspace {u} (libnvidia-ml.so.{u}) but the host's kernel module is {k}; the driver refuses a mismatch (\"Failed to initialize NVML: Driver/library version mismatch\"): install the {k} userspace libraries in the container"
        )),
        _ => None,
    }
}

/// A driver package upgraded on the host while the old module stays loaded: a server on the
/// host would load the new userspace against the old module. Only a reboot ends it.
pub fn host_driver_stale(s: &DesiredServer, h: &HostState) -> Option<String> {
    if s.unit.location != Location::Host {
        return None;
    }
    match (&h.nvidia.userspace_version, &h.nvidia.module_version) {
        (Some(u), Some(k)) if u != k => Some(format!(
            "the host's NVIDIA userspace is {u} but the loaded kernel module is {k} (the driver was upgraded and the old module is still loaded); no new server can start on the host until it reboots"
        )),
        _ => None,
    }
}
