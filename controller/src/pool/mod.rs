//! The disruption budget of a `GpuNodePool`, decided purely: given the pool as read, its members
//! as listed and what one member asks, the pool's next status and the answer.
//!
//! The caller (`reconcile/budget.rs`) reads the pool, lists its members and their agents'
//! Leases, calls [`decide`], and writes the new status only with the `resourceVersion` it read
//! (a replace: a stale write is refused with 409 and the whole read-decide-write is repeated).
//! So every change of the slots is decided on the latest slots: two agents never both take the
//! last one. ARCHITECTURE.md, "Disruption budget", has the failure modes.
//!
//! # Guarantees
//! - A slot is granted only while the pool is not paused (`spec.paused`, or a failure recorded
//!   in `status.failure`) and fewer than `maxUnavailable` members are unavailable: holding a
//!   slot, failed (`Stalled`), or whose agent's Lease has expired (the asker itself aside).
//! - A slot is given back only by its holder reporting its host whole ([`State::Whole`]), its
//!   servers failed on their own ([`State::ServersFailed`]), or its servers still starting past
//!   the bound ([`State::ServersPending`]); by the holder leaving the pool (its partition gone
//!   or unlabelled), or by a person. A slot given back is handed on in the same write to the
//!   next member in line ([`next_in_line`]) when that member may have one by the rules above.
//! - A failed holder (its partition `Stalled`: what the partition itself does) keeps its slot
//!   and pauses the pool once per slot: a person who clears the failure (accepting it) is not
//!   overruled by the same failure again. A tenant's server that fails never pauses the pool
//!   and never holds a slot past its bound: one namespace cannot freeze the fleet.
//! - `Ready=True` exactly when both `Reconciling` and `Stalled` are `False`: every member
//!   updated, no slot held, no failure (kstatus and the GitOps health checks read it so).
//! - Counts and conditions are recomputed from the members on every write, so any writer
//!   leaves them consistent with the slots it wrote.

use gpuplane_crds::condition::{Condition, Time};
use gpuplane_crds::reason::Reason;
use gpuplane_crds::{
    set_condition, GpuNodePool, GpuNodePoolStatus, MemberStatus, PoolFailure, SlotHolder,
};

/// Condition types of a pool.
pub mod types {
    pub const UPDATING: &str = "Updating";
    pub const UPDATED: &str = "Updated";
    pub const PAUSED: &str = "Paused";
    pub use gpuplane_crds::condition::types::{DEGRADED, READY, RECONCILING, STALLED};
}

/// One member as the API shows it to the writer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Member {
    /// The `GpuPartition`'s name.
    pub name: String,
    pub node: String,
    /// Its partition says `Ready=True`.
    pub ready: bool,
    /// Its partition says `Stalled=True`.
    pub stalled: bool,
    /// Its agent's Lease exists and has run out (`kubeapi::lease::is_live_claim` false). A
    /// member whose agent never took a Lease is not counted: it is `Pending`.
    pub agent_gone: bool,
}

/// Where the asking member stands after its reconcile.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Whole for its current spec: partition Ready, every server Ready (and smoke-tested where
    /// a smoke test is set), nothing left to do. Gives its slot back.
    Whole,
    /// Converging (with its slot, or on something that needs none).
    Working,
    /// The partition is whole; its servers are still starting (or being smoke-tested). A
    /// server's own start is a tenant's business: the slot is kept at most `bound_secs` after
    /// it was taken (the longest startup deadline of those servers, plus the smoke test's
    /// budget where one is set), then given back.
    ServersPending { bound_secs: u64 },
    /// The partition is whole; some servers failed on their own (`Stalled`, or a smoke test
    /// that failed): a tenant's failure ends in its own server. Gives the slot back and never
    /// pauses the pool; only what the partition itself does pauses it.
    ServersFailed { servers: Vec<String> },
    /// Failed: keeps its slot; pauses the pool (once per slot) when it holds one.
    Failed {
        step: String,
        reason: String,
        message: String,
    },
    /// Leaving the pool (its partition deleted and restored): gives its slot back.
    Leaving,
}

