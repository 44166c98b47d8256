//! What an agent may write to a `GpuNodePool`'s status (the disruption slots, issue 26): only its
//! own member's entries, and never clear a failure (issue 37: any agent credential could grant
//! every member a slot, free or steal another's, or clear `status.failure`; with `reboot: Auto`
//! a whole pool rebooted at once from one stolen node token).
//!
//! The rules, each on the status as stored (`oldObject`) and as asked (`object`):
//! - `status.failure`: unchanged, or set (none before) naming the agent's own node. Only a
//!   person clears or changes it.
//! - `status.slots`: a slot of another node is never added (but handed on, below) or changed, and removed only when
//!   its member has left the pool (its partition gone or no longer labelled for it: what every
//!   writer does, `pool::decide`); a slot of the agent's own node only for a member of the pool
//!   on that node; no new slot while the pool is paused, nor beyond `maxUnavailable`.
//! - A hand-on (`pool::next_in_line`): in the write that gives back its own member's slot, an
//!   agent may give that slot to another node's member that the stored status lists as
//!   `Waiting` on that node and that is in the pool there — at most one per slot it gives
//!   back, within the budget and not while paused, and that member's entry may then change
//!   from `Waiting` to `Updating` and nothing else. So a stolen node token can hand on only a
//!   slot it holds, to a member that asked for one: no more disruption than the budget.
//! - `status.members`: another node's entry is unchanged, but for one added as `Pending` (a
//!   member not reported yet), removed because its member left the pool, or handed a slot.
//! - The counts and conditions are recomputed by every writer from the members; they are not
//!   judged here (they decide nothing: the slots and the failure do).
//!
//! Anything that cannot be judged (the cluster's partitions unknown) is refused.

use crate::pool;
use gpuplane_crds::{GpuNodePool, GpuNodePoolStatus, MemberStatus, SlotHolder};
use serde_json::Value;

/// The pool's members as the webhook knows them: `(partition name, node)`; `None`: unknown.
pub type Members = Option<Vec<(String, String)>>;

/// `Some(refusal)` when agent `user` of node `mine` asks more than its own entries.
pub fn refuse(user: &str, op: &str, req: &Value, mine: &str, members: &Members) -> Option<String> {
    if op != "UPDATE" || req["subResource"].as_str() != Some("status") {
        return Some(format!(
            "{user} is the gpuplane agent: it may only update a GpuNodePool's status, not {} a pool",
            op.to_ascii_lowercase()
        ));
    }
    let new: GpuNodePool = match serde_json::from_value(req["object"].clone()) {
        Ok(p) => p,
        Err(e) => return Some(format!("{user}: the pool does not parse: {e}")),
    };
    let old: Option<GpuNodePool> = serde_json::from_value(req["oldObject"].clone()).ok();
    let old_st = old.and_then(|p| p.status).unwrap_or_default();
    let new_st = new.status.clone().unwrap_or_default();
    let who = format!("{user} acts for node {mine}");
    let c = Change {
        old: &old_st,
        new: &new_st,
        who: &who,
        mine,
        members,
    };
    failure(c).or_else(|| slots(&new, c)).or_else(|| entries(c))
}

/// One agent's write of a pool's status, as the checks below judge it.
#[derive(Clone, Copy)]
struct Change<'a> {
    old: &'a GpuNodePoolStatus,
    new: &'a GpuNodePoolStatus,
    /// The agent, for messages ("USER acts for node NODE").
    who: &'a str,
    /// The agent's node.
    mine: &'a str,
    members: &'a Members,
}

/// The failure: kept, or a new one naming the agent's own node.
fn failure(c: Change<'_>) -> Option<String> {
    let Change {
        old,
        new,
        who,
        mine,
        ..
    } = c;
    match (&old.failure, &new.failure) {
        (a, b) if a == b => None,
        (None, None) => None,
        (None, Some(f)) if f.node == mine => None,
        (None, Some(f)) => Some(format!(
            "{who}; it may record only its own node's failure, not node {}'s",
            f.node
        )),
        (Some(f), _) => Some(format!(
            "{who}; it may not clear or change the pool's failure (member {} on node {}): only a person removes status.failure",
            f.member, f.node
        )),
    }
}

/// Whether member `name` is in the pool now; `None`: unknown.
fn member_node<'m>(members: &'m Members, name: &str) -> Option<Option<&'m str>> {
    members.as_ref().map(|ms| {
        ms.iter()
            .find(|(n, _)| n == name)
            .map(|(_, node)| node.as_str())
    })
}

