//! The tenant escapes of issue 11, each refused with the field and the reason; the admin's
//! policy checked itself; the older claim keeping its slice.

use super::env::tenant_may_set;
use super::under;
use crate::desired::{
    check_servers_together, in_claim_order, resolve_partition, resolve_server, DesiredPartition,
};
use crate::host::Host;
use crate::testutil::{manifests, twin};
use gpuplane_crds::{EnvVar, GpuPartition, InferenceServer, ServerPolicy, UnitLocation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The reference partition (with its policy) resolved on the twin.
fn kpro6(edit: impl FnOnce(&mut GpuPartition)) -> DesiredPartition {
    let mut p = manifests().partitions[0].clone();
    edit(&mut p);
    resolve_partition(&p, &twin().observe().unwrap(), "10de", "nvidia").expect("valid")
}

/// The reference server, changed by `edit`.
fn server(edit: impl FnOnce(&mut InferenceServer)) -> InferenceServer {
    let mut s = manifests().servers[0].clone();
    edit(&mut s);
    s
}

/// The `field: message` lines `s` gets on the reference partition changed by `p`.
fn errors(p: impl FnOnce(&mut GpuPartition), s: impl FnOnce(&mut InferenceServer)) -> Vec<String> {
    match resolve_server(&server(s), &kpro6(p)) {
        Ok(_) => vec![],
        Err(e) => e
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect(),
    }
}

/// `errors` with the partition as given.
fn server_errors(s: impl FnOnce(&mut InferenceServer)) -> Vec<String> {
    errors(|_| {}, s)
}

/// The `field: message` lines of the reference partition with its inference slice's policy
/// changed by `edit`.
fn policy_errors(edit: impl FnOnce(&mut ServerPolicy)) -> Vec<String> {
    let mut p = manifests().partitions[0].clone();
    edit(p.spec.slices[0].servers.as_mut().unwrap());
    match resolve_partition(&p, &twin().observe().unwrap(), "10de", "nvidia") {
        Ok(_) => vec![],
        Err(e) => e
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect(),
    }
}

fn has(errs: &[String], field: &str, words: &str) -> bool {
    errs.iter()
        .any(|e| e.starts_with(field) && e.contains(words))
}

#[test]
fn the_reference_server_is_within_its_slice_policy() {
    assert_eq!(server_errors(|_| {}), Vec::<String>::new());
}

/// Finding 1: `PYTHONWARNINGS` + `BROWSER` ran `id` as root; `LD_PRELOAD` loads any library.
#[test]
fn interpreter_hijacking_variables_are_refused() {
    let e = server_errors(|s| {
        for (n, v) in [
            ("PYTHONWARNINGS", "ignore::antigravity.Foo"),
            ("BROWSER", "/bin/sh -c id"),
            ("LD_PRELOAD", "/tmp/x.so"),
            ("pythonpath", "/tmp"),
        ] {
            s.spec.env.push(EnvVar {
                name: n.into(),
                value: v.into(),
            });
        }
    });
    for i in 3..7 {
        assert!(
            has(
                &e,
                &format!("spec.env[{i}].name"),
                "is not among the variables a server may set"
            ),
            "{e:?}"
        );
    }
}

/// Issue 23: the environment is an allow-list. Names that load a library, redirect downloads or
/// move a code cache were accepted by the deny-list; now they need the admin.
#[test]
fn a_server_sets_only_the_variables_listed_or_allowed() {
    let bad = [
        ("NCCL_NET_PLUGIN", "/shared/models/x/libnccl-net.so"),
        ("NVTX_INJECTION64_PATH", "/shared/models/x/lib.so"),
        ("HF_ENDPOINT", "https://evil.example"),
        ("HTTPS_PROXY", "http://evil.example:3128"),
        ("XDG_CACHE_HOME", "/shared/models/x"),
        ("TORCH_EXTENSIONS_DIR", "/shared/models/x"),
        ("SGLANG_EXTERNAL_MODEL_PACKAGE", "evil"),
    ];
    let e = server_errors(|s| {
        for (n, v) in bad {
            s.spec.env.push(EnvVar {
                name: n.into(),
                value: v.into(),
            });
        }
    });
    for (i, (n, _)) in bad.iter().enumerate() {
        let field = format!("spec.env[{}].name", i + 3);
        assert!(
            has(
                &e,
                &field,
                &format!("{n} is not among the variables a server may set")
            ),
            "{n}: {e:?}"
        );
        assert!(has(&e, &field, "servers.allowedEnv"), "{e:?}");
    }
    // Tunables pass; what the admin allows passes, by name or by prefix.
    assert!(tenant_may_set("NCCL_PROTO", &[]) && tenant_may_set("OMP_NUM_THREADS", &[]));
    assert!(!tenant_may_set("HF_ENDPOINT", &[]));
    assert!(tenant_may_set("HF_ENDPOINT", &["HF_ENDPOINT".into()]));
    assert!(tenant_may_set("STANDIN_X", &["STANDIN_*".into()]));
    assert!(!tenant_may_set("STANDIN", &["STANDIN_*".into()]));
    let e = errors(
        |p| {
            let sv = p.spec.slices[0].servers.as_mut().unwrap();
            sv.allowed_env.push("HF_ENDPOINT".into())
        },
        |s| {
            s.spec.env.push(EnvVar {
                name: "HF_ENDPOINT".into(),
                value: "https://mirror.example".into(),
            })
        },
    );
    assert_eq!(e, Vec::<String>::new());
    // The reference server's CUDA_HOME is a path: its admin allows it (examples/kpro6).
    let e = errors(
        |p| {
            p.spec.slices[0]
                .servers
                .as_mut()
                .unwrap()
                .allowed_env
                .clear()
        },
        |_| {},
    );
    assert!(
        has(&e, "spec.env[0].name", "CUDA_HOME is not among"),
        "{e:?}"
    );
}

/// An admin cannot hand out what the agent sets, nor the loader's and interpreter's families.
#[test]
fn the_admin_s_allowed_env_is_checked() {
    let e = policy_errors(|pol| {
        pol.allowed_env = [
            "CUDA_VISIBLE_DEVICES",
            "CUDA_*",
            "LD_PRELOAD",
            "PY*",
            "*",
            "NCCL_ALGO",
        ]
        .map(String::from)
        .to_vec()
    });
    let f = |j: usize| format!("spec.slices[0].servers.allowedEnv[{j}]");
    assert!(has(&e, &f(0), "which the agent sets"), "{e:?}");
    assert!(has(&e, &f(1), "covers CUDA_VISIBLE_DEVICES"), "{e:?}");
    assert!(has(&e, &f(2), "load code"), "{e:?}");
    assert!(has(&e, &f(3), "load code"), "{e:?}");
    assert!(has(&e, &f(4), "a prefix followed by *"), "{e:?}");
    assert!(!e.iter().any(|x| x.starts_with(&f(5))), "{e:?}");
}

/// The admin's variables are the admin's: a server may not override them.
#[test]
fn a_server_may_not_set_what_the_admin_sets() {
    let e = server_errors(|s| {
        s.spec.env.push(EnvVar {
            name: "LD_LIBRARY_PATH".into(),
            value: "/tmp".into(),
        })
    });
    assert!(
        has(&e, "spec.env[3].name", "is set by the slice's admin"),
        "{e:?}"
    );
}

/// Finding 1: the interpreter was any absolute path (`/bin/sh` would do).
#[test]
fn only_the_admins_interpreters_run() {
    let e = server_errors(|s| s.spec.python = "/bin/sh".into());
    assert_eq!(e, vec!["spec.python: \"/bin/sh\" is not an interpreter slice \"inference\" allows; use one of: /root/ml-env/bin/python3"]);
}

/// Models lie under the admin's roots (component-wise), hub ids only where allowed.
#[test]
fn models_lie_under_the_model_roots() {
    let e = server_errors(|s| s.spec.model.path = "/shared/models-evil/x".into());
    assert!(
        has(&e, "spec.model.path", "is not under a model root"),
        "{e:?}"
    );
    let e = server_errors(|s| s.spec.model.path = "Qwen/Qwen3-8B".into());
    assert!(
        has(&e, "spec.model.path", "serves only local models"),
        "{e:?}"
    );
    let e = errors(
        |p| p.spec.slices[0].servers.as_mut().unwrap().allow_hub_models = true,
        |s| s.spec.model.path = "Qwen/Qwen3-8B".into(),
    );
    assert_eq!(e, Vec::<String>::new());
    assert!(under("/a/b", "/a") && under("/a", "/a/") && !under("/ab", "/a"));
}

/// `extraArgs` with `args`, on the reference partition with `allowed` as its admin's
/// `servers.allowedFlags`.
fn args_errors(allowed: &[&str], args: &[&str]) -> Vec<String> {
    let allowed: Vec<String> = allowed.iter().map(|x| x.to_string()).collect();
    let args: Vec<String> = args.iter().map(|x| x.to_string()).collect();
    errors(
        move |p| p.spec.slices[0].servers.as_mut().unwrap().allowed_flags = allowed,
        move |s| s.spec.extra_args = args,
    )
}

/// Issue 23: the flags of the review that ran code or read other files converged on the
/// reference example; each is now refused, naming the field and who may allow it.
#[test]
fn flags_that_load_code_need_the_admin() {
    for (args, at) in [
        (
            &[
                "--forward-hooks",
                r#"[{"name":"x","target_modules":["lm_head"],"hook_factory":"subprocess:Popen","config":{}}]"#,
            ][..],
            0,
        ),
        (&["--enable-custom-logit-processor"][..], 0),
        (&["--config", "/shared/models/x.yaml"][..], 0),
        (
            &["--tokenizer-path", "org/name", "--trust-remote-code"][..],
            0,
        ),
        (
            &["--max-running-requests", "8", "--trust-remote-code"][..],
            2,
        ),
        (&["--custom-weight-loader", "evil.loader"][..], 0),
        (&["--tool-server", "demo"][..], 0),
        (&["--trust-request-chat-template"][..], 0),
        (&["--model-loader-extra-config", "{}"][..], 0),
        (&["--json-model-override-args", "{}"][..], 0),
        (&["--hicache-storage-backend", "dynamic"][..], 0),
        (&["--load-format", "remote"][..], 0),
        (&["--lora-paths", "a=org/lora"][..], 0),
    ] {
        let e = args_errors(&[], args);
        let field = format!("spec.extraArgs[{at}]");
        assert!(
            has(&e, &field, "may not be set by a server")
                && has(&e, &field, "servers.allowedFlags"),
            "{args:?}: {e:?}"
        );
    }
    // The admin's word lets a flag through.
    assert_eq!(
        args_errors(&["--trust-remote-code"], &["--trust-remote-code"]),
        Vec::<String>::new()
    );
    // Serving tunables are anyone's.
    assert_eq!(
        args_errors(
            &[],
            &[
                "--max-running-requests",
                "64",
                "--schedule-policy",
                "lpm",
                "--log-level",
                "debug"
            ]
        ),
        Vec::<String>::new()
    );
}

/// Paths come from the flag table, not from how a value looks: such a value is absolute,
/// normalized and under a model root, whoever allowed the flag; relative ones are refused.
#[test]
fn path_values_lie_under_the_model_roots() {
    let ok = args_errors(
        &["--tokenizer-path", "--download-dir"],
        &[
            "--chat-template",
            "/shared/models/t.jinja",
            "--tokenizer-path=/shared/models/tok",
            "--hf-chat-template-name",
            "chatml",
            "--completion-template",
            "deepseek-coder",
            "--download-dir",
            "/shared/models",
        ],
    );
    assert_eq!(ok, Vec::<String>::new());
    let e = args_errors(&[], &["--chat-template", "/etc/shadow"]);
    assert!(
        has(
            &e,
            "spec.extraArgs[1]",
            "\"/etc/shadow\" is not under a model root"
        ),
        "{e:?}"
    );
    // `etc/shadow` passed the old check (it did not look like a path); the unit ran in `/`.
    let e = args_errors(&[], &["--chat-template", "etc/shadow"]);
    assert!(has(&e, "spec.extraArgs[1]", "is a relative path"), "{e:?}");
    let e = args_errors(&["--download-dir"], &["--download-dir=/root/.ssh"]);
    assert!(
        has(&e, "spec.extraArgs[0]", "is not under a model root"),
        "{e:?}"
    );
    let e = args_errors(
        &["--download-dir"],
        &["--download-dir", "/shared/models/../../etc"],
    );
    assert!(has(&e, "spec.extraArgs[1]", "without '.', '..'"), "{e:?}");
    let e = args_errors(&["--tokenizer-path"], &["--tokenizer-path", "../../root"]);
    assert!(has(&e, "spec.extraArgs[1]", "is a relative path"), "{e:?}");
}

/// The admin's allowedFlags are real flags, never the agent's own.
#[test]
fn the_admin_s_allowed_flags_are_checked() {
    let e = policy_errors(|pol| {
        pol.allowed_flags = ["--tp", "--port", "--trust-remote-code"]
            .map(String::from)
            .to_vec()
    });
    let f = |j: usize| format!("spec.slices[0].servers.allowedFlags[{j}]");
    assert!(has(&e, &f(0), "is not an SGLang 0.5.23 flag"), "{e:?}");
    assert!(has(&e, &f(1), "set by the agent"), "{e:?}");
    assert!(!e.iter().any(|x| x.starts_with(&f(2))), "{e:?}");
}

/// Finding 2: any namespace could use any slice.
#[test]
fn a_namespace_not_listed_may_not_use_the_slice() {
    let e = server_errors(|s| s.metadata.namespace = Some("tenant-b".into()));
    assert_eq!(e, vec!["metadata.namespace: namespace \"tenant-b\" may not use slice \"inference\"; it admits InferenceServers of: default"]);
}

/// A slice without a policy admits no server (the safe default).
#[test]
fn a_slice_without_a_policy_admits_no_server() {
    let e = errors(|p| p.spec.slices[0].servers = None, |_| {});
    assert!(
        has(&e, "spec.partitionRef.slice", "admits no InferenceServers"),
        "{e:?}"
    );
}

/// Finding 1: `Host` placement ran the tenant's unit as root on the host.
#[test]
fn host_placement_needs_the_admins_consent_and_a_user() {
    let free = |p: &mut GpuPartition| p.spec.slices[0].consumer = None;
    let e = errors(free, |s| s.spec.unit.location = UnitLocation::Host);
    assert!(
        has(&e, "spec.unit.location", "does not allow units on the host"),
        "{e:?}"
    );
    // Allowed without a user: the partition itself is refused.
    let mut p = manifests().partitions[0].clone();
    p.spec.slices[0].consumer = None;
    let pol = p.spec.slices[0].servers.as_mut().unwrap();
    pol.allow_host_placement = true;
    pol.user = None;
    let pe = resolve_partition(&p, &twin().observe().unwrap(), "10de", "nvidia").unwrap_err();
    assert!(
        pe[0]
            .to_string()
            .contains("servers.user: allowHostPlacement needs a user"),
        "{pe:?}"
    );
    // Allowed, with a user: the unit runs as that user, sandboxed for the host.
    let dp = kpro6(|p| {
        p.spec.slices[0].consumer = None;
        let pol = p.spec.slices[0].servers.as_mut().unwrap();
        pol.allow_host_placement = true;
        pol.user = Some("sglang".into());
    });
    let d = resolve_server(&server(|s| s.spec.unit.location = UnitLocation::Host), &dp).unwrap();
    assert_eq!(d.runtime.user.as_deref(), Some("sglang"));
    assert!(d.runtime.on_host);
}

/// Finding 3: any valid unit name was accepted (`ssh`, `pve-cluster`).
#[test]
fn unit_names_are_the_agents_own_or_adopted() {
    for name in ["ssh", "pve-cluster", "-x"] {
        let e = server_errors(|s| s.spec.unit.name = name.into());
        assert!(has(&e, "spec.unit.name", ""), "{name}: {e:?}");
    }
    let e = server_errors(|s| s.spec.unit.name = "ssh".into());
    assert!(
        has(&e, "spec.unit.name", "outside the agent's unit names"),
        "{e:?}"
    );
    assert_eq!(
        server_errors(|s| s.spec.unit.name = "gpuplane-qwen".into()),
        Vec::<String>::new()
    );
}

/// The admin's own policy is checked: relative interpreters, bad namespaces, managed env.
#[test]
fn the_policy_itself_is_checked() {
    let mut p = manifests().partitions[0].clone();
    let pol = p.spec.slices[0].servers.as_mut().unwrap();
    pol.namespaces = vec!["Not_A_Label".into()];
    pol.interpreters = vec!["python3".into()];
    pol.model_roots = vec!["/a/../b".into()];
    pol.env.push(EnvVar {
        name: "CUDA_VISIBLE_DEVICES".into(),
        value: "0".into(),
    });
    let e: Vec<String> = resolve_partition(&p, &twin().observe().unwrap(), "10de", "nvidia")
        .unwrap_err()
        .iter()
        .map(|e| e.field.clone())
        .collect();
    assert_eq!(
        e,
        [
            "spec.slices[0].servers.namespaces[0]",
            "spec.slices[0].servers.interpreters[0]",
            "spec.slices[0].servers.modelRoots[0]",
            "spec.slices[0].servers.env[1].name",
        ]
    );
}

/// Finding 2: in a conflict the server later in namespace/name order lost, so a namespace
/// named `a...` could take over a running server. Now the older claim keeps the slice.
#[test]
fn in_a_conflict_the_older_claim_keeps_the_slice() {
    let dp = kpro6(|p| {
        p.spec.slices[0]
            .servers
            .as_mut()
            .unwrap()
            .namespaces
            .push("aaa".into())
    });
    let ts = |s: &str| Some(Time(s.parse().unwrap()));
    let running = server(|s| s.metadata.creation_timestamp = ts("2025-01-01T00:00:00Z"));
    let intruder = server(|s| {
        s.metadata.namespace = Some("aaa".into());
        s.spec.unit.name = "gpuplane-intruder".into();
        s.spec.listen.port = 30001;
        s.metadata.creation_timestamp = ts("2025-06-01T00:00:00Z");
    });
    // Given in name order (the intruder first), as the API lists them.
    let given = [intruder.clone(), running.clone()];
    let ordered = in_claim_order(&given);
    let resolved: Vec<_> = ordered
        .iter()
        .map(|s| resolve_server(s, &dp).unwrap())
        .collect();
    let e = check_servers_together(&resolved);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].resource, "InferenceServer/aaa/qwen35-122b");
    assert!(e[0]
        .message
        .contains("already runs InferenceServer/default/qwen35-122b"));
}
