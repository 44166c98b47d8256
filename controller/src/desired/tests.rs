//! Pins what `resolve_partition` and `resolve_server` report, and in which order.

use super::{resolve_partition, resolve_server, DesiredPartition, ResolvedConsumer, ResolvedSlice};
use crate::host::model::{HostState, Location, UnitRef};
use crate::host::Host;
use crate::manifests::Manifests;
use crate::testutil::{manifests, twin};
use gpuplane_crds::{GpuDriver, IommuModeExpectation};

/// The twin's observed state.
fn host() -> HostState {
    twin().observe().expect("observe")
}

/// The one resource of kind `GpuPartition` or `InferenceServer` in `yaml`, typed but not
/// checked against the schema: these tests reach the resolver with what the schema would
/// refuse (the resolver is the last line for objects that bypassed it).
fn parse(yaml: &str) -> Manifests {
    let v: serde_yaml::Value = serde_yaml::from_str(yaml).expect("YAML");
    let mut m = Manifests::default();
    match v["kind"].as_str() {
        Some("GpuPartition") => m.partitions.push(serde_yaml::from_value(v).expect("typed")),
        _ => {
            let mut s: gpuplane_crds::InferenceServer = serde_yaml::from_value(v).expect("typed");
            s.metadata.namespace.get_or_insert_with(|| "default".into());
            m.servers.push(s);
        }
    }
    m
}

/// The reference partition, resolved on the twin.
fn kpro6() -> DesiredPartition {
    resolve_partition(&manifests().partitions[0], &host(), "10de", "nvidia").expect("valid")
}

/// A resolved slice.
fn slice(
    name: &str,
    gpus: &[&str],
    driver: GpuDriver,
    consumer: Option<ResolvedConsumer>,
) -> ResolvedSlice {
    ResolvedSlice {
        name: name.into(),
        gpus: gpus.iter().map(|a| format!("0000:{a}")).collect(),
        driver,
        consumer,
        servers: None,
    }
}

/// The errors of a partition, one `Display` line each.
fn partition_errors(yaml: &str) -> Vec<String> {
    let m = parse(yaml);
    let errs = resolve_partition(&m.partitions[0], &host(), "10de", "nvidia").expect_err("invalid");
    errs.iter().map(|e| e.to_string()).collect()
}

/// The errors of a server on the reference partition, one `Display` line each.
fn server_errors(yaml: &str) -> Vec<String> {
    let m = parse(yaml);
    let errs = resolve_server(&m.servers[0], &kpro6()).expect_err("invalid");
    errs.iter().map(|e| e.to_string()).collect()
}

const HEAD_P: &str =
    "apiVersion: gpuplane.dev/v1alpha1\nkind: GpuPartition\nmetadata:\n  name: bad\n";
const HEAD_S: &str =
    "apiVersion: gpuplane.dev/v1alpha1\nkind: InferenceServer\nmetadata:\n  name: bad\n";

#[test]
fn empty_partition_names_node_and_slices() {
    let got = partition_errors(&format!("{HEAD_P}spec:\n  nodeName: ''\n  slices: []\n"));
    assert_eq!(
        got,
        vec![
            "GpuPartition/bad: spec.nodeName: must name the host this partition is for",
            "GpuPartition/bad: spec.slices: needs at least one slice"
        ]
    );
}

