//! The `gpuplane` command on the simulated reference host, as a user runs it.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn gpuplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuplane"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("gpuplane runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn condition<'a>(status: &'a Value, resource: &str, type_: &str) -> &'a Value {
    status["status"][resource]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("{resource} has no {type_} condition: {status}"))
}

const SERVER: &str = "InferenceServer/default/qwen35-122b";
const PARTITION: &str = "GpuPartition/kpro6";

#[test]
fn readme_first_command_converges_the_reference_split() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("after.yaml");
    let o = gpuplane(&["converge", "--save-host", saved.to_str().unwrap()]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}\n{}", stderr(&o));
    // The output says what it did and why, P2P included.
    for want in [
        "stop unit sglang-qwen.service on container 129",
        "stop container 129",
        "unbind 0000:81:00.0 from nvidia",
        "set PCI mapping pro6000-vm",
        "probe P2P correctness over 4 GPUs",
        "6 of 6 pairs returned corrupted data",
        "P2P disabled",
        "--tp-size 8 -> 4",
        "ready after",
        "Ready=True (ServerReady)",
        "P2PSafe=False (P2PCorruption)",
    ] {
        assert!(text.contains(want), "output lacks {want:?}:\n{text}");
    }
    // Check the resulting host as `gpuplane observe` shows it.
    let host = format!("sim:{}", saved.display());
    let o = gpuplane(&["observe", "--host", &host, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let st: Value = serde_json::from_slice(&o.stdout).unwrap();
    for a in [
        "0000:01:00.0",
        "0000:11:00.0",
        "0000:61:00.0",
        "0000:71:00.0",
    ] {
        assert_eq!(st["pciDevices"][a]["driver"], "nvidia", "{a}");
    }
    let numa1 = [
        "0000:81:00.0",
        "0000:91:00.0",
        "0000:e1:00.0",
        "0000:f1:00.0",
    ];
    for a in numa1 {
        assert_eq!(st["pciDevices"][a]["driver"], "vfio-pci", "{a}");
    }
    let mapped: Vec<&str> = st["pciMappings"]["pro6000-vm"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| {
            e["paths"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap())
        })
        .collect();
    assert_eq!(mapped, numa1);
    assert!(
        st["pciMappings"].get("pro6000").is_none(),
        "the old all-GPU mapping no longer hands out these GPUs"
    );
    let ct = &st["containers"]["129"];
    assert_eq!(ct["state"], "running");
    assert_eq!(ct["gpuMounts"]["minors"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(
        ct["gpuMounts"]["control"],
        serde_json::json!(["ctl", "uvm", "uvm-tools", "caps"])
    );
    let unit = st["units"]["lxc-129/sglang-qwen.service"]["file"]
        .as_str()
        .unwrap();
    for flag in [
        "--tp-size 4",
        "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
        "--disable-custom-all-reduce",
        "NCCL_P2P_DISABLE=1",
        "CUDA_VISIBLE_DEVICES=0,1,2,3",
    ] {
        assert!(unit.contains(flag), "unit lacks {flag}:\n{unit}");
    }
    // Converging again makes zero writes, and plan prints no steps.
    let o = gpuplane(&["converge", "--host", &host, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["writes"], 0);
    assert_eq!(condition(&r, SERVER, "Ready")["status"], "True");
    let o = gpuplane(&[
        "plan",
        "--host",
        &host,
        "-f",
        "examples/kpro6",
        "--output",
        "json",
    ]);
    let p: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(p["steps"], serde_json::json!([]));
    let o = gpuplane(&["plan", "--host", &host, "-f", "examples/kpro6"]);
    assert!(stdout(&o).contains("No changes"), "{}", stdout(&o));
}

#[test]
fn converge_json_reports_status_and_writes() {
    let o = gpuplane(&["converge", "-f", "examples/kpro6", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["writes"].as_u64().unwrap() > 10);
    assert_eq!(condition(&r, PARTITION, "Ready")["status"], "True");
    let p2p = condition(&r, SERVER, "P2PSafe");
    assert_eq!(p2p["status"], "False");
    assert_eq!(p2p["reason"], "P2PCorruption");
    assert!(p2p["message"]
        .as_str()
        .unwrap()
        .contains("0000:01:00.0<->0000:11:00.0"));
    let kinds: Vec<&str> = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    // The GPUs' identities are recorded first, while all are still on nvidia.
    assert_eq!(kinds.first(), Some(&"writeLedger"));
    assert_eq!(kinds.get(1), Some(&"stopUnit"));
    assert_eq!(kinds.last(), Some(&"waitReady"));
}

#[test]
fn p2p_enabled_on_the_corrupt_host_is_reported_as_startup_stalled() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo().join("examples/kpro6/server.yaml"))
        .unwrap()
        .replace("p2p: Auto", "p2p: Enabled")
        .replace("stallAfterSeconds: 120", "stallAfterSeconds: 60");
    std::fs::write(dir.path().join("server.yaml"), text).unwrap();
    std::fs::copy(
        repo().join("examples/kpro6/partition.yaml"),
        dir.path().join("partition.yaml"),
    )
    .unwrap();
    let o = converge_json(dir.path());
    assert_eq!(
        o.status.code(),
        Some(1),
        "a stalled server must fail the command"
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let ready = condition(&r, SERVER, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "StartupStalled");
    let msg = ready["message"].as_str().unwrap();
    assert!(
        msg.contains("phase Launching")
            && msg.contains("757")
            && msg.contains("Init torch distributed begin"),
        "{msg}"
    );
    // Reported within stallAfter + one poll.
    let wait = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "waitReady")
        .unwrap();
    let detail = wait["detail"].as_str().unwrap();
    let secs: u64 = detail
        .split(" for ")
        .nth(1)
        .unwrap()
        .trim_end_matches(" s")
        .parse()
        .unwrap();
    assert!((60..=65).contains(&secs), "{detail}");
}

#[test]
fn a_held_gpu_is_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host.yaml");
    let mut text = std::fs::read_to_string(repo().join("examples/hosts/kpro6.yaml")).unwrap();
    text.push_str("holders:\n  - address: \"0000:e1:00.0\"\n    pid: 4242\n    command: nvidia-persistenced\n");
    std::fs::write(&host, &text).unwrap();
    let saved = dir.path().join("after.yaml");
    let hs = format!("sim:{}", host.display());
    let o = gpuplane(&[
        "converge",
        "--host",
        &hs,
        "--output",
        "json",
        "--save-host",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["writes"], 0);
    let ready = condition(&r, PARTITION, "Ready");
    assert_eq!(ready["reason"], "GpuInUse");
    assert!(ready["message"]
        .as_str()
        .unwrap()
        .contains("pid 4242 (nvidia-persistenced)"));
    let before = gpuplane(&["observe", "--host", &hs]);
    let after = gpuplane(&["observe", "--host", &format!("sim:{}", saved.display())]);
    assert_eq!(
        stdout(&before),
        stdout(&after),
        "a refused converge changes nothing"
    );
}

#[test]
fn dry_run_writes_nothing() {
    let o = gpuplane(&["converge", "--dry-run", "--output", "json"]);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["writes"], 0);
    assert_eq!(r["converged"], false);
}

/// `gpuplane converge -f DIR --output json` on the embedded host.
fn converge_json(dir: &std::path::Path) -> std::process::Output {
    gpuplane(&["converge", "-f", dir.to_str().unwrap(), "--output", "json"])
}

/// Every file in examples/invalid is a realistic mistake; each must be refused with exit code 2,
/// nothing changed, and a message naming the field and the fix.
#[test]
fn invalid_manifests_are_rejected_with_the_field_and_the_fix() {
    let expect: &[(&str, &str, &str)] = &[
        (
            "abbreviated-extra-arg",
            "spec.extraArgs[0]",
            "full names only",
        ),
        (
            "address-not-on-host",
            "spec.slices[1].gpus.addresses[0]",
            "GPUs here: 0000:01:00.0",
        ),
        (
            "draft-tokens-not-steps-plus-one",
            "spec.speculative.numDraftTokens",
            "set numDraftTokens: 4",
        ),
        ("gpu-in-two-slices", "spec.slices[1].gpus", "one slice only"),
        ("invalid-unit-name", "spec.unit.name", "only ASCII letters"),
        (
            "lxc-consumer-on-vfio",
            "spec.slices[0].driver",
            "needs driver nvidia",
        ),
        ("missing-model-path", "spec.model.path", "is required"),
        (
            "nccl-p2p-in-env",
            "spec.env[0].name",
            "set spec.p2p: Disabled instead",
        ),
        (
            "numa-node-without-gpus",
            "spec.slices[1].gpus.numaNode",
            "GPUs on NUMA nodes {0, 1}",
        ),
        (
            "reasoning-parser-typo",
            "spec.reasoningParser",
            "qwen3-thinking",
        ),
        (
            "server-on-vfio-slice",
            "spec.partitionRef.slice",
            "needs a slice with driver nvidia",
        ),
        (
            "topk-without-steps",
            "spec.speculative.numSteps",
            "set numSteps",
        ),
        (
            "tp-larger-than-slice",
            "spec.tensorParallelSize",
            "lower it to at most 4",
        ),
        (
            "two-selectors",
            "spec.slices[0].gpus",
            "exactly one of addresses, numaNode, count, uuids, serials or slots",
        ),
        (
            "unknown-slice",
            "spec.partitionRef.slice",
            "its slices are: inference, confidential-vm",
        ),
        (
            "unknown-speculative-algorithm",
            "spec.speculative.algorithm",
            "NEXTN is MTP",
        ),
        (
            "newline-in-served-name",
            "spec.model.servedName",
            "cannot be written into a systemd unit",
        ),
        (
            "extra-arg-without-value",
            "spec.extraArgs[0]",
            "takes exactly one value",
        ),
        (
            "value-after-switch",
            "spec.extraArgs[1]",
            "a switch that takes no value",
        ),
        (
            "env-set-twice",
            "spec.env[1].name",
            "also set by spec.env[0]",
        ),
        (
            "partition-ref-unknown",
            "spec.partitionRef.name",
            "not in the input (partitions: kpro6)",
        ),
        (
            "empty-address-list",
            "spec.slices[1].gpus.addresses",
            "at least one",
        ),
        (
            "lxc-container-missing",
            "spec.slices[0].consumer.lxc.vmid",
            "container 192 does not exist on this host",
        ),
        ("misspelt-field", "spec.enviroment", "unknown field"),
        (
            "port-out-of-range",
            "spec.listen.port",
            "greater than the maximum of 65535",
        ),
        (
            "driver-typo",
            "spec.slices[1].driver",
            "is not one of \"nvidia\" or \"vfio-pci\"",
        ),
        (
            "name-not-dns",
            "metadata.name",
            "not a valid Kubernetes name",
        ),
        (
            "listen-host-with-port",
            "spec.listen.host",
            "the port goes in spec.listen.port",
        ),
        (
            "relative-model-path",
            "spec.model.path",
            "neither an absolute path",
        ),
        // Issue 23: SGLang's own flags and the environment are allow-lists.
        (
            "forward-hooks",
            "spec.extraArgs[0]",
            "--forward-hooks may not be set by a server: imports a module",
        ),
        (
            "custom-logit-processor",
            "spec.extraArgs[0]",
            "--enable-custom-logit-processor may not be set by a server",
        ),
        (
            "config-file-in-extra-args",
            "spec.extraArgs[0]",
            "--config may not be set by a server: merges arguments",
        ),
        (
            "hub-tokenizer-with-remote-code",
            "spec.extraArgs[2]",
            "--trust-remote-code may not be set by a server: runs Python code",
        ),
        (
            "env-nccl-net-plugin",
            "spec.env[3].name",
            "NCCL_NET_PLUGIN is not among the variables a server may set",
        ),
        (
            "env-hf-endpoint",
            "spec.env[3].name",
            "HF_ENDPOINT is not among the variables a server may set",
        ),
        (
            "env-xdg-cache-home",
            "spec.env[3].name",
            "servers.allowedEnv",
        ),
        // Issue 37: a pool and what the agent reads from a partition's labels and annotations.
        (
            "pool-max-unavailable-over-100",
            "GpuNodePool/inference-fleet: spec.maxUnavailable",
            r#""150%" is not a count ≥ 0 or a percentage 0%–100%; write e.g. 1 or "25%""#,
        ),
        (
            "pool-label-not-a-pool-name",
            r#"metadata.labels["gpuplane.dev/pool"]"#,
            "\"Inference_Fleet\" cannot be the name of a GpuNodePool",
        ),
        (
            "accept-layout-not-a-hash",
            r#"metadata.annotations["gpuplane.dev/accept-layout"]"#,
            "copy the hash from the partition's stall message",
        ),
        (
            "accept-health-not-a-hash",
            r#"metadata.annotations["gpuplane.dev/accept-health"]"#,
            "copy status.gpus[].quarantine.hash of the GPU to return to its slice",
        ),
        (
            "allow-unverified-gpus-not-a-boolean",
            r#"metadata.annotations["gpuplane.dev/allow-unverified-gpus"]"#,
            r#""yes" is neither "true" nor "false""#,
        ),
        // Issue 37: kernel arguments are an allow-list; none switches off what the partition's
        // confidential VM needs; a refusal says the form expected, not a regular expression.
        (
            "kernel-arg-disables-snp",
            "spec.host.kernelArgs.present[0]",
            "the confidential VM 200 of spec.slices[1] (\"confidential-vm\"; its config has amd-sev: type=snp) could not start; remove it from present",
        ),
        (
            "kernel-arg-runs-a-program",
            "spec.host.kernelArgs.allowKeys[0]",
            "the agent never writes it, not even with allowKeys",
        ),
        (
            "kernel-arg-not-managed",
            "spec.host.kernelArgs.present[1]",
            "or list console in spec.host.kernelArgs.allowKeys",
        ),
        (
            "maintenance-window-not-hhmm",
            "spec.host.maintenanceWindow.start",
            "(e.g. \"02:00\", quoted in YAML)",
        ),
    ];
    let files: Vec<String> = std::fs::read_dir(repo().join("examples/invalid"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".yaml")
                .to_string()
        })
        .collect();
    assert!(files.len() >= 10);
    for f in &files {
        assert!(
            expect.iter().any(|(n, _, _)| n == f),
            "examples/invalid/{f}.yaml has no expectation here"
        );
    }
    for (name, field, fix) in expect {
        let path = format!("examples/invalid/{name}.yaml");
        let o = gpuplane(&["converge", "-f", &path, "--output", "json"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(o.stdout.is_empty(), "{name}: nothing may be applied");
        assert!(
            err.contains("InvalidSpec") && err.contains(field) && err.contains(fix),
            "{name}: {err}"
        );
    }
}

/// A pool's manifest beside its members (a directory as applied to a cluster) is read and
/// checked, not refused as an unknown kind: valid, the host converges and a note says that this
/// command asks the pool for no slot; invalid, nothing is touched and the message names the
/// pool's field and the fix.
#[test]
fn a_pool_beside_its_members_is_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let partition = std::fs::read_to_string(repo().join("examples/kpro6/partition.yaml"))
        .unwrap()
        .replace(
            "    gpuplane.dev/node: kpro6",
            "    gpuplane.dev/pool: inference-fleet\n    gpuplane.dev/node: kpro6",
        );
    std::fs::write(dir.path().join("partition.yaml"), partition).unwrap();
    std::fs::copy(
        repo().join("examples/kpro6/server.yaml"),
        dir.path().join("server.yaml"),
    )
    .unwrap();
    let pool = |max: &str| {
        format!("apiVersion: gpuplane.dev/v1alpha1\nkind: GpuNodePool\nmetadata:\n  name: inference-fleet\nspec:\n  maxUnavailable: {max}\n")
    };
    std::fs::write(dir.path().join("pool.yaml"), pool(r#""25%""#)).unwrap();
    let o = converge_json(dir.path());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["converged"], true, "{r}");
    assert!(
        err.contains("note: GpuPartition/kpro6 is a member of GpuNodePool/inference-fleet (read from the input and checked)")
            && err.contains("asks for none"),
        "{err}"
    );
    for (bad, says) in [
        ("-1", "-1 is not a count ≥ 0"),
        (r#""abc""#, r#""abc" is not a count ≥ 0"#),
        (
            r#""25""#,
            r#"a count is written without quotes; write 25 or "25%""#,
        ),
        ("1.5", "spec.maxUnavailable"),
    ] {
        std::fs::write(dir.path().join("pool.yaml"), pool(bad)).unwrap();
        let o = gpuplane(&["plan", "-f", dir.path().to_str().unwrap()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.contains("GpuNodePool/inference-fleet") && err.contains(says),
            "{bad}: {err}"
        );
    }
    // "0%" is a valid budget (it freezes the members' disruptions, as 0 does).
    std::fs::write(dir.path().join("pool.yaml"), pool(r#""0%""#)).unwrap();
    let o = gpuplane(&["plan", "-f", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// The same resource in two files is refused, naming both, before anything is touched.
#[test]
fn a_resource_defined_twice_names_both_files() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["partition.yaml", "server.yaml"] {
        std::fs::copy(repo().join("examples/kpro6").join(f), dir.path().join(f)).unwrap();
    }
    std::fs::copy(
        repo().join("examples/kpro6/server.yaml"),
        dir.path().join("server-copy.yaml"),
    )
    .unwrap();
    let o = converge_json(dir.path());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(o.stdout.is_empty(), "nothing may be applied");
    assert!(
        err.contains("InferenceServer/default/qwen35-122b is defined twice")
            && err.contains("server-copy.yaml")
            && err.contains("/server.yaml"),
        "{err}"
    );
}

#[test]
fn manifest_problems_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.yaml");
    std::fs::write(&f, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n").unwrap();
    let o = gpuplane(&["plan", "-f", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("document 1") && stderr(&o).contains("gpuplane.dev/v1alpha1"),
        "{}",
        stderr(&o)
    );
    let o = gpuplane(&["plan", "--host", "sim:/nonexistent.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent.yaml"));
    // Issue 37: `run` on a read-only copy (its clock never moves) is refused, naming sim-rw:.
    let host = repo().join("examples/hosts/kpro6.yaml");
    let o = gpuplane(&[
        "run",
        "--node-name",
        "kpro6",
        "--host",
        &format!("sim:{}", host.display()),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("--host sim-rw:{}", host.display())),
        "{}",
        stderr(&o)
    );
}

/// Following the twin's own instructions (`--host sim:examples/hosts/kpro6.yaml`) never rewrites
/// the file: the writes go to a copy in memory and the command says so. `sim-rw:FILE` is the
/// explicit choice that makes the file the host.
#[test]
fn a_sim_host_file_is_read_only_unless_asked_and_the_embedded_twin_is_the_start_state() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("kpro6.yaml");
    let original = std::fs::read(repo().join("examples/hosts/kpro6.yaml")).unwrap();
    std::fs::write(&host, &original).unwrap();
    let ro = format!("sim:{}", host.display());
    let o = gpuplane(&["converge", "--host", &ro, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    // The reference split from the hand-made state: the embedded default and the file agree.
    assert_eq!(
        r["writes"], 28,
        "the example is the un-converged reference host (27 writes and the GPU ledger)"
    );
    assert_eq!(
        std::fs::read(&host).unwrap(),
        original,
        "the file is unchanged"
    );
    assert!(
        stderr(&o).contains("was not changed") && stderr(&o).contains("sim-rw:"),
        "{}",
        stderr(&o)
    );
    let embedded = gpuplane(&["converge", "--output", "json"]);
    let e: Value = serde_json::from_slice(&embedded.stdout).unwrap();
    assert_eq!(e["writes"], 28, "the embedded twin is the start state too");
    // sim-rw: the file is the host; a second run makes zero writes.
    let rw = format!("sim-rw:{}", host.display());
    let o = gpuplane(&["converge", "--host", &rw, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_ne!(std::fs::read(&host).unwrap(), original, "written");
    assert!(!stderr(&o).contains("was not changed"), "{}", stderr(&o));
    let again = gpuplane(&["converge", "--host", &rw, "--output", "json"]);
    let a: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(a["writes"], 0);
}

/// A failing smoke test is a failed converge: exit 1 with `SmokeTested=False`, so a CI job that
/// runs `converge` sees it; the same server with a passing smoke test exits 0.
#[test]
fn a_failing_smoke_test_fails_the_converge() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::copy(
        repo().join("examples/kpro6/partition.yaml"),
        m.join("partition.yaml"),
    )
    .unwrap();
    let mut server = std::fs::read_to_string(repo().join("examples/kpro6/server.yaml")).unwrap();
    server.push_str("  smokeTest:\n    requests:\n      - name: tools\n        prompt: \"What is the weather in Paris?\"\n        tools: [{name: get_weather, description: \"current weather of a city\", parameters: [city]}]\n        expect: {toolCall: get_weather}\n");
    std::fs::write(m.join("server.yaml"), server).unwrap();
    let original = std::fs::read_to_string(repo().join("examples/hosts/kpro6.yaml")).unwrap();
    for (no_tool_call, want_rc, want) in [(false, 0, "True"), (true, 1, "False")] {
        let host = dir.path().join(format!("host-{no_tool_call}.yaml"));
        let text = if no_tool_call {
            original.replace("behaviour:\n", "behaviour:\n  smokeNoToolCall: true\n")
        } else {
            original.clone()
        };
        std::fs::write(&host, text).unwrap();
        let o = gpuplane(&[
            "converge",
            "-f",
            m.to_str().unwrap(),
            "--host",
            &format!("sim:{}", host.display()),
            "--output",
            "json",
        ]);
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        let smoke = condition(&r, SERVER, "SmokeTested");
        assert_eq!(smoke["status"], want, "{smoke}");
        assert_eq!(o.status.code(), Some(want_rc), "{smoke}");
    }
}

/// Issue 22: files carry no creation time; a second server added on the same slice in a file
/// that sorts first is the newcomer: the refusal names it, never the server already on the host.
#[test]
fn a_conflict_in_files_blames_the_newcomer_not_the_server_on_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m");
    std::fs::create_dir_all(&m).unwrap();
    for f in ["partition.yaml", "server.yaml"] {
        std::fs::copy(repo().join("examples/kpro6").join(f), m.join(f)).unwrap();
    }
    let reference = std::fs::read_to_string(m.join("server.yaml")).unwrap();
    let newcomer = reference
        .replace("name: qwen35-122b", "name: another")
        .replace("name: sglang-qwen", "name: gpuplane-sglang-b")
        .replace("port: 30000", "port: 30001");
    std::fs::write(m.join("a-server-b.yaml"), newcomer).unwrap();
    let o = gpuplane(&["plan", "-f", m.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("InferenceServer/default/another: spec.partitionRef.slice"),
        "{e}"
    );
    assert!(
        !e.contains("InferenceServer/default/qwen35-122b: spec.partitionRef.slice"),
        "{e}"
    );
}

/// The reference manifests in `dir/manifests`, the partition's `spec.health` set to `health`
/// (a YAML flow mapping); returns the directory.
fn manifests_with_health(dir: &std::path::Path, health: &str) -> std::path::PathBuf {
    let m = dir.join("manifests");
    std::fs::create_dir_all(&m).unwrap();
    for f in ["partition.yaml", "server.yaml"] {
        let mut t = std::fs::read_to_string(repo().join("examples/kpro6").join(f)).unwrap();
        if f == "partition.yaml" {
            t = t.replace(
                "  deletionPolicy: Retain\n",
                &format!("  deletionPolicy: Retain\n  health: {health}\n"),
            );
            assert!(
                t.contains("health: "),
                "the reference partition changed its shape"
            );
        }
        std::fs::write(m.join(f), t).unwrap();
    }
    m
}

/// One sick GPU among eight on the twin (issue 40): an uncorrectable ECC error's Xid on one, a
/// stream of correctable PCIe errors at another's port, an application's Xid on a third. Each
/// is judged by its own evidence, the partition's `GpusHealthy` names the worst first, the
/// others stay Healthy with nothing to say, and under `spec.health.quarantine: Never` the
/// converge itself goes on untouched (health is reported only).
#[test]
fn one_sick_gpu_is_named_and_the_others_stay_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifests_with_health(dir.path(), "{quarantine: Never}");
    let host = dir.path().join("host.yaml");
    let text = std::fs::read_to_string(repo().join("examples/hosts/kpro6.yaml")).unwrap();
    let mut doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    for d in doc["pciDevices"].as_sequence_mut().unwrap() {
        if d["address"] == "0000:61:00.0" {
            d["health"] = serde_yaml::from_str(
                "port: {address: \"0000:60:01.1\", aer: {correctable: 250, named: {\"correctable: Receiver Error\": 250}}}",
            )
            .unwrap();
        }
    }
    doc["kernelLog"] = serde_yaml::from_str(
        r#"
- "NVRM: Xid (PCI:0000:e1:00): 48, pid=4242, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."
- "NVRM: Xid (PCI:0000:01:00): 13, pid=4243, name=python3, Graphics Exception: ESR 0x505648=0x0"
"#,
    )
    .unwrap();
    std::fs::write(&host, serde_yaml::to_string(&doc).unwrap()).unwrap();
    let hs = format!("sim:{}", host.display());
    let o = gpuplane(&[
        "converge",
        "--host",
        &hs,
        "-f",
        m.to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let gpus = r["status"][PARTITION]["gpus"].as_array().unwrap();
    let row = |a: &str| gpus.iter().find(|g| g["address"] == a).unwrap();
    let e1 = row("0000:e1:00.0");
    assert!(e1["quarantine"].is_null(), "{e1}");
    assert_eq!(
        (e1["health"].as_str(), e1["repair"].as_str()),
        (Some("Unhealthy"), Some("ResetGpu"))
    );
    let ev = e1["evidence"][0].as_str().unwrap();
    assert!(
        ev.starts_with("Xid 48 ROBUST_CHANNEL_GPU_ECC_DBE (needs a GPU reset): NVRM: Xid"),
        "{ev}"
    );
    let g61 = row("0000:61:00.0");
    assert_eq!(g61["health"], "Suspect");
    assert_eq!(
        g61["evidence"][0],
        "250 correctable PCIe errors at its port 0000:60:01.1 (Suspect from 100) (Receiver Error 250)"
    );
    let g01 = row("0000:01:00.0");
    assert_eq!(
        g01["health"], "Healthy",
        "an application's Xid is the application's"
    );
    assert!(
        g01["evidence"][0].as_str().unwrap().starts_with("Xid 13 "),
        "{g01}"
    );
    let quiet: Vec<&Value> = gpus.iter().filter(|g| g["evidence"].is_null()).collect();
    assert_eq!(
        quiet.len(),
        5,
        "the five other GPUs have nothing to say: {gpus:?}"
    );
    assert!(quiet.iter().all(|g| g["health"] == "Healthy"));

    let c = condition(&r, PARTITION, "GpusHealthy");
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("GpuUnhealthy"))
    );
    let m = c["message"].as_str().unwrap();
    assert!(m.starts_with("0000:e1:00.0 (slice "), "{m}");
    assert!(
        m.contains("; 0000:61:00.0 (slice ") && m.contains(" Suspect: 250 correctable"),
        "{m}"
    );
    assert!(!m.contains("0000:01:00.0"), "{m}");
    assert_eq!(
        condition(&r, PARTITION, "Ready")["status"],
        "True",
        "health blocks nothing"
    );
}

/// The quarantine at the CLI's door (issue 40): on the converged twin, the NVIDIA driver logs an
/// uncorrectable ECC error (Xid 48, "reset the GPU") for one GPU of the container slice. One
/// converge takes it out of its slice, stops only the one server that uses it and its
/// container (which restarts without that device node), resets that GPU alone once nothing
/// uses it, proves it (it answers, no new fault) and gives it back: the server serves again on
/// its four GPUs, the VM slice is never touched, and the ledger remembers the reset.
#[test]
fn one_sick_gpu_costs_its_one_consumer_a_reset_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("converged.yaml");
    let o = gpuplane(&["converge", "--save-host", saved.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut text = std::fs::read_to_string(&saved).unwrap();
    assert!(
        !text.contains("kernelLog:"),
        "the twin has no kernel log yet"
    );
    text.push_str("kernelLog:\n- \"NVRM: Xid (PCI:0000:11:00): 48, pid=4242, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.\"\n");
    std::fs::write(&saved, text).unwrap();
    let hs = format!("sim-rw:{}", saved.display());
    let o = gpuplane(&["converge", "--host", &hs, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let steps: Vec<String> = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap_or_default().to_string())
        .collect();
    let kinds: Vec<&str> = r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "writeLedger",
            "stopUnit",
            "stopContainer",
            "setContainerGpus",
            "resetGpu",
            "writeLedger",
            "setContainerGpus",
            "startContainer",
            "startUnit",
            "waitReady"
        ],
        "{steps:?}"
    );
    let why = |i: usize| r["steps"][i]["why"].as_str().unwrap().to_string();
    assert!(
        why(0).contains("quarantined (Unhealthy: Xid 48 ROBUST_CHANNEL_GPU_ECC_DBE"),
        "{}",
        why(0)
    );
    assert!(
        why(1).contains("GPU 0000:11:00.0 of slice inference is quarantined"),
        "{}",
        why(1)
    );
    assert!(why(5).contains("proved after its reset"), "{}", why(5));
    assert_eq!(condition(&r, SERVER, "Ready")["status"], "True");
    let row = r["status"][PARTITION]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["address"] == "0000:11:00.0")
        .unwrap()
        .clone();
    assert_eq!(row["health"], "Healthy", "{row}");
    assert!(
        row["evidence"][0]
            .as_str()
            .unwrap()
            .starts_with("evidence accepted ("),
        "{row}"
    );
    let c = condition(&r, PARTITION, "GpusHealthy");
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some("GpusHealthy"))
    );
    // Settled: the same evidence, already proved, changes nothing.
    let o = gpuplane(&["converge", "--host", &hs, "--output", "json"]);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["writes"], 0, "{}", stdout(&o));
}
