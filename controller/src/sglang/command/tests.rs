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
        smoke_test: None,
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

#[test]
fn secrets_on_the_command_line_are_hidden_from_status() {
    let argv: Vec<String> = [
        "python3",
        "-m",
        "sglang.launch_server",
        "--api-key",
        "sk-123",
        "--port",
        "30000",
        "--admin-api-key=adm",
        "--ssl-keyfile-password",
        "pw",
        "--max-total-tokens",
        "100",
        "--bucket-time-to-first-token",
        "0.1",
    ]
    .map(String::from)
    .to_vec();
    let shown = redacted(&argv).join(" ");
    assert_eq!(
        shown,
        "python3 -m sglang.launch_server --api-key *** --port 30000 --admin-api-key=*** \
         --ssl-keyfile-password *** --max-total-tokens 100 --bucket-time-to-first-token 0.1"
    );
    for s in ["sk-123", "=adm", " pw "] {
        assert!(!shown.contains(s), "{s} leaked: {shown}");
    }
}
