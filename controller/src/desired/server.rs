//! Validation of an `InferenceServer` against its partition.

use super::{
    err, model_ref, tenancy, unit_check, DesiredPartition, DesiredServer, Problems,
    ResolvedConsumer, ResolvedSlice, SpecError,
};
use crate::host::model::{Location, UnitRef};
use crate::sglang::{args, command, flags, speculative};
use crate::systemd::name::service_unit_name;
use gpuplane_crds::{
    EnvVar, GpuDriver, InferenceServer, InferenceServerSpec, P2pPolicy, UnitLocation,
};

/// Validates `s` and places it on its slice.
///
/// # Guarantees
/// On `Ok`: the slice exists and is bound to `nvidia`, tp fits in the slice, the unit name
/// is a valid systemd name, the unit location has the GPUs (a container location needs an
/// LXC consumer), every flag rendered or passed in `extraArgs` is a real SGLang flag, and
/// speculative settings are what SGLang will actually run.
pub fn resolve_server(
    s: &InferenceServer,
    partition: &DesiredPartition,
) -> Result<DesiredServer, Vec<SpecError>> {
    let ns = s.metadata.namespace.as_deref().unwrap_or("default");
    let name = s.metadata.name.as_deref().unwrap_or("<unnamed>");
    let res = crate::resource_key::ResourceKey::server(ns, name);
    let spec = &s.spec;
    let mut pr = Problems::new(&res);
    // The order of the checks is the order of the errors the CLI prints.
    let slice = partition_ref(&mut pr, spec, partition);
    let mut location = None;
    if let Some(sl) = slice {
        slice_driver(&mut pr, sl);
        tensor_parallel_fits(&mut pr, spec, sl);
        location = unit_location(&mut pr, spec, sl);
        tenancy::check_server(&mut pr, ns, spec, sl);
    }
    if spec.tensor_parallel_size == 0 {
        pr.add("spec.tensorParallelSize", "must be at least 1");
    }
    let unit_name = unit_name(&mut pr, spec);
    python_and_model(&mut pr, spec);
    speculative_decoding(&mut pr, spec);
    parsers(&mut pr, spec);
    mem_fraction(&mut pr, spec);
    listen_and_startup(&mut pr, spec);
    env(&mut pr, spec);
    extra_args(&mut pr, spec);
    super::smoke_check::check(&mut pr, spec);
    let runtime = runtime(slice, spec);
    unit_check::unit_renders(
        &mut pr,
        &format!("{ns}/{name}"),
        spec,
        &runtime,
        slice.map_or(0, |s| s.gpus.len()),
    );
    pr.finish()?;
    let (Some(location), Some(unit_name), Some(slice)) = (location, unit_name, slice) else {
        return Err(vec![err(&res, "spec", "internal: incomplete resolution")]);
    };
    let adopt = tenancy::adopted(slice, &unit_name);
    Ok(DesiredServer {
        id: format!("{ns}/{name}"),
        spec: spec.clone(),
        unit: UnitRef {
            location,
            name: unit_name,
        },
        gpus: slice.gpus.clone(),
        runtime,
        adopt,
    })
}

/// How the slice's admin runs the server: its user, environment and the sandboxing of its
/// location.
fn runtime(slice: Option<&ResolvedSlice>, spec: &InferenceServerSpec) -> command::Runtime {
    let policy = slice.and_then(|s| s.servers.as_ref());
    command::Runtime {
        user: policy.and_then(|p| p.user.clone()),
        env: policy
            .map(|p| {
                p.env
                    .iter()
                    .map(|v| (v.name.clone(), v.value.clone()))
                    .collect()
            })
            .unwrap_or_default(),
        on_host: spec.unit.location == UnitLocation::Host,
    }
}