#[test]
fn partition_errors_keep_their_order() {
    let got = partition_errors(&format!(
        r#"{HEAD_P}spec:
  nodeName: ''
  slices:
    - name: Bad_Name
      gpus:
        addresses: ["01:00.0", "0000:01:00.0", "zz", "0000:02:00.0", "0000:11:00.0"]
      driver: vfio-pci
      consumer:
        lxc:
          vmid: 129
    - name: Bad_Name
      gpus:
        numaNode: 0
        count: 2
      driver: nvidia
    - name: vm1
      gpus:
        numaNode: 0
      driver: nvidia
      consumer:
        vm:
          vmid: 129
          pciMapping: "1x"
    - name: vm2
      gpus:
        numaNode: 5
      driver: vfio-pci
      consumer:
        vm:
          vmid: 300
          pciMapping: "1x"
    - name: both
      gpus:
        count: 10
      driver: nvidia
      consumer:
        lxc:
          vmid: 1
        vm:
          vmid: 2
          pciMapping: m2
    - name: vm1
      gpus:
        count: 1
      driver: vfio-pci
      consumer:
        vm:
          vmid: 300
          pciMapping: m3
"#
    ));
    assert_eq!(got, vec![
        "GpuPartition/bad: spec.nodeName: must name the host this partition is for",
        "GpuPartition/bad: spec.slices[0].name: \"Bad_Name\" is not a DNS label (lower-case letters, digits and '-', at most 63)",
        "GpuPartition/bad: spec.slices[0].driver: an LXC consumer (container 129) needs driver nvidia; vfio-pci GPUs can only be passed to a VM",
        "GpuPartition/bad: spec.slices[0].gpus.addresses[1]: 0000:01:00.0 is listed twice",
        "GpuPartition/bad: spec.slices[0].gpus.addresses[2]: \"zz\" is not a PCI address; write it as 0000:01:00.0 (lower-case hex)",
        "GpuPartition/bad: spec.slices[0].gpus.addresses[3]: no GPU at 0000:02:00.0 on this host; GPUs here: 0000:01:00.0, 0000:11:00.0, 0000:61:00.0, 0000:71:00.0, 0000:81:00.0, 0000:91:00.0, 0000:e1:00.0, 0000:f1:00.0",
        "GpuPartition/bad: spec.slices[1].name: \"Bad_Name\" is not a DNS label (lower-case letters, digits and '-', at most 63)",
        "GpuPartition/bad: spec.slices[1].name: slice name \"Bad_Name\" is used twice; slice names must be unique",
        "GpuPartition/bad: spec.slices[1].gpus: set exactly one of addresses, numaNode, count, uuids, serials or slots (this slice sets numaNode and count)",
        "GpuPartition/bad: spec.slices[2].driver: a VM consumer (VM 129) needs driver vfio-pci",
        "GpuPartition/bad: spec.slices[2].consumer.vm.pciMapping: \"1x\" is not a valid Proxmox mapping ID (letter first, then letters, digits, '-' or '_', 2 to 40 characters)",
        "GpuPartition/bad: spec.slices[2].consumer.vm.vmid: vmid 129 is already the consumer of slice \"Bad_Name\"",
        "GpuPartition/bad: spec.slices[2].gpus: GPU 0000:01:00.0 is also in slice \"Bad_Name\"; a GPU may belong to one slice only",
        "GpuPartition/bad: spec.slices[2].gpus: GPU 0000:11:00.0 is also in slice \"Bad_Name\"; a GPU may belong to one slice only",
        "GpuPartition/bad: spec.slices[3].consumer.vm.pciMapping: \"1x\" is not a valid Proxmox mapping ID (letter first, then letters, digits, '-' or '_', 2 to 40 characters)",
        "GpuPartition/bad: spec.slices[3].consumer.vm.pciMapping: mapping \"1x\" is already used by slice \"vm1\"; each slice needs its own mapping",
        "GpuPartition/bad: spec.slices[3].gpus.numaNode: no GPU on NUMA node 5; this host has GPUs on NUMA nodes {0, 1}",
        "GpuPartition/bad: spec.slices[4].consumer: set exactly one of lxc or vm (or omit consumer)",
        "GpuPartition/bad: spec.slices[5].name: slice name \"vm1\" is used twice; slice names must be unique",
        "GpuPartition/bad: spec.slices[5].consumer.vm.vmid: vmid 300 is already the consumer of slice \"vm2\"",
        "GpuPartition/bad: spec.slices[4].gpus.count: wants 10 GPUs but only 2 are not claimed by other slices",
    ]);
}

