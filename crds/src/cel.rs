//! The CRDs' own validation rules: CEL (`x-kubernetes-validations`), run by the API server
//! itself on every create and update (GA since Kubernetes 1.29; 1.25–1.28 with the feature
//! gate), so a cluster refuses a wrong spec even with the admission webhook down, not
//! installed, or bypassed by `kubectl apply --dry-run=server` in CI.
//!
//! Each rule here is a host-independent rule of one object that the agent's own validation
//! (`controller/src/desired/`) also applies, with the same words: the message names the field
//! and the fix, as the webhook's do. What CEL cannot see stays with the webhook and the agent:
//! another object (a server's slice in its partition, tensor parallel size against it, tenancy
//! policy), the host (addresses, NUMA nodes, containers, confidential VMs), annotations and
//! labels (a CRD rule sees only `metadata.name`), and SGLang's flag grammar (`extraArgs`).
//!
//! The two cannot drift apart silently: [`CASES`] is one corpus of wrong specs, each naming the
//! rule that refuses it; `controller/src/desired/cel/tests.rs` evaluates these rules client-side
//! (cel-interpreter) and the Rust validation on every case and demands both refuse it in the
//! same words, and `e2e/tests/kube_cel.rs` sends every case to a Kubernetes 1.36 API server.
//!
//! Cost: each list a rule walks has a `maxItems` (set here too), so the server's estimate of a
//! rule's worst case stays within its per-rule and per-CRD budgets (checked at CRD creation).
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, ValidationRule,
};

/// One rule: where it sits in the kind's schema, the CEL, and what the server says on failure.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// A short stable name, used by the cases (`CASES`) and the tests.
    pub id: &'static str,
    pub kind: &'static str,
    /// Where the rule sits: property names joined by `.`, `[]` after a list's name for its items
    /// (`spec.slices[].gpus`); empty for the object's root.
    pub path: &'static str,
    pub rule: &'static str,
    /// The message the server prints. Static: a `messageExpression` that prints a number
    /// (`string(int)`) is estimated at an unbounded string's cost and refused by the server.
    pub message: &'static str,
    /// The field the server names, relative to `path`, when it is narrower than `path`.
    pub field_path: Option<&'static str>,
}

const fn rule(
    id: &'static str,
    kind: &'static str,
    path: &'static str,
    rule: &'static str,
    message: &'static str,
) -> Rule {
    Rule {
        id,
        kind,
        path,
        rule,
        message,
        field_path: None,
    }
}

const fn at(mut r: Rule, field: &'static str) -> Rule {
    r.field_path = Some(field);
    r
}

const P: &str = "GpuPartition";
const S: &str = "InferenceServer";
const N: &str = "GpuNodePool";

/// The speculative algorithms of SGLang's EAGLE family (any letter case): `numSteps`,
/// `eagleTopk` and `numDraftTokens` belong together there (`controller/src/sglang/speculative.rs`).
macro_rules! eagle_family {
    () => {
        "self.algorithm.matches('^(?i)(EAGLE|EAGLE3|NEXTN|STANDALONE)$')"
    };
}

/// The one transition rule's message: the webhook says the same for clusters without CEL
/// (`controller/src/webhook/review.rs`).
pub const NODE_NAME_IMMUTABLE: &str = "is immutable: a partition's GPUs are one host's (its agent may hold them bound and handed to consumers); to give these slices to another host, create a partition for that host and delete this one";

