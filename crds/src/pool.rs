//! `GpuNodePool`: a group of hosts whose disruptive changes are rolled out a few at a time.
//!
//! Members are the `GpuPartition`s labelled [`POOL_LABEL`]`=<pool name>` (a label, not a
//! Kubernetes node selector: a Proxmox host that is no Kubernetes node is a member too). The
//! agents take and give back disruption slots in the pool's status with optimistic concurrency
//! (ARCHITECTURE.md, "Disruption budget"); this crate holds only the shapes.

use crate::condition::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The label that makes a `GpuPartition` a member of a pool: `gpuplane.dev/pool=<pool name>`.
pub const POOL_LABEL: &str = "gpuplane.dev/pool";

/// The longest pool name a partition can name: a label value has at most 63 characters.
pub const POOL_NAME_MAX: usize = 63;

/// Whether `s` can be the name of a pool that a partition names in its [`POOL_LABEL`]: a
/// `GpuNodePool`'s name is a DNS-1123 subdomain (lower-case letters, digits, `-` and `.`,
/// starting and ending with a letter or digit), and as a label value it has at most
/// [`POOL_NAME_MAX`] characters. A label value outside this (`Fleet_A`) names no pool there can
/// ever be.
pub fn is_pool_name(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= POOL_NAME_MAX
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-' || c == b'.')
        && s.split('.')
            .all(|part| !part.is_empty() && !part.starts_with('-') && !part.ends_with('-'))
}

/// The pool a partition is a member of: its [`POOL_LABEL`], when set and not empty. Read here,
/// beside the label, so that every layer of the agent (validation, the reboot gate, the budget)
/// reads membership the same way.
pub fn pool_of(p: &crate::GpuPartition) -> Option<&str> {
    p.metadata
        .labels
        .as_ref()?
        .get(POOL_LABEL)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// A pool of hosts and the budget of their disruptions.
///
/// A member's agent takes a slot before the first step that stops a server, restarts a unit,
/// stops a container or unbinds a GPU a consumer uses, and gives it back when its host is whole
/// again for the new spec. At most `maxUnavailable` members are disrupted (or unavailable for
/// another reason) at a time; a member that fails keeps its slot and pauses the pool.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "gpuplane.dev",
    version = "v1alpha1",
    kind = "GpuNodePool",
    plural = "gpunodepools",
    shortname = "gpupool",
    status = "GpuNodePoolStatus",
    printcolumn = r#"{"name":"Members","type":"integer","jsonPath":".status.memberCount"}"#,
    printcolumn = r#"{"name":"Updated","type":"integer","jsonPath":".status.updatedMemberCount"}"#,
    printcolumn = r#"{"name":"Unavailable","type":"integer","jsonPath":".status.unavailableMemberCount"}"#,
    printcolumn = r#"{"name":"Degraded","type":"integer","jsonPath":".status.degradedMemberCount"}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type==\"Paused\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GpuNodePoolSpec {
    /// How many members may be disrupted at once: a count (`2`) or a percentage of the members
    /// (`"25%"`, rounded down, at least 1). Members already unavailable for another reason (a
    /// failed member, an agent whose Lease expired) count against it. `0` (or `"0%"`) freezes
    /// every disruptive change of the members, like `paused`. Anything else (a negative count,
    /// a percentage above 100%, a string that is not a percentage such as `"25"`) is refused.
    /// Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent")]
    pub max_unavailable: Option<MaxUnavailable>,
    /// When true, no member starts a disruptive change (members already updating finish).
    #[serde(default)]
    pub paused: bool,
}

/// `maxUnavailable`: a count or a percentage.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum MaxUnavailable {
    Count(i64),
    Percent(String),
}

impl GpuNodePoolSpec {
    /// `maxUnavailable`, 1 when not given.
    pub fn max_unavailable(&self) -> MaxUnavailable {
        self.max_unavailable
            .clone()
            .unwrap_or(MaxUnavailable::Count(1))
    }
}

fn int_or_percent(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true
    })
}