#[test]
fn count_selectors_take_what_explicit_selectors_leave() {
    let m = parse(&format!(
        r#"{HEAD_P}spec:
  nodeName: kpro6
  slices:
    - name: vm
      gpus:
        count: 2
      driver: vfio-pci
      consumer:
        vm:
          vmid: 200
          pciMapping: pro6000-vm
    - name: ct
      gpus:
        count: 3
      driver: nvidia
      consumer:
        lxc:
          vmid: 129
    - name: fixed
      gpus:
        addresses: ["0000:f1:00.0", "e1:00.0"]
      driver: nvidia
"#
    ));
    let got = resolve_partition(&m.partitions[0], &host(), "10de", "bochs-drm").expect("valid");
    let vm = ResolvedConsumer::Vm {
        vmid: 200,
        mapping: "pro6000-vm".into(),
    };
    assert_eq!(
        got,
        DesiredPartition {
            name: "bad".into(),
            node_name: "kpro6".into(),
            slices: vec![
                slice("vm", &["01:00.0", "11:00.0"], GpuDriver::VfioPci, Some(vm)),
                slice(
                    "ct",
                    &["61:00.0", "71:00.0", "81:00.0"],
                    GpuDriver::Nvidia,
                    Some(ResolvedConsumer::Lxc(129)),
                ),
                slice("fixed", &["e1:00.0", "f1:00.0"], GpuDriver::Nvidia, None),
            ],
            iommu: IommuModeExpectation::Any,
            host_driver: "bochs-drm".into(),
            kernel_args: None,
            reboot: Default::default(),
            layout: got.layout.clone(),
        }
    );
}

#[test]
fn the_reference_partition_resolves() {
    let vm = ResolvedConsumer::Vm {
        vmid: 200,
        mapping: "pro6000-vm".into(),
    };
    let mut inference = slice(
        "inference",
        &["01:00.0", "11:00.0", "61:00.0", "71:00.0"],
        GpuDriver::Nvidia,
        Some(ResolvedConsumer::Lxc(129)),
    );
    inference.servers = manifests().partitions[0].spec.slices[0].servers.clone();
    assert!(inference.servers.is_some());
    let got = kpro6();
    assert_eq!(
        got.layout.as_ref().map(|t| t.gpu_vendor.as_str()),
        Some("10de"),
        "the guard knows the host's GPUs"
    );
    assert_eq!(
        got,
        DesiredPartition {
            name: "kpro6".into(),
            node_name: "kpro6".into(),
            slices: vec![
                inference,
                slice(
                    "confidential-vm",
                    &["81:00.0", "91:00.0", "e1:00.0", "f1:00.0"],
                    GpuDriver::VfioPci,
                    Some(vm),
                ),
            ],
            iommu: IommuModeExpectation::Translated,
            host_driver: "nvidia".into(),
            kernel_args: None,
            reboot: Default::default(),
            layout: got.layout.clone(),
        }
    );
}

