//! The pool-status rule on transitions the agents' own `pool::decide` makes (admitted) and on
//! forged ones (refused).

use super::{refuse, Members};
use crate::pool::{decide, Ask, Member, State};
use gpuplane_crds::condition::Time;
use gpuplane_crds::{GpuNodePool, GpuNodePoolSpec, MaxUnavailable, PoolFailure, SlotHolder};
use serde_json::{json, Value};

const AGENT: &str = "system:serviceaccount:gpuplane-system:gpuplane";

fn now() -> Time {
    Time("2026-12-05T08:00:00Z".parse().unwrap())
}

fn pool() -> GpuNodePool {
    let mut p = GpuNodePool::new(
        "fleet",
        GpuNodePoolSpec {
            max_unavailable: Some(MaxUnavailable::Count(1)),
            paused: false,
        },
    );
    p.metadata.generation = Some(1);
    p
}

fn listed() -> Vec<Member> {
    (0..3)
        .map(|i| Member {
            name: format!("m{i}"),
            node: format!("n{i}"),
            ready: true,
            ..Member::default()
        })
        .collect()
}

fn members() -> Members {
    Some(listed().into_iter().map(|m| (m.name, m.node)).collect())
}

/// The pool after member `i` asks `ask` through the agents' own decision.
fn after(p: &GpuNodePool, i: usize, ask: Ask) -> GpuNodePool {
    let (st, _) = decide(
        p,
        &listed(),
        &format!("m{i}"),
        &format!("n{i}"),
        &ask,
        &now(),
    );
    let mut next = p.clone();
    next.status = Some(st);
    next
}

fn req(old: &GpuNodePool, new: &GpuNodePool) -> Value {
    json!({"operation": "UPDATE", "subResource": "status",
           "object": serde_json::to_value(new).unwrap(),
           "oldObject": serde_json::to_value(old).unwrap()})
}

fn judge(node: &str, old: &GpuNodePool, new: &GpuNodePool) -> Option<String> {
    refuse(AGENT, "UPDATE", &req(old, new), node, &members())
}

fn slot() -> Ask {
    Ask::Slot {
        reason: "restart".into(),
    }
}

/// A slot of member `m<i>` on node `n<i>`, as a forger writes it.
fn held_by(i: usize) -> SlotHolder {
    SlotHolder {
        member: format!("m{i}"),
        node: format!("n{i}"),
        reason: "x".into(),
        since: "2026-12-05T08:00:00Z".into(),
    }
}

#[test]
fn what_an_agent_decides_for_its_own_member_is_admitted() {
    let p0 = after(&pool(), 0, Ask::Report(State::Whole));
    let p1 = after(&p0, 1, slot());
    assert_eq!(judge("n1", &p0, &p1), None);
    let p2 = after(&p1, 1, Ask::Report(State::Whole));
    assert_eq!(judge("n1", &p1, &p2), None);
    // A failure of its own member, recorded once.
    let failed = State::Failed {
        step: "write unit".into(),
        reason: "ApplyFailed".into(),
        message: "No space left on device".into(),
    };
    let p3 = after(&p2, 2, slot());
    let p4 = after(&p3, 2, Ask::Report(failed));
    assert!(p4.status.as_ref().unwrap().failure.is_some());
    assert_eq!(judge("n2", &p3, &p4), None);
}

#[test]
fn another_nodes_slot_a_forged_failure_or_a_cleared_one_is_refused() {
    let p0 = after(&pool(), 0, Ask::Report(State::Whole));
    // Node 0's token gives member m1 (node n1) a slot.
    let mut forged = p0.clone();
    forged.status.as_mut().unwrap().slots.push(held_by(1));
    let why = judge("n0", &p0, &forged).expect("refused");
    assert!(
        why.contains("may not give node n1's member m1 a slot"),
        "{why}"
    );
    // Node 1 takes a slot beyond maxUnavailable 1 while m0 holds one.
    let held = after(&p0, 0, slot());
    let mut greedy = held.clone();
    greedy.status.as_mut().unwrap().slots.push(held_by(1));
    let why = judge("n1", &held, &greedy).expect("refused");
    assert!(why.contains("more than maxUnavailable"), "{why}");
    // Node 1 frees node 0's slot.
    let why = judge("n1", &held, &p0).expect("refused");
    assert!(
        why.contains("may not free or change node n0's slot"),
        "{why}"
    );
    // A failure recorded, then cleared by an agent: refused; a person's clearing is not judged here.
    let mut paused = held.clone();
    paused.status.as_mut().unwrap().failure = Some(PoolFailure {
        member: "m0".into(),
        node: "n0".into(),
        step: "s".into(),
        reason: "ApplyFailed".into(),
        message: "m".into(),
        since: "2026-12-05T08:00:00Z".into(),
    });
    let why = judge("n0", &paused, &held).expect("refused");
    assert!(
        why.contains("may not clear or change the pool's failure"),
        "{why}"
    );
    // A failure naming another node.
    let why = judge("n1", &held, &paused).expect("refused");
    assert!(why.contains("only its own node's failure"), "{why}");
    // No slot while paused, even its own.
    let mut take = paused.clone();
    take.status.as_mut().unwrap().slots.push(held_by(1));
    let why = judge("n1", &paused, &take).expect("refused");
    assert!(why.contains("paused"), "{why}");
}