/// Every rule, in the order the server evaluates a kind's schema (root first).
pub const RULES: &[Rule] = &[
    // --- GpuPartition -----------------------------------------------------------------------
    rule("partition-node-immutable", P, "spec.nodeName", "self == oldSelf", NODE_NAME_IMMUTABLE),
    rule("slice-names-unique", P, "spec.slices", "self.all(a, self.exists_one(b, b.name == a.name))",
        "slice names must be unique (InferenceServers name their slice by it): rename one of the two"),
    rule("numa-node-twice", P, "spec.slices",
        "self.all(a, !has(a.gpus.numaNode) || self.exists_one(b, has(b.gpus.numaNode) && b.gpus.numaNode == a.gpus.numaNode))",
        "two slices select the same NUMA node: each would take every GPU on that node, and a GPU may belong to one slice only; select one of the two by another NUMA node, or by addresses, uuids, serials, slots or count"),
    rule("mapping-twice", P, "spec.slices",
        "self.all(a, !has(a.consumer) || !has(a.consumer.vm) || self.exists_one(b, has(b.consumer) && has(b.consumer.vm) && b.consumer.vm.pciMapping == a.consumer.vm.pciMapping))",
        "two slices name the same consumer.vm.pciMapping; each slice needs its own mapping"),
    rule("vmid-twice", P, "spec.slices",
        "self.all(a, !has(a.consumer) || !(has(a.consumer.lxc) || has(a.consumer.vm)) || self.exists_one(b, has(b.consumer) && (has(b.consumer.lxc) ? b.consumer.lxc.vmid : (has(b.consumer.vm) ? b.consumer.vm.vmid : -1)) == (has(a.consumer.lxc) ? a.consumer.lxc.vmid : a.consumer.vm.vmid)))",
        "two slices name the same vmid: a vmid is already the consumer of another slice; give one consumer one slice"),
    rule("one-selector", P, "spec.slices[].gpus",
        "[has(self.addresses), has(self.numaNode), has(self.count), has(self.uuids), has(self.serials), has(self.slots)].filter(x, x).size() == 1",
        "set exactly one of addresses, numaNode, count, uuids, serials or slots"),
    rule("one-consumer", P, "spec.slices[].consumer", "has(self.lxc) != has(self.vm)",
        "set exactly one of lxc or vm (or omit consumer)"),
    at(rule("lxc-needs-nvidia", P, "spec.slices[]",
        "!has(self.consumer) || !has(self.consumer.lxc) || self.driver == 'nvidia'",
        "an LXC consumer needs driver nvidia; vfio-pci GPUs can only be passed to a VM"), ".driver"),
    at(rule("vm-needs-vfio", P, "spec.slices[]",
        "!has(self.consumer) || !has(self.consumer.vm) || self.driver == 'vfio-pci'",
        "a VM consumer needs driver vfio-pci"), ".driver"),
    at(rule("window-needs-auto", P, "spec.host",
        "!has(self.maintenanceWindow) || (has(self.reboot) && self.reboot == 'Auto')",
        "is only read with reboot: Auto (with Manual a person decides when to reboot); remove it or set reboot: Auto"), ".maintenanceWindow"),
    rule("kernel-arg-twice", P, "spec.host.kernelArgs",
        "(!has(self.present) || self.present.all(a, self.present.exists_one(b, b == a))) && (!has(self.absent) || self.absent.all(a, self.absent.exists_one(b, b == a)))",
        "an argument is listed twice; list it once"),
    rule("kernel-arg-both", P, "spec.host.kernelArgs",
        "!has(self.present) || !has(self.absent) || self.present.all(a, !(a in self.absent))",
        "an argument is both present and absent; list it once"),
    // --- InferenceServer --------------------------------------------------------------------
    rule("python-absolute", S, "spec.python", "self.startsWith('/')",
        "must be an absolute path to the interpreter, e.g. /root/ml-env/bin/python3"),
    rule("model-path", S, "spec.model.path",
        "self.startsWith('/') || self.matches('^[A-Za-z0-9_-][A-Za-z0-9_.-]*/[A-Za-z0-9_-][A-Za-z0-9_.-]*$')",
        "is neither an absolute path to a model directory nor a Hugging Face repo id (org/name)"),
    rule("model-path-dotdot", S, "spec.model.path", "!self.matches('^/(.*/)?[.][.](/.*)?$')",
        "contains '..'; give the directory itself"),
    rule("speculative-algorithm", S, "spec.speculative.algorithm",
        "self.matches('^(?i)(EAGLE|EAGLE3|NEXTN|STANDALONE|NGRAM|DFLASH|DSPARK|UNO|FROZEN_KV_MTP)$')",
        "unknown speculative algorithm; use one of EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO, FROZEN_KV_MTP (NEXTN is MTP)"),
    at(rule("steps-needed", S, "spec.speculative",
        concat!("!(has(self.eagleTopk) || has(self.numDraftTokens)) || has(self.numSteps) || !", eagle_family!()),
        "numSteps is required when eagleTopk or numDraftTokens is set (SGLang asserts on it); set numSteps, or remove all three to let SGLang choose"), ".numSteps"),
    at(rule("topk-needed", S, "spec.speculative",
        concat!("!has(self.numSteps) || has(self.eagleTopk) || !", eagle_family!()),
        "eagleTopk is required with numSteps (SGLang 0.5.23 crashes at startup without it); set eagleTopk: 1 for MTP"), ".eagleTopk"),
    at(rule("draft-tokens", S, "spec.speculative",
        concat!("!has(self.numSteps) || !has(self.eagleTopk) || !has(self.numDraftTokens) || self.eagleTopk != 1 || self.numDraftTokens == self.numSteps + 1 || !", eagle_family!()),
        "with eagleTopk 1 SGLang forces numDraftTokens to numSteps + 1; set numDraftTokens to numSteps + 1 (or raise eagleTopk)"), ".numDraftTokens"),
    at(rule("ngram-topk", S, "spec.speculative",
        "!has(self.eagleTopk) || !self.algorithm.matches('^(?i)NGRAM$')",
        "NGRAM ignores eagleTopk: SGLang sets it from --speculative-ngram-max-bfs-breadth (default 10); remove eagleTopk (set the breadth in extraArgs if needed)"), ".eagleTopk"),
    rule("draft-tokens-max", S, "spec.speculative.numDraftTokens", "self <= 256",
        "at most 256: SGLang rejects more for hybrid (Mamba) models such as Qwen3.5 (mamba_track_interval), and no model gains from it"),
    at(rule("standalone-draft", S, "spec.speculative",
        "has(self.draftModelPath) || !self.algorithm.matches('^(?i)STANDALONE$')",
        "STANDALONE needs draftModelPath (a smaller draft model)"), ".draftModelPath"),
    at(rule("dflash-draft", S, "spec.speculative",
        "has(self.draftModelPath) || !self.algorithm.matches('^(?i)DFLASH$')",
        "DFLASH needs draftModelPath"), ".draftModelPath"),
    rule("mem-fraction", S, "spec.memFractionStatic", "self > 0.0 && self < 1.0",
        "is outside (0, 1); typical values are 0.8 to 0.9"),
    rule("listen-host-port", S, "spec.listen.host", "!self.matches('^[0-9.]+:[0-9]+$')",
        "is not an address; use 0.0.0.0 or 127.0.0.1; the port goes in spec.listen.port"),
    at(rule("deadline-after-stall", S, "spec.startup",
        "!has(self.deadlineSeconds) || !has(self.stallAfterSeconds) || self.deadlineSeconds >= self.stallAfterSeconds",
        "must not be shorter than stallAfterSeconds"), ".deadlineSeconds"),
    rule("env-once", S, "spec.env", "self.all(a, self.exists_one(b, b.name == a.name))",
        "a variable is set twice; each variable once (systemd would keep only the last)"),
    // --- GpuNodePool ------------------------------------------------------------------------
    rule("max-unavailable", N, "spec.maxUnavailable",
        "string(self).matches('^([0-9]+|(100|[1-9]?[0-9])%)$')",
        "is not a count ≥ 0 or a percentage 0%–100%; write e.g. 1 or \"25%\""),
    rule("pool-name-length", N, "", "self.metadata.name.size() <= 63",
        "a partition names its pool in the label gpuplane.dev/pool, whose value has at most 63: shorten the name"),
];