#[test]
fn server_errors_keep_their_order() {
    let got = server_errors(&format!(
        r#"{HEAD_S}spec:
  partitionRef:
    name: other
    slice: confidential-vm
  unit:
    name: "bad name"
    location: Container
  python: python3
  model:
    path: " "
    servedName: ""
  tensorParallelSize: 0
  speculative:
    algorithm: MTP
  toolCallParser: nope
  reasoningParser: nope
  memFractionStatic: 1.5
  listen:
    host: ""
    port: 0
  p2p: Enabled
  env:
    - name: 1X
      value: "a\0b"
    - name: NCCL_P2P_DISABLE
      value: "1"
    - name: CUDA_VISIBLE_DEVICES
      value: "0"
  startup:
    stallAfterSeconds: 1
    deadlineSeconds: 0
  extraArgs: ["--tp", "--tp-size=2", "--disable-custom-all-reduce", "x\0", "plain", "--port"]
"#
    ));
    assert_eq!(got, vec![
        "InferenceServer/default/bad: spec.partitionRef.name: refers to GpuPartition \"other\", but the partition for this host is \"kpro6\"",
        "InferenceServer/default/bad: spec.partitionRef.slice: slice \"confidential-vm\" is bound to vfio-pci (passthrough to a VM); an inference server needs a slice with driver nvidia",
        "InferenceServer/default/bad: spec.unit.location: slice \"confidential-vm\" has no LXC consumer to run the unit in; set unit.location: Host or give the slice consumer.lxc",
        "InferenceServer/default/bad: spec.partitionRef.slice: slice \"confidential-vm\" admits no InferenceServers; its GpuPartition's admin must allow them (spec.slices[].servers)",
        "InferenceServer/default/bad: spec.tensorParallelSize: must be at least 1",
        "InferenceServer/default/bad: spec.unit.name: unit name \"bad name.service\" contains ' ' at byte 3; only ASCII letters, digits, ':', '-', '_', '.', '\\' and '@' are allowed",
        "InferenceServer/default/bad: spec.python: \"python3\" must be an absolute path to the interpreter, e.g. /root/ml-env/bin/python3",
        "InferenceServer/default/bad: spec.model.path: is required: a local model directory (absolute path) or a Hugging Face repo id",
        "InferenceServer/default/bad: spec.model.servedName: is required: the name clients use and /v1/models lists",
        "InferenceServer/default/bad: spec.speculative.algorithm: unknown speculative algorithm \"MTP\"; use one of EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO, FROZEN_KV_MTP (NEXTN is MTP)",
        "InferenceServer/default/bad: spec.toolCallParser: \"nope\" is not a valid --tool-call-parser; SGLang 0.5.23 accepts one of: auto, apertus2509, beam, cohere_command4, deepseekv3, deepseekv31, deepseekv32, deepseekv4, deepseekv41, dots, glm, glm45, glm47, gpt-oss, k2_horizon, kimi_k2, kimi_k3, lfm2, ling3, llama3, mimo, minicpm5, mistral, muse, poolside_v1, pythonic, qwen, qwen25, qwen3_coder, spark25, step3, step3p5, minimax-m2, minimax-m3, nanbeige, trinity, interns1, hermes, hunyuan, gigachat3, gigachat35, gemma4, inkling, iquest_q1, response_template",
        "InferenceServer/default/bad: spec.reasoningParser: \"nope\" is not a valid --reasoning-parser; SGLang 0.5.23 accepts one of: auto, apertus2509, beam, deepseek-r1, deepseek-v3, deepseek-v4, deepseek-v41, dots, glm45, ling3, hunyuan, gpt-oss, k2_horizon, kimi, kimi_k2, kimi_k3, mimo, muse, poolside_v1, qwen3, qwen3-thinking, minimax, minimax-append-think, minimax-m3, nanbeige, step3, step3p5, mistral, nemotron_3, granite_thinking_parser, interns1, gemma4, inkling, iquest_q1, cohere_command4, gigachat35, response_template",
        "InferenceServer/default/bad: spec.memFractionStatic: 1.5 is outside (0, 1); typical values are 0.8 to 0.9",
        "InferenceServer/default/bad: spec.listen.port: must be 1..65535",
        "InferenceServer/default/bad: spec.listen.host: \"\" is not an address; use 0.0.0.0 or 127.0.0.1",
        "InferenceServer/default/bad: spec.startup.stallAfterSeconds: must be at least 5 (GPU memory is sampled every few seconds)",
        "InferenceServer/default/bad: spec.startup.deadlineSeconds: must not be shorter than stallAfterSeconds",
        "InferenceServer/default/bad: spec.env[0].name: \"1X\" is not a valid variable name (letters, digits, '_', not starting with a digit)",
        "InferenceServer/default/bad: spec.env[0].value: contains a NUL byte, which no environment can hold",
        "InferenceServer/default/bad: spec.env[1].name: NCCL_P2P_DISABLE is managed by the agent: set spec.p2p: Disabled instead",
        "InferenceServer/default/bad: spec.env[2].name: CUDA_VISIBLE_DEVICES is managed by the agent: the agent derives it from the slice's GPUs; remove it",
        "InferenceServer/default/bad: spec.extraArgs[0]: --tp is not an SGLang 0.5.23 flag (check the spelling; full names only, no abbreviations)",
        "InferenceServer/default/bad: spec.extraArgs[1]: --tp-size is set by the agent from the spec; use the spec field instead of extraArgs",
        "InferenceServer/default/bad: spec.extraArgs[2]: --disable-custom-all-reduce is set by the agent from the spec; use the spec field instead of extraArgs",
        "InferenceServer/default/bad: spec.extraArgs[3]: contains a NUL byte",
        "InferenceServer/default/bad: spec.extraArgs[3]: \"x\\0\" follows --disable-custom-all-reduce, a switch that takes no value",
        "InferenceServer/default/bad: spec.extraArgs[4]: \"plain\" is not a flag and follows no flag that takes a value; extraArgs holds --flag [value] words only",
        "InferenceServer/default/bad: spec.extraArgs[5]: --port is set by the agent from the spec; use the spec field instead of extraArgs",
        "InferenceServer/default/bad: spec.extraArgs[5]: --port takes exactly one value (found 0)",
        "InferenceServer/default/bad: spec.extraArgs: --disable-custom-all-reduce contradicts p2p: Enabled",
    ]);
}