/// The slice the server refers to, if the partition is this host's and has that slice.
fn partition_ref<'p>(
    pr: &mut Problems,
    spec: &InferenceServerSpec,
    partition: &'p DesiredPartition,
) -> Option<&'p ResolvedSlice> {
    if spec.partition_ref.name != partition.name {
        pr.add(
            "spec.partitionRef.name",
            format!(
                "refers to GpuPartition {:?}, but the partition for this host is {:?}",
                spec.partition_ref.name, partition.name
            ),
        );
    }
    let slice = partition.slice(&spec.partition_ref.slice);
    if slice.is_none() {
        pr.add(
            "spec.partitionRef.slice",
            format!(
                "no slice {:?} in GpuPartition {:?}; its slices are: {}",
                spec.partition_ref.slice,
                partition.name,
                partition
                    .slices
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    slice
}

/// The slice is bound to `nvidia`, not passed through to a VM.
fn slice_driver(pr: &mut Problems, sl: &ResolvedSlice) {
    if sl.driver != GpuDriver::Nvidia {
        pr.add("spec.partitionRef.slice", format!("slice {:?} is bound to vfio-pci (passthrough to a VM); an inference server needs a slice with driver nvidia", sl.name));
    }
}

/// The tensor parallel size is at most the slice's GPU count.
fn tensor_parallel_fits(pr: &mut Problems, spec: &InferenceServerSpec, sl: &ResolvedSlice) {
    if spec.tensor_parallel_size as usize > sl.gpus.len() {
        pr.add("spec.tensorParallelSize", format!("tensor parallel size {} is larger than slice {:?}, which has {} GPUs; lower it to at most {}", spec.tensor_parallel_size, sl.name, sl.gpus.len(), sl.gpus.len()));
    }
}

/// Where the unit runs: in the slice's LXC consumer, or on the host if the slice has none.
fn unit_location(
    pr: &mut Problems,
    spec: &InferenceServerSpec,
    sl: &ResolvedSlice,
) -> Option<Location> {
    match (spec.unit.location, &sl.consumer) {
        (UnitLocation::Container, Some(ResolvedConsumer::Lxc(v))) => Some(Location::Container(*v)),
        (UnitLocation::Container, _) => {
            pr.add("spec.unit.location", format!("slice {:?} has no LXC consumer to run the unit in; set unit.location: Host or give the slice consumer.lxc", sl.name));
            None
        }
        (UnitLocation::Host, Some(ResolvedConsumer::Lxc(v))) => {
            pr.add("spec.unit.location", format!("slice {:?} belongs to container {v}; run the unit there (unit.location: Container)", sl.name));
            None
        }
        (UnitLocation::Host, _) => Some(Location::Host),
    }
}

/// The unit's full systemd name, if valid.
fn unit_name(pr: &mut Problems, spec: &InferenceServerSpec) -> Option<String> {
    match service_unit_name(&spec.unit.name) {
        Ok(n) => Some(n),
        Err(m) => {
            pr.add("spec.unit.name", m);
            None
        }
    }
}

/// The interpreter is an absolute path; the model has a path and a served name.
fn python_and_model(pr: &mut Problems, spec: &InferenceServerSpec) {
    if !spec.python.starts_with('/') {
        pr.add(
            "spec.python",
            format!(
                "{:?} must be an absolute path to the interpreter, e.g. /root/ml-env/bin/python3",
                spec.python
            ),
        );
    }
    if spec.model.path.trim().is_empty() {
        pr.add(
            "spec.model.path",
            "is required: a local model directory (absolute path) or a Hugging Face repo id",
        );
    } else if let Err(m) = model_ref::check(&spec.model.path) {
        pr.add("spec.model.path", m);
    }
    if let Some(Err(m)) = spec
        .speculative
        .as_ref()
        .and_then(|s| s.draft_model_path.as_deref())
        .map(model_ref::check)
    {
        pr.add("spec.speculative.draftModelPath", m);
    }
    if spec.model.served_name.trim().is_empty() {
        pr.add(
            "spec.model.servedName",
            "is required: the name clients use and /v1/models lists",
        );
    }
}

/// The speculative settings are what SGLang will actually run.
fn speculative_decoding(pr: &mut Problems, spec: &InferenceServerSpec) {
    if let Some(sp) = &spec.speculative {
        for (field, msg) in speculative::check(sp) {
            pr.add(format!("spec.speculative.{field}"), msg);
        }
    }
}

/// The tool call and reasoning parsers are choices SGLang accepts.
fn parsers(pr: &mut Problems, spec: &InferenceServerSpec) {
    for (field, flag, value) in [
        (
            "spec.toolCallParser",
            "--tool-call-parser",
            &spec.tool_call_parser,
        ),
        (
            "spec.reasoningParser",
            "--reasoning-parser",
            &spec.reasoning_parser,
        ),
    ] {
        if let Some(v) = value {
            if let Err(m) = flags::check_choice(flag, v) {
                pr.add(field, m);
            }
        }
    }
}

/// The static memory fraction, if set, is inside (0, 1).
fn mem_fraction(pr: &mut Problems, spec: &InferenceServerSpec) {
    if let Some(f) = spec.mem_fraction_static {
        if !(f > 0.0 && f < 1.0) {
            pr.add(
                "spec.memFractionStatic",
                format!("{f} is outside (0, 1); typical values are 0.8 to 0.9"),
            );
        }
    }
}

/// The listen port and host are usable; the startup stall and deadline make sense.
fn listen_and_startup(pr: &mut Problems, spec: &InferenceServerSpec) {
    if spec.listen.port == 0 {
        pr.add("spec.listen.port", "must be 1..65535");
    }
    if !is_listen_host(&spec.listen.host) {
        let port_hint = if spec.listen.host.contains(':') && !spec.listen.host.contains("::") {
            "; the port goes in spec.listen.port"
        } else {
            ""
        };
        pr.add(
            "spec.listen.host",
            format!(
                "{:?} is not an address; use 0.0.0.0 or 127.0.0.1{port_hint}",
                spec.listen.host
            ),
        );
    }
    if spec.startup.stall_after_seconds < 5 {
        pr.add(
            "spec.startup.stallAfterSeconds",
            "must be at least 5 (GPU memory is sampled every few seconds)",
        );
    }
    if spec.startup.deadline_seconds < spec.startup.stall_after_seconds {
        pr.add(
            "spec.startup.deadlineSeconds",
            "must not be shorter than stallAfterSeconds",
        );
    }
}

/// Every environment variable passes `env_var`.
fn env(pr: &mut Problems, spec: &InferenceServerSpec) {
    for (i, v) in spec.env.iter().enumerate() {
        env_var(pr, i, v);
        if let Some(first) = spec.env[..i].iter().position(|o| o.name == v.name) {
            pr.add(
                format!("spec.env[{i}].name"),
                format!("{} is also set by spec.env[{first}]; each variable once (systemd would keep only the last)", v.name),
            );
        }
    }
}

/// Variable `i` has a valid name that the agent does not manage, and a value without NUL.
fn env_var(pr: &mut Problems, i: usize, v: &EnvVar) {
    let valid = !v.name.is_empty()
        && !v.name.as_bytes()[0].is_ascii_digit()
        && v.name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_');
    if !valid {
        pr.add(format!("spec.env[{i}].name"), format!("{:?} is not a valid variable name (letters, digits, '_', not starting with a digit)", v.name));
    }
    if command::MANAGED_ENV.contains(&v.name.as_str()) {
        let fix = if v.name == "NCCL_P2P_DISABLE" {
            "set spec.p2p: Disabled instead"
        } else {
            "the agent derives it from the slice's GPUs; remove it"
        };
        pr.add(
            format!("spec.env[{i}].name"),
            format!("{} is managed by the agent: {fix}", v.name),
        );
    }
    if v.value.contains('\0') {
        pr.add(
            format!("spec.env[{i}].value"),
            "contains a NUL byte, which no environment can hold",
        );
    }
}

/// The extra arguments read as SGLang's parser would read them (known flags, their arity,
/// choices and types, no stray words, no repeats, no flag the agent sets), hold no NUL, and
/// none contradicts the P2P policy.
fn extra_args(pr: &mut Problems, spec: &InferenceServerSpec) {
    let mut found: Vec<(usize, String)> = spec
        .extra_args
        .iter()
        .enumerate()
        .filter(|(_, a)| a.contains('\0'))
        .map(|(i, _)| (i, "contains a NUL byte".to_string()))
        .collect();
    found.extend(args::check(&spec.extra_args, command::MANAGED_FLAGS));
    // In the order of the words (stable: per word, NUL first).
    found.sort_by_key(|(i, _)| *i);
    for (i, m) in found {
        pr.add(format!("spec.extraArgs[{i}]"), m);
    }
    if spec.p2p == P2pPolicy::Enabled
        && spec
            .extra_args
            .iter()
            .any(|a| a == "--disable-custom-all-reduce")
    {
        pr.add(
            "spec.extraArgs",
            "--disable-custom-all-reduce contradicts p2p: Enabled",
        );
    }
}

/// `servers` in the order their claims were made: oldest `metadata.creationTimestamp` first,
/// objects without one (files, an object being created) last, ties in the given order.
///
/// # Guarantees
/// Passed to [`check_servers_together`] in this order, a conflict is reported on the newer
/// claim: the server already running keeps its slice, unit and port, whatever the names.
pub fn in_claim_order<'a>(
    servers: impl IntoIterator<Item = &'a InferenceServer>,
) -> Vec<&'a InferenceServer> {
    let mut v: Vec<&InferenceServer> = servers.into_iter().collect();
    v.sort_by_key(|s| claim_key(&s.metadata));
    v
}

