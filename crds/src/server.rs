//! `InferenceServer`: an SGLang server on a slice of a `GpuPartition`.

use crate::condition::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An SGLang inference server running as a systemd unit on a slice's GPUs.
///
/// The agent renders the launch command and the unit from this spec, places the unit on
/// the host or inside the slice's LXC container, starts it, and reports readiness, startup
/// phases, stalls and P2P safety as conditions.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gpuplane.dev",
    version = "v1alpha1",
    kind = "InferenceServer",
    plural = "inferenceservers",
    shortname = "infs",
    namespaced,
    status = "InferenceServerStatus",
    printcolumn = r#"{"name":"Model","type":"string","jsonPath":".spec.model.servedName"}"#,
    printcolumn = r#"{"name":"TP","type":"integer","jsonPath":".spec.tensorParallelSize"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct InferenceServerSpec {
    /// The partition slice whose GPUs this server uses. Label the server
    /// `gpuplane.dev/node=<the partition's nodeName>`: the node's agent watches only objects so
    /// labelled (an unlabelled one gets Ready=False, reason NodeLabelMissing).
    pub partition_ref: PartitionRef,
    /// The systemd unit that runs the server, and where it runs.
    pub unit: UnitPlacement,
    /// Absolute path of the Python interpreter of the environment SGLang is installed in
    /// (e.g. a venv's `bin/python3`).
    #[schemars(length(min = 1))]
    pub python: String,
    /// The model to serve.
    pub model: ModelSpec,
    /// Tensor parallel size (`--tp-size`): how many of the slice's GPUs one model copy spans.
    #[schemars(range(min = 1, max = 64))]
    pub tensor_parallel_size: u32,
    /// Speculative decoding (MTP / EAGLE / NGRAM ...). Omit to disable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<SpeculativeSpec>,
    /// `--tool-call-parser`, e.g. `qwen3_coder`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_parser: Option<String>,
    /// `--reasoning-parser`, e.g. `qwen3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_parser: Option<String>,
    /// `--mem-fraction-static`: fraction of GPU memory for weights and KV cache (0 < x < 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_fraction_static: Option<f64>,
    /// Address and port the HTTP server listens on.
    #[serde(default)]
    pub listen: Listen,
    /// `--enable-metrics`: expose Prometheus metrics on the server's port.
    #[serde(default)]
    pub enable_metrics: bool,
    /// GPU peer-to-peer policy. `Auto` probes P2P correctness when the IOMMU translates DMA
    /// (or faults were seen) and disables P2P and custom all-reduce if any pair fails.
    #[serde(default)]
    pub p2p: P2pPolicy,
    /// Extra environment for the server (NCCL tuning etc.), written as the unit's `Environment=`.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// Extra command-line arguments appended verbatim (each one argument word).
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// Startup deadlines.
    #[serde(default)]
    pub startup: StartupSpec,
    /// What to do when a changed unit fails to start (or fails its smoke test).
    #[serde(default)]
    pub rollback: RollbackPolicy,
    /// Chat requests sent once the server is Ready, each with what its answer must show; the
    /// result is the `SmokeTested` condition. With `rollback: Auto` a failing smoke test of a
    /// new unit goes back to the last unit that reached Ready and passed. Omit to skip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoke_test: Option<SmokeTestSpec>,
}

/// A smoke test: chat requests to `/v1/chat/completions` with expectations.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SmokeTestSpec {
    /// The requests, sent one after the other.
    #[schemars(length(min = 1, max = 16))]
    pub requests: Vec<SmokeRequest>,
    /// Seconds each request may take, the whole request (a reasoning answer takes a while); at
    /// most 120. The whole test has a budget of 300 s: requests not sent by then fail, saying
    /// so. The test runs beside the agent's observation, holding no host lock.
    #[serde(default = "default_smoke_timeout")]
    #[schemars(range(min = 1, max = 120))]
    pub timeout_seconds: u64,
}

fn default_smoke_timeout() -> u64 {
    120
}

/// One chat request of a smoke test.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SmokeRequest {
    /// Names the request in the condition's message (`math`, `thinking`, `tools`).
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The user message.
    #[schemars(length(min = 1, max = 4096))]
    pub prompt: String,
    /// Function tools offered with the request (`tool_choice: auto`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub tools: Vec<SmokeTool>,
    /// `max_tokens` of the request.
    #[serde(default = "default_smoke_tokens")]
    #[schemars(range(min = 1, max = 32768))]
    pub max_tokens: u32,
    /// What the answer must show.
    pub expect: SmokeExpect,
}

fn default_smoke_tokens() -> u32 {
    1024
}

/// A function tool offered in a smoke request; its parameters are strings.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SmokeTool {
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"))]
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Names of its (required, string) parameters.
    #[serde(default)]
    pub parameters: Vec<String>,
}