#[test]
fn server_slice_errors_keep_their_order() {
    let base = |slice: &str, location: &str, tp: u32| {
        format!(
            r#"{HEAD_S}spec:
  partitionRef:
    name: kpro6
    slice: {slice}
  unit:
    name: sglang-x
    location: {location}
  python: /usr/bin/python3
  model:
    path: /m
    servedName: m
  tensorParallelSize: {tp}
"#
        )
    };
    assert_eq!(server_errors(&base("inference", "Host", 8)), vec![
        "InferenceServer/default/bad: spec.tensorParallelSize: tensor parallel size 8 is larger than slice \"inference\", which has 4 GPUs; lower it to at most 4",
        "InferenceServer/default/bad: spec.unit.location: slice \"inference\" belongs to container 129; run the unit there (unit.location: Container)",
        "InferenceServer/default/bad: spec.python: \"/usr/bin/python3\" is not an interpreter slice \"inference\" allows; use one of: /root/ml-env/bin/python3",
        "InferenceServer/default/bad: spec.model.path: \"/m\" is not under a model root of this slice (/shared/models)",
        "InferenceServer/default/bad: spec.unit.name: sglang-x.service is outside the agent's unit names: name it gpuplane-sglang-x, or the slice's admin may let it adopt this unit (servers.adoptUnits)",
    ]);
    assert_eq!(server_errors(&base("nope", "Host", 0)), vec![
        "InferenceServer/default/bad: spec.partitionRef.slice: no slice \"nope\" in GpuPartition \"kpro6\"; its slices are: inference, confidential-vm",
        "InferenceServer/default/bad: spec.tensorParallelSize: must be at least 1",
    ]);
    assert_eq!(
        server_errors(&base("confidential-vm", "Host", 9)),
        vec![
            "InferenceServer/default/bad: spec.partitionRef.slice: slice \"confidential-vm\" is bound to vfio-pci (passthrough to a VM); an inference server needs a slice with driver nvidia",
            "InferenceServer/default/bad: spec.tensorParallelSize: tensor parallel size 9 is larger than slice \"confidential-vm\", which has 4 GPUs; lower it to at most 4",
            "InferenceServer/default/bad: spec.partitionRef.slice: slice \"confidential-vm\" admits no InferenceServers; its GpuPartition's admin must allow them (spec.slices[].servers)",
        ]
    );
}

#[test]
fn a_valid_server_resolves() {
    let m = manifests();
    let got = resolve_server(&m.servers[0], &kpro6()).expect("valid");
    assert_eq!(got.id, "default/qwen35-122b");
    assert_eq!(got.spec, m.servers[0].spec);
    assert_eq!(
        got.unit,
        UnitRef {
            location: Location::Container(129),
            name: "sglang-qwen.service".into(),
        }
    );
    assert_eq!(
        got.gpus,
        [
            "0000:01:00.0",
            "0000:11:00.0",
            "0000:61:00.0",
            "0000:71:00.0"
        ]
    );
}

/// A model path that is neither absolute nor a repo id gets one true message, not "is a
/// Hugging Face repo id" first and "is neither" after (issue 22).
#[test]
fn a_malformed_model_path_gets_one_message_that_says_what_it_is() {
    for path in ["~/models/x", "Z:\\\\models\\\\x", "shared/models/x"] {
        let yaml = format!(
            "{HEAD_S}spec:\n  partitionRef: {{name: kpro6, slice: inference}}\n  unit: {{name: sglang-qwen, location: Container}}\n  python: /root/ml-env/bin/python3\n  model: {{path: \"{path}\", servedName: m}}\n  tensorParallelSize: 4\n"
        );
        let errs: Vec<String> = server_errors(&yaml)
            .into_iter()
            .filter(|e| e.contains("spec.model.path"))
            .collect();
        assert_eq!(errs.len(), 1, "{path}: {errs:?}");
        assert!(
            errs[0].contains("is neither an absolute path"),
            "{path}: {errs:?}"
        );
        assert!(
            !errs[0].contains("is a Hugging Face repo id"),
            "{path}: {errs:?}"
        );
    }
    // A real repo id on a local-only slice is still called one.
    let yaml = format!(
        "{HEAD_S}spec:\n  partitionRef: {{name: kpro6, slice: inference}}\n  unit: {{name: sglang-qwen, location: Container}}\n  python: /root/ml-env/bin/python3\n  model: {{path: Qwen/Qwen3-8B, servedName: m}}\n  tensorParallelSize: 4\n"
    );
    let errs = server_errors(&yaml);
    assert!(
        errs.iter()
            .any(|e| e.contains("is a Hugging Face repo id; this slice serves only local models")),
        "{errs:?}"
    );
}

