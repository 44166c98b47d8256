//! Validation of an `InferenceServer` against its partition.

use super::{err, DesiredPartition, DesiredServer, ResolvedConsumer, SpecError};
use crate::host::model::{Location, UnitRef};
use crate::sglang::{command, flags, speculative};
use crate::systemd::name::service_unit_name;
use gpuplane_crds::{GpuDriver, InferenceServer, P2pPolicy, UnitLocation};

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
    let res = format!("InferenceServer/{ns}/{name}");
    let spec = &s.spec;
    let mut errors = Vec::new();
    let mut e = |field: &str, msg: String| errors.push(err(&res, field, msg));

    if spec.partition_ref.name != partition.name {
        e(
            "spec.partitionRef.name",
            format!(
                "refers to GpuPartition {:?}, but the partition for this host is {:?}",
                spec.partition_ref.name, partition.name
            ),
        );
    }
    let slice = partition.slice(&spec.partition_ref.slice);
    let mut location = None;
    match slice {
        None => e(
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
        ),
        Some(sl) => {
            if sl.driver != GpuDriver::Nvidia {
                e("spec.partitionRef.slice", format!("slice {:?} is bound to vfio-pci (passthrough to a VM); an inference server needs a slice with driver nvidia", sl.name));
            }
            if spec.tensor_parallel_size as usize > sl.gpus.len() {
                e("spec.tensorParallelSize", format!("tensor parallel size {} is larger than slice {:?}, which has {} GPUs; lower it to at most {}", spec.tensor_parallel_size, sl.name, sl.gpus.len(), sl.gpus.len()));
            }
            match (spec.unit.location, &sl.consumer) {
                (UnitLocation::Container, Some(ResolvedConsumer::Lxc(v))) => location = Some(Location::Container(*v)),
                (UnitLocation::Container, _) => e("spec.unit.location", format!("slice {:?} has no LXC consumer to run the unit in; set unit.location: Host or give the slice consumer.lxc", sl.name)),
                (UnitLocation::Host, Some(ResolvedConsumer::Lxc(v))) => e("spec.unit.location", format!("slice {:?} belongs to container {v}; run the unit there (unit.location: Container)", sl.name)),
                (UnitLocation::Host, _) => location = Some(Location::Host),
            }
        }
    }
    if spec.tensor_parallel_size == 0 {
        e("spec.tensorParallelSize", "must be at least 1".into());
    }
    let unit_name = match service_unit_name(&spec.unit.name) {
        Ok(n) => Some(n),
        Err(m) => {
            e("spec.unit.name", m);
            None
        }
    };
    if !spec.python.starts_with('/') {
        e(
            "spec.python",
            format!(
                "{:?} must be an absolute path to the interpreter, e.g. /root/ml-env/bin/python3",
                spec.python
            ),
        );
    }
    if spec.model.path.trim().is_empty() {
        e(
            "spec.model.path",
            "is required: a local model directory (absolute path) or a Hugging Face repo id".into(),
        );
    }
    if spec.model.served_name.trim().is_empty() {
        e(
            "spec.model.servedName",
            "is required: the name clients use and /v1/models lists".into(),
        );
    }
    if let Some(sp) = &spec.speculative {
        for (field, msg) in speculative::check(sp) {
            e(&format!("spec.speculative.{field}"), msg);
        }
    }
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
                e(field, m);
            }
        }
    }
    if let Some(f) = spec.mem_fraction_static {
        if !(f > 0.0 && f < 1.0) {
            e(
                "spec.memFractionStatic",
                format!("{f} is outside (0, 1); typical values are 0.8 to 0.9"),
            );
        }
    }
    if spec.listen.port == 0 {
        e("spec.listen.port", "must be 1..65535".into());
    }
    if spec.listen.host.is_empty() || spec.listen.host.chars().any(|c| c.is_whitespace()) {
        e(
            "spec.listen.host",
            format!(
                "{:?} is not an address; use 0.0.0.0 or 127.0.0.1",
                spec.listen.host
            ),
        );
    }
    if spec.startup.stall_after_seconds < 5 {
        e(
            "spec.startup.stallAfterSeconds",
            "must be at least 5 (GPU memory is sampled every few seconds)".into(),
        );
    }
    if spec.startup.deadline_seconds < spec.startup.stall_after_seconds {
        e(
            "spec.startup.deadlineSeconds",
            "must not be shorter than stallAfterSeconds".into(),
        );
    }
    for (i, v) in spec.env.iter().enumerate() {
        let valid = !v.name.is_empty()
            && !v.name.as_bytes()[0].is_ascii_digit()
            && v.name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_');
        if !valid {
            e(&format!("spec.env[{i}].name"), format!("{:?} is not a valid variable name (letters, digits, '_', not starting with a digit)", v.name));
        }
        if command::MANAGED_ENV.contains(&v.name.as_str()) {
            let fix = if v.name == "NCCL_P2P_DISABLE" {
                "set spec.p2p: Disabled instead"
            } else {
                "the agent derives it from the slice's GPUs; remove it"
            };
            e(
                &format!("spec.env[{i}].name"),
                format!("{} is managed by the agent: {fix}", v.name),
            );
        }
        if v.value.contains('\0') {
            e(
                &format!("spec.env[{i}].value"),
                "contains a NUL byte, which no environment can hold".into(),
            );
        }
    }
    for (i, a) in spec.extra_args.iter().enumerate() {
        let field = format!("spec.extraArgs[{i}]");
        if a.contains('\0') {
            e(&field, "contains a NUL byte".into());
        }
        if let Some(opt) = a
            .strip_prefix("--")
            .map(|rest| format!("--{}", rest.split('=').next().unwrap_or(rest)))
        {
            match flags::lookup(&opt) {
                None => e(&field, format!("{opt} is not an SGLang 0.5.23 flag (check the spelling; full names only, no abbreviations)")),
                Some(f) if command::MANAGED_FLAGS.contains(&f.name.as_str()) => {
                    e(&field, format!("{opt} is set by the agent from the spec; use the spec field instead of extraArgs"))
                }
                Some(_) => {}
            }
        }
    }
    if spec.p2p == P2pPolicy::Enabled
        && spec
            .extra_args
            .iter()
            .any(|a| a == "--disable-custom-all-reduce")
    {
        e(
            "spec.extraArgs",
            "--disable-custom-all-reduce contradicts p2p: Enabled".into(),
        );
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let (Some(location), Some(unit_name), Some(slice)) = (location, unit_name, slice) else {
        return Err(vec![err(&res, "spec", "internal: incomplete resolution")]);
    };
    Ok(DesiredServer {
        id: format!("{ns}/{name}"),
        spec: spec.clone(),
        unit: UnitRef {
            location,
            name: unit_name,
        },
        gpus: slice.gpus.clone(),
    })
}

/// Rules across servers: one unit name per location, one port per location, one server per slice.
pub fn check_servers_together(servers: &[DesiredServer]) -> Vec<SpecError> {
    let mut errors = Vec::new();
    for (i, a) in servers.iter().enumerate() {
        for b in &servers[..i] {
            let res = format!("InferenceServer/{}", a.id);
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