impl MaxUnavailable {
    /// The number of slots for a pool of `members`: a count as is, a percentage rounded down
    /// but at least 1 (a small pool still moves), except `"0%"`: none, as `0` (as Kubernetes
    /// reads a Deployment's or a PodDisruptionBudget's `maxUnavailable`). An invalid value (see
    /// [`MaxUnavailable::check`]) is `None`: the pool then freezes rather than guess, and its
    /// status says why.
    pub fn slots(&self, members: usize) -> Option<usize> {
        match self {
            MaxUnavailable::Count(n) => usize::try_from(*n).ok(),
            MaxUnavailable::Percent(s) => match percent(s)? {
                0 => Some(0),
                pct => Some((members * pct / 100).max(1)),
            },
        }
    }

    /// Whether the value is a count ≥ 0 or a percentage from `0%` to `100%`; else what is
    /// wrong and how to write it (without the field's name).
    pub fn check(&self) -> Result<(), String> {
        let fix = r#"write e.g. 1 or "25%""#;
        match self {
            MaxUnavailable::Count(n) if *n < 0 => Err(format!(
                "{n} is not a count ≥ 0 or a percentage 0%–100%; {fix}"
            )),
            MaxUnavailable::Count(_) => Ok(()),
            MaxUnavailable::Percent(s) if percent(s).is_some() => Ok(()),
            MaxUnavailable::Percent(s)
                if !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Err(format!(
                    "{s:?} is not a count ≥ 0 or a percentage 0%–100%: a count is written without quotes; write {s} or \"{s}%\""
                ))
            }
            MaxUnavailable::Percent(s) => Err(format!(
                "{s:?} is not a count ≥ 0 or a percentage 0%–100%; {fix}"
            )),
        }
    }
}

/// `"25%"` → 25: digits only, then `%`, at most 100.
fn percent(s: &str) -> Option<usize> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<usize>().ok().filter(|p| *p <= 100)
}

/// What the pool's members are doing, counted the way OpenShift's MachineConfigPool counts.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuNodePoolStatus {
    /// The pool generation the last writer saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Partitions labelled for the pool.
    #[serde(default)]
    pub member_count: u32,
    /// Members whose host is whole for their current spec.
    #[serde(default)]
    pub updated_member_count: u32,
    /// Members whose partition is `Ready` (on the new spec or still on the old one).
    #[serde(default)]
    pub ready_member_count: u32,
    /// Members holding a slot, failed, or whose agent's Lease expired.
    #[serde(default)]
    pub unavailable_member_count: u32,
    /// Members that failed (`Stalled`).
    #[serde(default)]
    pub degraded_member_count: u32,
    /// The disruption slots, one per member allowed to disrupt its host now. Written only with
    /// the pool's `resourceVersion` (a replace), so two agents never both take the last one.
    #[serde(default)]
    pub slots: Vec<SlotHolder>,
    /// Each member as its agent last reported it.
    #[serde(default)]
    pub members: Vec<MemberStatus>,
    /// The failure that paused the pool. Nothing starts while it is set; a person removes it
    /// (after fixing the spec, or accepting the failure) with
    /// `kubectl patch gpunodepool NAME --subresource=status --type=json -p '[{"op":"remove","path":"/status/failure"}]'`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<PoolFailure>,
    /// `Updating`, `Updated`, `Degraded`, `Paused`, kstatus's `Reconciling`/`Stalled`, and `Ready`
    /// (both of those `False`: every member updated, no slot held, no failure).
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// One held disruption slot.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlotHolder {
    /// The member (`GpuPartition` name).
    pub member: String,
    /// Its node.
    pub node: String,
    /// What it disrupts first (a step, e.g. `restart unit container:129/sglang-qwen`).
    #[serde(default)]
    pub reason: String,
    /// When it took the slot (RFC 3339).
    #[serde(default)]
    pub since: String,
}

/// One member, as its agent last reported it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The member (`GpuPartition` name).
    pub name: String,
    pub node: String,
    /// `Updated`, `Waiting` (for a slot), `Updating` (holds a slot), `Degraded` (failed),
    /// `Unavailable` (its agent's Lease expired) or `Pending` (its agent has not reported).
    pub state: String,
    /// What it waits for, in words (a slot, its servers, a person).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub waiting_for: String,
}

/// The failure that paused a pool.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolFailure {
    /// The member that failed (`GpuPartition` name) and its node.
    pub member: String,
    pub node: String,
    /// The step or resource that failed.
    pub step: String,
    /// The failing condition's reason (e.g. `Crashed`, `ApplyFailed`).
    pub reason: String,
    pub message: String,
    /// When the pool paused (RFC 3339).
    pub since: String,
}
