//! The unit a server would get is rendered during validation, so that a spec whose text the
//! unit cannot hold fails here, before the first host write, and not in the middle of a
//! converge after the old server was stopped and the GPUs rebound.
//!
//! Each part of the unit that comes from the spec is rendered on its own first, so the error
//! names the spec field (`spec.model.servedName`), never a renderer internal such as
//! `exec_start[4]`. Then the whole unit is rendered as the planner would render it (P2P on and
//! off, with as many CUDA indices as the slice has GPUs): anything left that fails there
//! (a line over systemd's limit) is reported on `spec`.

use super::Problems;
use crate::sglang::command::{self, Runtime};
use crate::systemd::unit::{self, UnitError, UnitSpec};
use gpuplane_crds::InferenceServerSpec;

/// Stands in for the executable when one argument is rendered on its own (any absolute path).
const STAND_IN_EXECUTABLE: &str = "/bin/true";

/// Records a problem for every spec field whose text the unit cannot hold, unless that field
/// already has one.
pub(super) fn unit_renders(
    pr: &mut Problems,
    id: &str,
    spec: &InferenceServerSpec,
    rt: &Runtime,
    gpus: usize,
) {
    for (word, field) in command::argv_with_fields(spec, true) {
        let Some(field) = field else { continue };
        let exec_start = if field == "spec.python" {
            vec![word]
        } else {
            vec![STAND_IN_EXECUTABLE.into(), word]
        };
        check(pr, &field, &stand_in(exec_start, vec![], String::new()));
    }
    for (i, v) in spec.env.iter().enumerate() {
        let one = stand_in(
            vec![STAND_IN_EXECUTABLE.into()],
            vec![(v.name.clone(), v.value.clone())],
            String::new(),
        );
        if let Err(e) = unit::render(&one) {
            let part = if matches!(e, UnitError::InvalidEnvName { .. }) {
                "name"
            } else {
                "value"
            };
            add(pr, &format!("spec.env[{i}].{part}"), &e);
        }
    }
    let description = command::unit_spec(id, spec, rt, &[], false).description;
    check(
        pr,
        "spec.model.servedName",
        &stand_in(vec![STAND_IN_EXECUTABLE.into()], vec![], description),
    );
    if !pr.errors.is_empty() {
        // Already invalid; the whole unit is rendered only for a spec that passed every check.
        return;
    }
    let indices: Vec<u32> = (0..gpus as u32).collect();
    for p2p_disabled in [false, true] {
        if let Err(e) = unit::render(&command::unit_spec(id, spec, rt, &indices, p2p_disabled)) {
            pr.add("spec", format!("the server's unit cannot be rendered: {e}"));
            return;
        }
    }
}

/// A unit with only these parts from the spec.
fn stand_in(
    exec_start: Vec<String>,
    environment: Vec<(String, String)>,
    description: String,
) -> UnitSpec {
    UnitSpec {
        description,
        exec_start,
        environment,
        ..UnitSpec::default()
    }
}

/// Renders `u`; a failure is a problem of `field`.
fn check(pr: &mut Problems, field: &str, u: &UnitSpec) {
    if let Err(e) = unit::render(u) {
        add(pr, field, &e);
    }
}

/// A problem of `field`, unless the field has one already (said once, by the clearer check).
fn add(pr: &mut Problems, field: &str, e: &UnitError) {
    if pr.errors.iter().any(|x| x.field == field) {
        return;
    }
    pr.add(
        field,
        format!("cannot be written into a systemd unit: {}", reason(e)),
    );
}

/// The renderer's reason, without its own field names (the caller names the spec field).
fn reason(e: &UnitError) -> String {
    match e {
        UnitError::Nul { .. } => "it contains a NUL byte".into(),
        UnitError::InvalidValue { reason, .. } => reason.clone(),
        UnitError::UnsafeExecutable { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}