/// What a member asks.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    /// A slot, before its first disruptive step (`reason`: that step and why).
    Slot { reason: String },
    /// Records where it stands (and gives back or keeps its slot accordingly).
    Report(State),
}

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A slot was taken now.
    Granted,
    /// The member already holds a slot.
    Held,
    /// No slot: why, in words a person can act on (who holds the slots, what paused the pool).
    Denied(String),
    /// The report was recorded.
    Recorded,
}

/// The pool's next status after `who` (member `who`, on `node`) asks `ask`; `members` are
/// the partitions labelled for the pool, `now` the caller's clock. A slot given back is handed
/// on in the same write ([`hand_on`]).
pub fn decide(
    pool: &GpuNodePool,
    members: &[Member],
    who: &str,
    node: &str,
    ask: &Ask,
    now: &Time,
) -> (GpuNodePoolStatus, Answer) {
    decide_with(pool, members, who, node, ask, now, true)
}

/// [`decide`], handing a slot given back on to the next waiter only when `hand_on` (the
/// caller's fallback when the API server refused a write that handed one on).
pub fn decide_with(
    pool: &GpuNodePool,
    members: &[Member],
    who: &str,
    node: &str,
    ask: &Ask,
    now: &Time,
    hand_on: bool,
) -> (GpuNodePoolStatus, Answer) {
    let old = pool.status.clone().unwrap_or_default();
    let mut st = old.clone();
    // A member leaving is no member any more, though its partition is still listed.
    let staying: Vec<Member>;
    let members = if matches!(ask, Ask::Report(State::Leaving)) {
        staying = members.iter().filter(|m| m.name != who).cloned().collect();
        &staying[..]
    } else {
        members
    };
    let since = now.0.to_string();
    // Holders that left the pool hold nothing.
    st.slots
        .retain(|s| members.iter().any(|m| m.name == s.member));
    let mine = st.slots.iter().position(|s| s.member == who);
    let answer = match ask {
        Ask::Slot { reason } => match mine {
            Some(_) => {
                set_member(&mut st, who, node, UPDATING, WHOLE_AGAIN);
                Answer::Held
            }
            None => match refusal(pool, &st, members, who) {
                Some(why) => {
                    set_member(&mut st, who, node, WAITING, "a disruption slot");
                    Answer::Denied(why)
                }
                None => {
                    st.slots.push(SlotHolder {
                        member: who.into(),
                        node: node.into(),
                        reason: safe(reason),
                        since: since.clone(),
                    });
                    set_member(&mut st, who, node, UPDATING, WHOLE_AGAIN);
                    Answer::Granted
                }
            },
        },
        Ask::Report(state) => {
            record(&mut st, mine, who, node, state, now);
            Answer::Recorded
        }
    };
    if matches!(ask, Ask::Report(State::Leaving)) {
        st.members.retain(|m| m.name != who);
    }
    if hand_on && holds(&old, who) && !holds(&st, who) {
        if let Some(m) = next_in_line(&st, pool, members, who) {
            hand_to(&mut st, m, who, &since);
        }
    }
    summarize(&mut st, pool, members, now);
    (st, answer)
}

/// Whether asking `pool` (as read) for a slot for `who` on `node` answers [`Answer::Held`] and
/// changes nothing of `who`'s: it holds a slot there and its entry already says so (as a grant
/// or a hand-on left it). Then [`decide`] would change at most the counts, which are every
/// writer's to recompute, so the caller needs neither the member list nor a write: the slot's
/// holder starts its step at once (the common case of a member handed a slot, and of a holder
/// asking again on each reconcile of its change).
pub fn already_held(pool: &GpuNodePool, who: &str, node: &str) -> bool {
    let Some(st) = pool.status.as_ref() else {
        return false;
    };
    st.slots.iter().any(|s| s.member == who && s.node == node)
        && st.members.iter().any(|e| {
            e.name == who && e.node == node && e.state == UPDATING && e.waiting_for == WHOLE_AGAIN
        })
}