#[test]
fn another_nodes_member_entry_is_kept_and_unknown_members_refuse() {
    let p0 = after(&pool(), 0, Ask::Report(State::Whole));
    let p1 = after(&p0, 1, Ask::Report(State::Whole));
    let mut forged = p1.clone();
    let st = forged.status.as_mut().unwrap();
    let e = st.members.iter_mut().find(|m| m.name == "m0").unwrap();
    e.state = "Degraded".into();
    let why = judge("n1", &p1, &forged).expect("refused");
    assert!(
        why.contains("may not change node n0's member entry"),
        "{why}"
    );
    // The cluster's members unknown: a slot change cannot be judged.
    let p2 = after(&p1, 1, slot());
    let why = refuse(AGENT, "UPDATE", &req(&p1, &p2), "n1", &None).expect("refused");
    assert!(why.contains("cannot list the pool's members"), "{why}");
    // Not the status subresource.
    let mut r = req(&p1, &p2);
    r["subResource"] = json!("");
    assert!(refuse(AGENT, "UPDATE", &r, "n1", &members()).is_some());
}

/// The hand-on (`pool::next_in_line`): the agent that gives its slot back may give it, in the
/// same write, to a member the stored status lists as waiting; nothing wider.
#[test]
fn a_slot_handed_on_to_a_waiting_member_is_admitted_and_nothing_wider() {
    let p0 = after(&pool(), 0, Ask::Report(State::Whole));
    let held = after(&p0, 0, slot());
    let waits = after(&held, 1, slot());
    let both_wait = after(&waits, 2, slot());
    let handed = after(&waits, 0, Ask::Report(State::Whole));
    let st = handed.status.as_ref().unwrap();
    assert_eq!(st.slots.len(), 1);
    assert_eq!(st.slots[0].member, "m1");
    assert_eq!(judge("n0", &waits, &handed), None);
    // Another node (holding no slot) hands m1 a slot: it gives back none.
    let mut stolen = waits.clone();
    let s = stolen.status.as_mut().unwrap();
    s.slots.push(held_by(1));
    s.members.iter_mut().find(|m| m.name == "m1").unwrap().state = "Updating".into();
    let why = judge("n2", &waits, &stolen).expect("refused");
    assert!(
        why.contains("may hand on only the slots it gives back (0)"),
        "{why}"
    );
    // A slot handed to a member that never asked for one.
    let mut unasked = handed.clone();
    let s = unasked.status.as_mut().unwrap();
    s.slots[0].member = "m2".into();
    s.slots[0].node = "n2".into();
    let why = judge("n0", &waits, &unasked).expect("refused");
    assert!(
        why.contains("may not give node n2's member m2 a slot"),
        "{why}"
    );
    // Two slots handed on for the one given back (both m1 and m2 wait).
    let mut two = after(&both_wait, 0, Ask::Report(State::Whole));
    let s = two.status.as_mut().unwrap();
    let mut m2 = held_by(2);
    m2.reason = "handed on by m0".into();
    s.slots.push(m2);
    let why = judge("n0", &both_wait, &two).expect("refused");
    assert!(
        why.contains("may hand on only the slots it gives back (1), not 2"),
        "{why}"
    );
    // The waiter's entry changed to anything but Updating.
    let mut entry = handed.clone();
    let s = entry.status.as_mut().unwrap();
    s.members.iter_mut().find(|m| m.name == "m1").unwrap().state = "Updated".into();
    let why = judge("n0", &waits, &entry).expect("refused");
    assert!(
        why.contains("may not change node n1's member entry"),
        "{why}"
    );
    // Handed on while the pool is paused.
    let mut paused_old = waits.clone();
    paused_old.spec.paused = true;
    let mut paused_new = handed.clone();
    paused_new.spec.paused = true;
    let why = judge("n0", &paused_old, &paused_new).expect("refused");
    assert!(why.contains("paused"), "{why}");
}