/// The age of a claim: creation time (an object never stored by an API server has none and
/// sorts last), then namespace and name for objects created in the same second, so the order is
/// total and depends only on the objects.
pub fn claim_key(
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> (bool, String, String, String) {
    let created = m.creation_timestamp.as_ref();
    (
        created.is_none(),
        created.map(|t| t.0.to_string()).unwrap_or_default(),
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

/// Rules across servers: one unit name per location, one port per location, one server per
/// slice; each conflict is reported on the later server of `servers`.
pub fn check_servers_together(servers: &[DesiredServer]) -> Vec<SpecError> {
    let mut errors = Vec::new();
    for (i, a) in servers.iter().enumerate() {
        for b in &servers[..i] {
            let res = crate::resource_key::ResourceKey::server_id(&a.id);
            if a.unit == b.unit {
                errors.push(err(&res, "spec.unit.name", format!("unit {} is also used by InferenceServer/{}; give each server its own unit name", a.unit, b.id)));
            }
            if a.unit.location == b.unit.location && a.spec.listen.port == b.spec.listen.port {
                errors.push(err(
                    &res,
                    "spec.listen.port",
                    format!(
                        "port {} on {} is also used by InferenceServer/{}; pick another port",
                        a.spec.listen.port, a.unit.location, b.id
                    ),
                ));
            }
            if a.spec.partition_ref.slice == b.spec.partition_ref.slice {
                errors.push(err(&res, "spec.partitionRef.slice", format!("slice {:?} already runs InferenceServer/{}; a slice's GPUs serve one server", a.spec.partition_ref.slice, b.id)));
            }
        }
    }
    errors
}

/// An IP address or a host name (RFC 1123 labels), without a port.
fn is_listen_host(h: &str) -> bool {
    if h.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}