/// Whether `member` holds a slot in `st` (granted or handed on).
pub fn holds(st: &GpuNodePoolStatus, member: &str) -> bool {
    st.slots.iter().any(|s| s.member == member)
}

/// What a slot's holder waits for: its entry's `waitingFor`.
const WHOLE_AGAIN: &str = "its host to be whole again";

/// The member a slot given back by `who` is handed on to ([`decide`]), if any: the first the
/// status lists as `Waiting` (name order, the order [`may_help`] wakes them in) that is still
/// listed on the node its entry names, not `Stalled`, whose agent is alive, and that [`refusal`]
/// would grant a slot now (the pool not paused, the budget not spent).
///
/// So a freed slot reaches the next member in the write that frees it: that member's agent,
/// woken by the pool's change, finds its slot held and starts its first disruptive step
/// without a write of its own, and no other waiter's poll can take the slot first. The
/// webhook admits exactly this hand-on (`webhook/agent/pool.rs`), nothing wider.
pub fn next_in_line<'m>(
    st: &GpuNodePoolStatus,
    pool: &GpuNodePool,
    members: &'m [Member],
    who: &str,
) -> Option<&'m Member> {
    st.members
        .iter()
        .filter(|e| e.state == WAITING && e.name != who)
        .filter_map(|e| {
            members
                .iter()
                .find(|m| m.name == e.name && m.node == e.node)
        })
        .filter(|m| !m.stalled && !m.agent_gone)
        .find(|m| !holds(st, &m.name))
        .filter(|m| refusal(pool, st, members, &m.name).is_none())
}

/// Gives member `m` the slot `who` gave back, taken at `since`.
fn hand_to(st: &mut GpuNodePoolStatus, m: &Member, who: &str, since: &str) {
    st.slots.push(SlotHolder {
        member: m.name.clone(),
        node: m.node.clone(),
        reason: format!("{HANDED_MARK}{}", safe(who)),
        since: since.to_string(),
    });
    set_member(st, &m.name, &m.node, UPDATING, WHOLE_AGAIN);
}

/// The reason of a slot handed on (followed by the member that gave it back).
pub const HANDED_MARK: &str = "handed on by ";

/// A member's entry while it waits for a slot, and while it holds one.
pub const WAITING: &str = "Waiting";
pub const UPDATING: &str = "Updating";

/// Whether a change of `pool` (as written) can help member `who`, which waits for a slot: the
/// pool grants slots now, and `who` is among the first waiters (in name order, the order the
/// status lists its members) for the slots free by the status's own counts. A member the status
/// does not list as waiting is always woken (its wait was not recorded yet), and so is one that
/// holds a slot (handed on to it, [`next_in_line`]).
///
/// Only a wake-up hint, so that a slot given back wakes the member that takes it rather than
/// every waiter at once (each then reconciling and asking, on a busy API server): the slot is
/// still decided by [`decide`] on a fresh read, and every waiter still asks again after its
/// poll interval, so a first waiter whose agent is gone delays the others by at most that.
pub fn may_help(pool: &GpuNodePool, who: &str) -> bool {
    let Some(st) = pool.status.as_ref() else {
        return true;
    };
    if holds(st, who) {
        return true;
    }
    let mut waiting = st.members.iter().filter(|m| m.state == WAITING);
    let Some(rank) = waiting.position(|m| m.name == who) else {
        return true;
    };
    if pool.spec.paused || st.failure.is_some() {
        return false;
    }
    let budget = pool
        .spec
        .max_unavailable()
        .slots(st.member_count as usize)
        .unwrap_or(0);
    let free = budget.saturating_sub(st.unavailable_member_count as usize);
    rank < free
}

