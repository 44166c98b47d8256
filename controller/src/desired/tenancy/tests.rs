//! The tenant escapes of issue 11, each refused with the field and the reason; the admin's
//! policy checked itself; the older claim keeping its slice.

use super::{denied_env, under};
use crate::desired::{
    check_servers_together, in_claim_order, resolve_partition, resolve_server, DesiredPartition,
};
use crate::host::Host;
use crate::testutil::{manifests, twin};
use gpuplane_crds::{EnvVar, GpuPartition, InferenceServer, UnitLocation};
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
                "may not be set by a server"
            ),
            "{e:?}"
        );
    }
    assert!(denied_env("PYTHONSTARTUP").is_some() && denied_env("LD_AUDIT").is_some());
    assert!(denied_env("NCCL_PROTO").is_none() && denied_env("OMP_NUM_THREADS").is_none());
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
        has(&e, "spec.env[3].name", "may not be set by a server"),
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

/// Paths in extraArgs are confined to the model roots too; hub code is never trusted.
#[test]
fn paths_in_extra_args_lie_under_the_model_roots() {
    let args = |a: &[&str]| {
        let a: Vec<String> = a.iter().map(|x| x.to_string()).collect();
        server_errors(move |s| s.spec.extra_args = a)
    };
    // Inside the roots, or not a path at all: fine.
    let ok = args(&[
        "--chat-template",
        "/shared/models/t.jinja",
        "--tokenizer-path=/shared/models/tok",
        "--lora-paths",
        "a=/shared/models/lora-a",
        "--hf-chat-template-name",
        "chatml",
    ]);
    assert_eq!(ok, Vec::<String>::new());
    let e = args(&["--chat-template", "/etc/shadow"]);
    assert!(
        has(
            &e,
            "spec.extraArgs[1]",
            "\"/etc/shadow\" is not under a model root"
        ),
        "{e:?}"
    );
    let e = args(&["--download-dir=/root/.ssh"]);
    assert!(
        has(&e, "spec.extraArgs[0]", "is not under a model root"),
        "{e:?}"
    );
    let e = args(&["--lora-paths", "a=/shared/models/../../etc"]);
    assert!(
        has(&e, "spec.extraArgs[1]", "is not under a model root"),
        "{e:?}"
    );
    let e = args(&["--tokenizer-path", "../../root"]);
    assert!(has(&e, "spec.extraArgs[1]", "is a relative path"), "{e:?}");
    // Remote code: only from a model under the roots.
    assert_eq!(args(&["--trust-remote-code"]), Vec::<String>::new());
    let e = errors(
        |p| p.spec.slices[0].servers.as_mut().unwrap().allow_hub_models = true,
        |s| {
            s.spec.model.path = "Qwen/Qwen3-8B".into();
            s.spec.extra_args = vec!["--trust-remote-code".into()];
        },
    );
    assert!(
        has(
            &e,
            "spec.extraArgs[0]",
            "would run code fetched from the hub"
        ),
        "{e:?}"
    );
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
    p.spec.slices[0]
        .servers
        .as_mut()
        .unwrap()
        .allow_host_placement = true;
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