/// A smoke test that can never pass is refused, with the field (issue 22).
#[test]
fn a_smoke_test_that_can_never_pass_is_refused_with_the_field() {
    let server = |parsers: &str, requests: &str| {
        format!(
            "{HEAD_S}spec:\n  partitionRef: {{name: kpro6, slice: inference}}\n  unit: {{name: sglang-qwen, location: Container}}\n  python: /root/ml-env/bin/python3\n  model: {{path: /shared/models/m, servedName: m}}\n  tensorParallelSize: 4\n{parsers}  smokeTest:\n    requests:\n{requests}"
        )
    };
    let smoke = |yaml: String| -> Vec<String> {
        server_errors(&yaml)
            .into_iter()
            .filter(|e| e.contains("spec.smokeTest"))
            .collect()
    };
    let both = "  toolCallParser: qwen3_coder\n  reasoningParser: qwen3\n";
    // No tools offered; another tool offered; an empty answerContains.
    let e = smoke(server(both, "      - {name: a, prompt: p, expect: {toolCall: get_weather}}\n      - {name: b, prompt: p, tools: [{name: get_time}], expect: {toolCall: get_weather}}\n      - {name: c, prompt: p, expect: {answerContains: \"  \"}}\n"
    ));
    assert_eq!(e, vec![
        "InferenceServer/default/bad: spec.smokeTest.requests[0].expect.toolCall: expects a call of \"get_weather\", but the request offers no tools; add it to requests[0].tools",
        "InferenceServer/default/bad: spec.smokeTest.requests[1].expect.toolCall: expects a call of \"get_weather\", which the request does not offer (it offers: get_time)",
        "InferenceServer/default/bad: spec.smokeTest.requests[2].expect.answerContains: is empty: every answer contains it, so it tests nothing; give the text the answer must contain, or leave it out",
    ]);
    // Tool calls and reasoning without their parsers.
    let e = smoke(server("", "      - {name: t, prompt: p, tools: [{name: get_weather}], expect: {toolCall: get_weather, reasoning: true}}\n"));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].contains("requests[0].expect.toolCall") && e[0].contains("set spec.toolCallParser"),
        "{e:?}"
    );
    assert!(
        e[1].contains("requests[0].expect.reasoning") && e[1].contains("set spec.reasoningParser"),
        "{e:?}"
    );
    // The reachable version of the same test resolves.
    let ok = server(both, "      - {name: t, prompt: p, tools: [{name: get_weather}], expect: {toolCall: get_weather, reasoning: true, answerContains: \"x\"}}\n");
    let m = parse(&ok);
    assert!(resolve_server(&m.servers[0], &kpro6()).is_ok());
}

/// On the real host too, two slices of one NUMA node are named by the node and the slices (not
/// by each GPU of the node, one line per address), as the webhook says it.
#[test]
fn two_slices_on_one_numa_node_are_one_problem_in_the_specs_terms() {
    let errors = partition_errors(
        &format!(
            "apiVersion: gpuplane.dev/v1alpha1\nkind: GpuPartition\nmetadata: {{name: kpro6}}\nspec:\n  nodeName: kpro6\n  slices:\n{}",
            crate::testutil::TWO_ON_NUMA_0
        ),
    );
    assert_eq!(
        errors,
        [
            r#"GpuPartition/kpro6: spec.slices[1].gpus.numaNode: NUMA node 0 is also the selector of slice "inference" (spec.slices[0]): each would take every GPU on that node, and a GPU may belong to one slice only; select one of the two by another NUMA node, or by addresses, uuids, serials, slots or count"#
        ]
    );
}