/// Records member `who`'s report `state` (`mine`: the slot it holds): a whole host or one
/// leaving gives its slot back; a failure while holding one pauses the pool, once per slot.
fn record(
    st: &mut GpuNodePoolStatus,
    mine: Option<usize>,
    who: &str,
    node: &str,
    state: &State,
    now: &Time,
) {
    match state {
        State::Whole | State::Leaving => {
            st.slots.retain(|s| s.member != who);
            set_member(st, who, node, "Updated", "");
        }
        State::Working => {
            set_member(st, who, node, UPDATING, WHOLE_AGAIN);
        }
        State::ServersPending { bound_secs } => {
            servers_pending(st, mine, who, node, *bound_secs, now);
        }
        State::ServersFailed { servers } => {
            st.slots.retain(|s| s.member != who);
            let failed = safe(&servers.join(", "));
            let why = format!("nothing; servers failed on their own: {failed}");
            set_member(st, who, node, "Updated", &why);
        }
        State::Failed {
            step,
            reason,
            message,
        } => {
            set_member(st, who, node, "Degraded", "a person (it failed)");
            let Some(i) = mine else {
                return;
            };
            // Once per slot: the slot's reason is marked when the pause is written.
            if !st.slots[i].reason.starts_with(FAILED_MARK) {
                st.slots[i].reason = format!("{FAILED_MARK}{}", safe(reason));
                st.failure = Some(PoolFailure {
                    member: who.into(),
                    node: node.into(),
                    step: safe(step),
                    reason: safe(reason),
                    message: safe(message),
                    since: now.0.to_string(),
                });
            }
        }
    }
}

/// A member whose partition is whole while its servers still start: its slot is kept until
/// `bound_secs` after it was taken (a slot whose time cannot be read counts as taken now), then
/// given back.
fn servers_pending(
    st: &mut GpuNodePoolStatus,
    mine: Option<usize>,
    who: &str,
    node: &str,
    bound_secs: u64,
    now: &Time,
) {
    let held_secs = mine
        .and_then(|i| st.slots[i].since.parse::<jiff::Timestamp>().ok())
        .map(|t| now.0.duration_since(t).as_secs().max(0) as u64);
    match (mine, held_secs) {
        (Some(_), Some(h)) if h >= bound_secs => {
            st.slots.retain(|s| s.member != who);
            let why = format!("its servers to be ready (the slot was given back after {bound_secs} s: a server's own start does not hold the pool)");
            set_member(st, who, node, UPDATING, &why);
        }
        (Some(_), _) => {
            let why = format!("its servers to be ready (the slot is given back at the latest {bound_secs} s after it was taken)");
            set_member(st, who, node, UPDATING, &why);
        }
        (None, _) => set_member(st, who, node, UPDATING, "its servers to be ready"),
    }
}

/// Text from a host or a spec, made safe for the pool's status: one line, at most 512 bytes.
fn safe(s: &str) -> String {
    crate::text::sanitize(s, 512)
}

/// The prefix of a failed holder's slot reason (its pause was written).
pub const FAILED_MARK: &str = "failed: ";

/// Why no slot can be given to `who` now, or `None` when one can.
fn refusal(
    pool: &GpuNodePool,
    st: &GpuNodePoolStatus,
    members: &[Member],
    who: &str,
) -> Option<String> {
    if pool.spec.paused {
        return Some("the pool is paused (spec.paused)".into());
    }
    if let Some(f) = &st.failure {
        return Some(format!(
            "the pool is paused: member {} failed at {} ({}); a person removes status.failure to resume",
            f.member, f.step, f.reason
        ));
    }
    let mu = pool.spec.max_unavailable();
    if let Some(why) = invalid(pool) {
        return Some(why);
    }
    let budget = mu.slots(members.len()).unwrap_or(0);
    let busy = unavailable(st, members, Some(who));
    if busy.len() < budget {
        return None;
    }
    if budget == 0 {
        return Some(format!(
            "maxUnavailable {} gives no slot: the members' disruptions are frozen (as with spec.paused); raise it to let a member change its host",
            show_max(&mu)
        ));
    }
    Some(format!(
        "{} of {budget} slots taken (maxUnavailable {}): {}",
        busy.len(),
        show_max(&mu),
        busy.join(", ")
    ))
}

