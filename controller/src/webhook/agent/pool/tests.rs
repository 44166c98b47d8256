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