/// The slots: other nodes' unchanged (or dropped when their member left), own ones only for
/// own members, none added while paused or past the budget.
fn slots(pool: &GpuNodePool, c: Change<'_>) -> Option<String> {
    let (old, new, who, mine, members) = (c.old, c.new, c.who, c.mine, c.members);
    let freed = old.slots.iter().filter(|s| !new.slots.contains(s));
    if let Some(refused) = freed.filter(|s| s.node != mine).find_map(|s| {
        let what = format!(
            "free or change node {}'s slot (member {})",
            s.node, s.member
        );
        unless_left(members, &s.member, who, || {
            format!("{who}; it may not {what}")
        })
    }) {
        return Some(refused);
    }
    let added: Vec<_> = new
        .slots
        .iter()
        .filter(|s| !old.slots.contains(s))
        .collect();
    let handed: Vec<_> = added.iter().filter(|s| hands_on(c, s)).collect();
    let given_back = old
        .slots
        .iter()
        .filter(|s| s.node == mine && !pool::holds(new, &s.member))
        .count();
    if handed.len() > given_back {
        return Some(format!(
            "{who}; it may hand on only the slots it gives back ({given_back}), not {}",
            handed.len()
        ));
    }
    for s in added.iter().filter(|s| !hands_on(c, s)) {
        if s.node != mine {
            return Some(format!(
                "{who}; it may not give node {}'s member {} a slot",
                s.node, s.member
            ));
        }
        match member_node(members, &s.member) {
            Some(Some(n)) if n == mine => {}
            Some(_) => {
                return Some(format!(
                    "{who}; {} is not a member of this pool on node {mine}",
                    s.member
                ))
            }
            None => return Some(unknown(who)),
        }
    }
    let taken = added.iter().any(|s| !pool::holds(old, &s.member));
    if !taken {
        return None;
    }
    if pool.spec.paused || old.failure.is_some() {
        return Some(format!("{who}; the pool is paused: no slot may be taken"));
    }
    let n = members.as_ref().map_or(0, Vec::len);
    let budget = pool.spec.max_unavailable().slots(n);
    match budget {
        Some(b) if new.slots.len() <= b => None,
        _ => Some(format!(
            "{who}; {} slots would be held, more than maxUnavailable allows for {n} members",
            new.slots.len()
        )),
    }
}

/// Whether slot `s` (new in this write) hands on a slot to another node's member: one the stored
/// status lists as waiting on that node, in the pool there now. (That one was given back in the
/// same write is checked by the caller.)
fn hands_on(c: Change<'_>, s: &SlotHolder) -> bool {
    s.node != c.mine
        && !pool::holds(c.old, &s.member)
        && c.old
            .members
            .iter()
            .any(|e| e.name == s.member && e.node == s.node && e.state == pool::WAITING)
        && member_node(c.members, &s.member) == Some(Some(s.node.as_str()))
}

/// Whether another node's entry `e` became `n` by a hand-on of this write: `Waiting` to
/// `Updating` on the same node, with the slot handed to it.
fn handed_entry(c: Change<'_>, e: &MemberStatus, n: &MemberStatus) -> bool {
    e.state == pool::WAITING
        && n.state == pool::UPDATING
        && n.node == e.node
        && c.new
            .slots
            .iter()
            .any(|s| s.member == e.name && s.node == e.node && hands_on(c, s))
}

/// The member entries: another node's unchanged, added as `Pending`, removed when its member
/// left, or handed a slot.
fn entries(c: Change<'_>) -> Option<String> {
    let (old, new, who, mine, members) = (c.old, c.new, c.who, c.mine, c.members);
    for e in old.members.iter().filter(|e| e.node != mine) {
        match new.members.iter().find(|n| n.name == e.name) {
            Some(n) if n == e || handed_entry(c, e, n) => {}
            Some(_) => {
                return Some(format!(
                    "{who}; it may not change node {}'s member entry ({})",
                    e.node, e.name
                ))
            }
            None => {
                let what = format!("remove node {}'s member entry ({})", e.node, e.name);
                let refused = unless_left(members, &e.name, who, || {
                    format!("{who}; it may not {what}")
                });
                if refused.is_some() {
                    return refused;
                }
            }
        }
    }
    for e in new.members.iter().filter(|e| e.node != mine) {
        let before = old.members.iter().any(|o| o.name == e.name);
        if !before && e.state != "Pending" {
            return Some(format!(
                "{who}; it may add another node's member ({}) only as Pending",
                e.name
            ));
        }
    }
    None
}

/// `None` when `member` has left the pool (what every writer drops), else the refusal `why`,
/// or that the pool's members are unknown.
fn unless_left(
    members: &Members,
    member: &str,
    who: &str,
    why: impl FnOnce() -> String,
) -> Option<String> {
    match member_node(members, member) {
        Some(None) => None,
        Some(Some(_)) => Some(why()),
        None => Some(unknown(who)),
    }
}

fn unknown(who: &str) -> String {
    format!("{who}; the webhook cannot list the pool's members (its cache of GpuPartitions has not synced), so the change is refused")
}

#[cfg(test)]
mod tests;