/// Why the pool's `maxUnavailable` cannot be read, if it cannot: the last line of defence for a
/// pool admitted while the webhook was down (every door refuses it, `desired::pool`).
fn invalid(pool: &GpuNodePool) -> Option<String> {
    let why = pool.spec.max_unavailable().check().err()?;
    Some(format!(
        "spec.maxUnavailable: {why}; no slot is granted until the pool is fixed"
    ))
}

fn show_max(mu: &gpuplane_crds::MaxUnavailable) -> String {
    match mu {
        gpuplane_crds::MaxUnavailable::Count(n) => n.to_string(),
        gpuplane_crds::MaxUnavailable::Percent(p) => p.clone(),
    }
}

/// The unavailable members, in words (`name (why)`), `except` one: slot holders, failed
/// members, members whose agent is gone.
fn unavailable(st: &GpuNodePoolStatus, members: &[Member], except: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for s in &st.slots {
        if Some(s.member.as_str()) != except {
            out.push(format!("{} (holds a slot)", s.member));
        }
    }
    for m in members {
        if Some(m.name.as_str()) == except || holds(st, &m.name) {
            continue;
        }
        if m.stalled {
            out.push(format!("{} (Stalled)", m.name));
        } else if m.agent_gone {
            out.push(format!("{} (its agent's Lease expired)", m.name));
        }
    }
    out
}

