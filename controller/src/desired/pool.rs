//! `GpuNodePool`s and membership in them, checked on the spec alone: the same rules at every door
//! (the webhook through [`super::offline`], the CLI and the agent on manifest files through
//! [`super::select`], the Kubernetes agent through [`super::resolve_partition`]).
//!
//! # Rules
//! - `spec.maxUnavailable` is a count ≥ 0 or a percentage from `0%` to `100%`
//!   ([`gpuplane_crds::MaxUnavailable::check`]); `0` and `"0%"` freeze the members'
//!   disruptions, like `paused`.
//! - A pool's name fits a label value (at most 63 characters): otherwise no partition could
//!   name it in `gpuplane.dev/pool`.
//! - A partition's `gpuplane.dev/pool` label, when set and not empty, is a name a pool can have
//!   ([`gpuplane_crds::is_pool_name`]): a value no pool can have would leave the member waiting
//!   forever for a pool that cannot exist.
//!
//! The pool's own agent still refuses a slot on an invalid `maxUnavailable` (`pool/`): the last
//! line of defence for a pool admitted while the webhook was down.

use super::{Problems, SpecError};
use gpuplane_crds::{is_pool_name, GpuNodePool, GpuPartition, POOL_LABEL, POOL_NAME_MAX};

/// Every problem of `pool`'s spec and name, each naming the field and the fix.
pub fn check(pool: &GpuNodePool) -> Vec<SpecError> {
    let name = pool.metadata.name.as_deref().unwrap_or("<unnamed>");
    let res = crate::resource_key::ResourceKey::pool(name);
    let mut problems = Problems::new(&res);
    if let Some(m) = &pool.spec.max_unavailable {
        if let Err(why) = m.check() {
            problems.add("spec.maxUnavailable", why);
        }
    }
    if name.len() > POOL_NAME_MAX {
        problems.add(
            "metadata.name",
            format!(
                "is {} characters long; a partition names its pool in the label {POOL_LABEL}, whose value has at most {POOL_NAME_MAX}: shorten the name",
                name.len()
            ),
        );
    }
    problems.finish().err().unwrap_or_default()
}

/// The problem of `p`'s `gpuplane.dev/pool` label, if its value cannot name a pool.
pub(super) fn membership(p: &GpuPartition, problems: &mut Problems<'_>) {
    let Some(pool) = gpuplane_crds::pool_of(p) else {
        return;
    };
    if !is_pool_name(pool) {
        problems.add(
            format!("metadata.labels[\"{POOL_LABEL}\"]"),
            format!(
                "{pool:?} cannot be the name of a GpuNodePool (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most {POOL_NAME_MAX} characters); write the metadata.name of the pool this partition belongs to, e.g. {POOL_LABEL}: {}, or remove the label",
                suggestion(pool)
            ),
        );
    }
}

/// A pool name like `value` (`Fleet_A` → `fleet-a`), for the message's example.
fn suggestion(value: &str) -> String {
    let mut s: String = value
        .chars()
        .map(|c| match c {
            'A'..='Z' => c.to_ascii_lowercase(),
            'a'..='z' | '0'..='9' | '.' | '-' => c,
            _ => '-',
        })
        .collect();
    s = s.trim_matches(|c| c == '-' || c == '.').to_string();
    s.truncate(POOL_NAME_MAX);
    let s = s.trim_end_matches(['-', '.']).to_string();
    if is_pool_name(&s) {
        s
    } else {
        "inference-fleet".into()
    }
}

#[cfg(test)]
mod tests;