/// Expectations on one answer; every one given must hold.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SmokeExpect {
    /// The answer's content contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_contains: Option<String>,
    /// `true`: the answer carries reasoning (`reasoning_content`, the reasoning parser's output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<bool>,
    /// The answer holds a parsed tool call of this function (the tool-call parser's output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<String>,
}

/// Reference to a slice of a `GpuPartition`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionRef {
    /// Name of the (cluster-scoped) `GpuPartition`.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Name of the slice in it.
    #[schemars(length(min = 1))]
    pub slice: String,
}

/// The systemd unit and where it lives.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnitPlacement {
    /// Unit name, e.g. `sglang-qwen` (`.service` is added when missing).
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// `Container`: inside the slice's LXC container; `Host`: on the host itself.
    #[serde(default)]
    pub location: UnitLocation,
}

/// Where the unit runs.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum UnitLocation {
    #[default]
    Container,
    Host,
}

/// The model to serve.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelSpec {
    /// `--model-path`: a local directory (absolute) or a Hugging Face repo id.
    #[schemars(length(min = 1, max = 4096))]
    pub path: String,
    /// `--served-model-name`: the name clients use and `/v1/models` lists.
    #[schemars(length(min = 1))]
    pub served_name: String,
}

/// Speculative decoding settings (SGLang `--speculative-*`).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpeculativeSpec {
    /// `--speculative-algorithm`: EAGLE, EAGLE3, NEXTN (MTP), STANDALONE, NGRAM, DFLASH, DSPARK, UNO, FROZEN_KV_MTP.
    /// (At most 32 characters: the CRD's CEL rules match it, and the API server bounds their cost.)
    #[schemars(length(min = 1, max = 32))]
    pub algorithm: String,
    /// `--speculative-num-steps`. Required when `eagleTopk` or `numDraftTokens` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub num_steps: Option<u32>,
    /// `--speculative-eagle-topk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub eagle_topk: Option<u32>,
    /// `--speculative-num-draft-tokens`. With topk 1 SGLang forces it to numSteps + 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub num_draft_tokens: Option<u32>,
    /// `--speculative-draft-model-path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_model_path: Option<String>,
}

/// Listen address.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Listen {
    /// `--host` (SGLang's default is 127.0.0.1).
    #[serde(default = "default_host")]
    #[schemars(length(max = 253))]
    pub host: String,
    /// `--port`.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
}

fn default_host() -> String {
    "127.0.0.1".into()
}
fn default_port() -> u16 {
    30000
}

impl Default for Listen {
    fn default() -> Self {
        Listen {
            host: default_host(),
            port: default_port(),
        }
    }
}

/// GPU peer-to-peer policy.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum P2pPolicy {
    /// Probe P2P correctness when the IOMMU translates DMA or faults were seen; disable on failure.
    #[default]
    Auto,
    /// Always leave P2P and custom all-reduce on.
    Enabled,
    /// Always set `NCCL_P2P_DISABLE=1` and `--disable-custom-all-reduce`.
    Disabled,
}

/// One environment variable.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    #[schemars(
        length(min = 1, max = 256),
        regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$")
    )]
    pub name: String,
    #[serde(default)]
    pub value: String,
}

/// Startup deadlines.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartupSpec {
    /// Seconds without startup-phase progress and with flat GPU memory, while the unit is
    /// active, after which the server is reported `StartupStalled`.
    #[serde(default = "default_stall")]
    #[schemars(range(min = 5))]
    pub stall_after_seconds: u64,
    /// Seconds after start by which the server must be ready.
    #[serde(default = "default_deadline")]
    #[schemars(range(min = 10))]
    pub deadline_seconds: u64,
}

fn default_stall() -> u64 {
    120
}
fn default_deadline() -> u64 {
    1800
}

impl Default for StartupSpec {
    fn default() -> Self {
        StartupSpec {
            stall_after_seconds: default_stall(),
            deadline_seconds: default_deadline(),
        }
    }
}

/// Rollback policy when a changed unit fails to start.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum RollbackPolicy {
    /// Go back to the last unit that reached Ready.
    Auto,
    /// Leave the failed unit and report it.
    #[default]
    Never,
}

/// Observed state of an `InferenceServer`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InferenceServerStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing`, `Degraded`, `P2PSafe`, `PreflightPassed`, `SmokeTested`, in the
    /// `metav1.Condition` shape.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// `http://host:port` of the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// SHA-256 of the rendered unit file that is installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_hash: Option<String>,
    /// GPUs (PCI addresses) the server runs on, in CUDA order.
    #[serde(default)]
    pub gpus: Vec<String>,
    /// The launch command as rendered (argv).
    #[serde(default)]
    pub command: Vec<String>,
}