/// Sets `who`'s entry (kept in name order).
fn set_member(st: &mut GpuNodePoolStatus, who: &str, node: &str, state: &str, waiting_for: &str) {
    let entry = MemberStatus {
        name: who.into(),
        node: node.into(),
        state: state.into(),
        waiting_for: waiting_for.into(),
    };
    match st.members.iter_mut().find(|m| m.name == who) {
        Some(m) => *m = entry,
        None => {
            st.members.push(entry);
            st.members.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }
}

/// Members, counts and conditions from the slots and the members as listed.
fn summarize(st: &mut GpuNodePoolStatus, pool: &GpuNodePool, members: &[Member], now: &Time) {
    st.observed_generation = pool.metadata.generation;
    list_members(st, members);
    count_members(st, members);
    let cond = |st: &mut GpuNodePoolStatus, t: &str, on: bool, reason: Reason, message: String| {
        set_condition(
            &mut st.conditions,
            Condition {
                type_: t.into(),
                status: if on { "True" } else { "False" }.into(),
                reason: reason.into(),
                message,
                observed_generation: pool.metadata.generation,
                last_transition_time: now.clone(),
            },
        );
    };
    let bad = invalid(pool);
    let (paused, p_reason, p_msg) = pause(st, pool, members, bad.as_deref());
    cond(st, types::PAUSED, paused, p_reason, p_msg.clone());
    let degraded = st.failure.is_some() || st.degraded_member_count > 0;
    let d_reason = match (st.failure.is_some(), degraded) {
        (true, _) => Reason::MemberFailed,
        (false, true) => Reason::MembersDegraded,
        (false, false) => Reason::AsExpected,
    };
    let d_msg = if degraded {
        format!("{} members degraded; {p_msg}", st.degraded_member_count)
    } else {
        "no member failed".to_string()
    };
    cond(st, types::DEGRADED, degraded, d_reason, d_msg);
    let waiting = st.members.iter().filter(|e| e.state == WAITING).count();
    let updating = st.slots.len() + waiting;
    let counts = format!(
        "{} of {} members updated, {} hold slots, {} wait for one",
        st.updated_member_count,
        st.member_count,
        st.slots.len(),
        waiting
    );
    let all = st.member_count > 0 && st.updated_member_count == st.member_count;
    let all_reason = if all {
        Reason::AllUpdated
    } else {
        Reason::Updating
    };
    cond(
        st,
        types::UPDATED,
        all && st.slots.is_empty(),
        all_reason,
        counts.clone(),
    );
    let up_reason = if updating > 0 {
        Reason::Updating
    } else {
        Reason::Idle
    };
    cond(st, types::UPDATING, updating > 0, up_reason, counts.clone());
    // kstatus: at most one of the pair is True.
    let stuck = st.failure.is_some() || bad.is_some();
    let reason = if bad.is_some() {
        Reason::InvalidSpec
    } else if stuck {
        Reason::MemberFailed
    } else if updating > 0 || !all {
        Reason::Updating
    } else {
        Reason::AllUpdated
    };
    // The pair follows the reason's standing, as every resource's does (`status/`).
    let (rec, stl) = reason.standing().pair();
    let msg = if stuck { p_msg } else { counts };
    cond(st, types::RECONCILING, rec, reason, msg.clone());
    cond(st, types::STALLED, stl, reason, msg.clone());
    // Ready (what `kubectl wait` and the GitOps health checks read): every member updated and
    // whole, no slot held, no failure.
    let ready_reason = if rec || stl {
        reason
    } else {
        Reason::AllUpdated
    };
    cond(st, types::READY, !rec && !stl, ready_reason, msg);
}

/// Only partitions still labelled are members; one not yet reported is Pending.
fn list_members(st: &mut GpuNodePoolStatus, members: &[Member]) {
    st.members
        .retain(|e| members.iter().any(|m| m.name == e.name));
    for m in members {
        if !st.members.iter().any(|e| e.name == m.name) {
            set_member(st, &m.name, &m.node, "Pending", "its agent's first report");
        }
    }
}

/// The member counts: all, updated (and its agent alive), ready, unavailable, degraded.
fn count_members(st: &mut GpuNodePoolStatus, members: &[Member]) {
    let gone = |name: &str| members.iter().any(|m| m.name == name && m.agent_gone);
    let stalled = |name: &str| members.iter().any(|m| m.name == name && m.stalled);
    st.member_count = members.len() as u32;
    st.updated_member_count = st
        .members
        .iter()
        .filter(|e| e.state == "Updated" && !gone(&e.name))
        .count() as u32;
    st.ready_member_count = members.iter().filter(|m| m.ready).count() as u32;
    st.unavailable_member_count = unavailable(st, members, None).len() as u32;
    st.degraded_member_count = st
        .members
        .iter()
        .filter(|e| e.state == "Degraded" || stalled(&e.name))
        .count() as u32;
}

/// Whether the pool grants no slot, the reason and the words: an invalid spec, a member's
/// failure, `spec.paused`, a budget of none; else not paused.
fn pause(
    st: &GpuNodePoolStatus,
    pool: &GpuNodePool,
    members: &[Member],
    bad: Option<&str>,
) -> (bool, Reason, String) {
    match (bad, &st.failure, pool.spec.paused) {
        (Some(why), _, _) => (true, Reason::InvalidSpec, why.to_string()),
        (None, Some(f), _) => (
            true,
            Reason::MemberFailed,
            format!(
                "member {} (node {}) failed at {}: {}: {}",
                f.member, f.node, f.step, f.reason, f.message
            ),
        ),
        (None, None, true) => (true, Reason::Paused, "spec.paused is true".to_string()),
        // A budget of none (`0`, `"0%"`) freezes the
        // members as `paused` does; the pool says so rather than "members may take slots".
        (None, None, false) if pool.spec.max_unavailable().slots(members.len()) == Some(0) => (
            true,
            Reason::NoBudget,
            "maxUnavailable gives no slot: no member may start a disruptive change (set it above 0 to resume)".to_string(),
        ),
        (None, None, false) => (false, Reason::NotPaused, "members may take slots".to_string()),
    }
}

#[cfg(test)]
mod tests;
