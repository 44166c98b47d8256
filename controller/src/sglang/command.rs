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
    let mut a: Vec<String> = vec![
        spec.python.clone(),
        "-m".into(),
        "sglang.launch_server".into(),
    ];
    let mut flag = |name: &str, value: String| {
        a.push(name.to_string());
        a.push(value);
    };
    flag("--model-path", spec.model.path.clone());
    flag("--served-model-name", spec.model.served_name.clone());
    flag("--tp-size", spec.tensor_parallel_size.to_string());
    if let Some(s) = &spec.speculative {
        flag("--speculative-algorithm", s.algorithm.to_ascii_uppercase());
        if let Some(v) = s.num_steps {
            flag("--speculative-num-steps", v.to_string());
        }
        if let Some(v) = s.eagle_topk {
            flag("--speculative-eagle-topk", v.to_string());
        }
        if let Some(v) = s.num_draft_tokens {
            flag("--speculative-num-draft-tokens", v.to_string());
        }
        if let Some(v) = &s.draft_model_path {
            flag("--speculative-draft-model-path", v.clone());
        }
    }
    if let Some(v) = &spec.tool_call_parser {
        flag("--tool-call-parser", v.clone());
    }
    if let Some(v) = &spec.reasoning_parser {
        flag("--reasoning-parser", v.clone());
    }
    if let Some(v) = spec.mem_fraction_static {
        flag("--mem-fraction-static", v.to_string());
    }
    flag("--host", spec.listen.host.clone());
    flag("--port", spec.listen.port.to_string());
    if spec.enable_metrics {
        a.push("--enable-metrics".into());
    }
    if p2p_disabled {
        a.push("--disable-custom-all-reduce".into());
    }
    a.extend(spec.extra_args.iter().cloned());
    a
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

/// The unit for `spec`, run by `id` (`namespace/name`, shown in the description).
pub fn unit_spec(
    id: &str,
    spec: &InferenceServerSpec,
    cuda_indices: &[u32],
    p2p_disabled: bool,
) -> UnitSpec {
    UnitSpec {
        description: format!(
            "SGLang server {} (gpuplane InferenceServer {id})",
            spec.model.served_name
        ),
        exec_start: argv(spec, p2p_disabled),
        environment: env(spec, cuda_indices, p2p_disabled),
        working_directory: None,
        user: None,
        // The agent decides about restarts: a crash must stay visible as `failed`.
        restart: Some("no".into()),
        timeout_start_sec: None,
        after: vec!["network-online.target".into()],
        wanted_by: vec!["multi-user.target".into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuplane_crds::*;

    pub(crate) fn reference() -> InferenceServerSpec {
        InferenceServerSpec {
            partition_ref: PartitionRef {
                name: "kpro6".into(),
                slice: "inference".into(),
            },
            unit: UnitPlacement {
                name: "sglang-qwen".into(),
                location: UnitLocation::Container,
            },
            python: "/root/ml-env/bin/python3".into(),
            model: ModelSpec {
                path: "/shared/models/Qwen3.5-122B-A10B".into(),
                served_name: "qwen".into(),
            },
            tensor_parallel_size: 4,
            speculative: Some(SpeculativeSpec {
                algorithm: "NEXTN".into(),
                num_steps: Some(3),
                eagle_topk: Some(1),
                num_draft_tokens: Some(4),
                draft_model_path: None,
            }),
            tool_call_parser: Some("qwen3_coder".into()),
            reasoning_parser: Some("qwen3".into()),
            mem_fraction_static: Some(0.85),
            listen: Listen {
                host: "0.0.0.0".into(),
                port: 30000,
            },
            enable_metrics: true,
            p2p: P2pPolicy::Auto,
            env: vec![EnvVar {
                name: "OMP_NUM_THREADS".into(),
                value: "8".into(),
            }],
            extra_args: vec!["--max-running-requests".into(), "64".into()],
            startup: StartupSpec::default(),
            rollback: RollbackPolicy::Never,
        }
    }

    #[test]
    fn every_field_maps_to_its_flag() {
        let a = argv(&reference(), true);
        let s = a.join(" ");
        for want in [
            "/root/ml-env/bin/python3 -m sglang.launch_server",
            "--model-path /shared/models/Qwen3.5-122B-A10B",
            "--served-model-name qwen",
            "--tp-size 4",
            "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
            "--tool-call-parser qwen3_coder",
            "--reasoning-parser qwen3",
            "--mem-fraction-static 0.85",
            "--host 0.0.0.0 --port 30000",
            "--enable-metrics",
            "--disable-custom-all-reduce",
            "--max-running-requests 64",
        ] {
            assert!(s.contains(want), "missing {want:?} in {s}");
        }
        // every flag we render is a real SGLang flag
        for w in a.iter().filter(|w| w.starts_with("--")) {
            assert!(
                crate::sglang::flags::lookup(w).is_some(),
                "{w} is not an SGLang flag"
            );
        }
        assert!(!argv(&reference(), false).contains(&"--disable-custom-all-reduce".to_string()));
    }

    #[test]
    fn env_selects_devices_and_p2p() {
        let e = env(&reference(), &[0, 1, 2, 3], true);
        assert!(e.contains(&("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into())));
        assert!(e.contains(&("NCCL_P2P_DISABLE".into(), "1".into())));
        assert!(e.contains(&("OMP_NUM_THREADS".into(), "8".into())));
        let e = env(&reference(), &[4, 5], false);
        assert!(e.contains(&("CUDA_VISIBLE_DEVICES".into(), "4,5".into())));
        assert!(!e.iter().any(|(k, _)| k == "NCCL_P2P_DISABLE"));
    }
}