/// Upper bounds on the lists the rules walk (each far above what a host has), by schema path.
pub const MAX_ITEMS: &[(&str, &str, i64)] = &[(P, "spec.slices", 64), (S, "spec.env", 128)];

/// The corpus of wrong specs every rule is proven on: YAML documents, each with `case` (a name),
/// `rule` (the id of the rule that refuses it), `field` and `says` (the field and the words the
/// agent's own validation uses), and `object` (the whole object).
pub const CASES: &str = include_str!("cel/cases.yaml");

pub mod corpus;

/// Inserts the rules and list bounds of `kind` into its CRD's schema, and drops the integer
/// formats schemars writes for Rust's unsigned types (`uint16`, `uint64`), which the API server
/// does not know and warns of on every CRD apply (`minimum: 0` says the same).
pub fn apply(crd: &mut CustomResourceDefinition, kind: &str) {
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        drop_unsigned_formats(root);
        for (k, path, n) in MAX_ITEMS {
            if *k == kind {
                node(root, path).max_items = Some(*n);
            }
        }
        for r in RULES.iter().filter(|r| r.kind == kind) {
            node(root, r.path)
                .x_kubernetes_validations
                .get_or_insert_with(Vec::new)
                .push(ValidationRule {
                    rule: r.rule.to_string(),
                    message: Some(r.message.to_string()),
                    field_path: r.field_path.map(str::to_string),
                    ..Default::default()
                });
        }
    }
}

fn drop_unsigned_formats(s: &mut JSONSchemaProps) {
    if s.format.as_deref().is_some_and(|f| f.starts_with("uint")) {
        s.format = None;
    }
    for p in s.properties.iter_mut().flat_map(|p| p.values_mut()) {
        drop_unsigned_formats(p);
    }
    match s.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(i)) => drop_unsigned_formats(i),
        Some(JSONSchemaPropsOrArray::Schemas(v)) => v.iter_mut().for_each(drop_unsigned_formats),
        None => {}
    }
    for list in [&mut s.all_of, &mut s.any_of, &mut s.one_of] {
        list.iter_mut().flatten().for_each(drop_unsigned_formats);
    }
}

/// The schema node at `path` (see [`Rule::path`]); panics on a path the schema does not have:
/// a rule written for a field that was renamed must fail `crdgen` and the tests, not vanish.
fn node<'a>(mut at: &'a mut JSONSchemaProps, path: &str) -> &'a mut JSONSchemaProps {
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (name, items) = match seg.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (seg, false),
        };
        at = at
            .properties
            .as_mut()
            .and_then(|p| p.get_mut(name))
            .unwrap_or_else(|| panic!("CEL rule path {path}: no property {name}"));
        if items {
            at = match at.items.as_mut() {
                Some(JSONSchemaPropsOrArray::Schema(s)) => s,
                _ => panic!("CEL rule path {path}: {name} is not a list"),
            };
        }
    }
    at
}
