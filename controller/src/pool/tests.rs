use super::*;
use gpuplane_crds::{GpuNodePoolSpec, MaxUnavailable};

fn now() -> Time {
    Time("2026-12-04T03:00:00Z".parse().unwrap())
}

fn pool(max: MaxUnavailable) -> GpuNodePool {
    let mut p = GpuNodePool::new(
        "fleet",
        GpuNodePoolSpec {
            max_unavailable: Some(max),
            paused: false,
        },
    );
    p.metadata.generation = Some(1);
    p
}

fn members(n: usize) -> Vec<Member> {
    (0..n)
        .map(|i| Member {
            name: format!("m{i:02}"),
            node: format!("n{i:02}"),
            ready: true,
            ..Member::default()
        })
        .collect()
}

fn slot(reason: &str) -> Ask {
    Ask::Slot {
        reason: reason.into(),
    }
}

/// `who` asks; the status is stored as if the write succeeded.
fn ask(p: &mut GpuNodePool, ms: &[Member], who: &str, a: Ask) -> Answer {
    ask_with(p, ms, who, a, true)
}

/// [`ask`], handing a slot given back on only when `hand_on`.
fn ask_with(p: &mut GpuNodePool, ms: &[Member], who: &str, a: Ask, hand_on: bool) -> Answer {
    let node = who.replace('m', "n");
    let (st, answer) = decide_with(p, ms, who, &node, &a, &now(), hand_on);
    p.status = Some(st);
    answer
}

fn holders(p: &GpuNodePool) -> Vec<&str> {
    let st = p.status.as_ref().unwrap();
    st.slots.iter().map(|s| s.member.as_str()).collect()
}

fn state<'a>(p: &'a GpuNodePool, who: &str) -> &'a str {
    let st = p.status.as_ref().unwrap();
    &st.members.iter().find(|m| m.name == who).unwrap().state
}

fn cond<'a>(p: &'a GpuNodePool, t: &str) -> &'a Condition {
    p.status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == t)
        .unwrap()
}

#[test]
fn at_most_max_unavailable_slots_and_the_refusal_names_the_holders() {
    let ms = members(5);
    let mut p = pool(MaxUnavailable::Count(2));
    assert_eq!(ask(&mut p, &ms, "m00", slot("restart")), Answer::Granted);
    assert_eq!(ask(&mut p, &ms, "m01", slot("restart")), Answer::Granted);
    assert_eq!(ask(&mut p, &ms, "m00", slot("restart")), Answer::Held);
    let Answer::Denied(why) = ask(&mut p, &ms, "m02", slot("restart")) else {
        panic!("a third slot")
    };
    assert!(
        why.contains("m00 (holds a slot)") && why.contains("m01"),
        "{why}"
    );
    let st = p.status.clone().unwrap();
    assert_eq!(st.slots.len(), 2);
    assert_eq!(st.unavailable_member_count, 2);
    assert_eq!(cond(&p, types::UPDATING).status, "True");
    assert_eq!(cond(&p, types::RECONCILING).status, "True");
    assert_eq!(cond(&p, types::STALLED).status, "False");
    let m02 = st.members.iter().find(|m| m.name == "m02").unwrap();
    assert_eq!(m02.state, "Waiting");
    // A holder whole again gives its slot back, to the waiting member in the same write.
    assert_eq!(
        ask(&mut p, &ms, "m00", Ask::Report(State::Whole)),
        Answer::Recorded
    );
    assert_eq!(holders(&p), ["m01", "m02"]);
    assert_eq!(ask(&mut p, &ms, "m02", slot("restart")), Answer::Held);
}

#[test]
fn failed_or_agentless_members_count_against_the_budget() {
    let mut ms = members(4);
    ms[1].stalled = true;
    ms[2].agent_gone = true;
    let mut p = pool(MaxUnavailable::Count(2));
    let Answer::Denied(why) = ask(&mut p, &ms, "m00", slot("restart")) else {
        panic!("two members are already unavailable")
    };
    assert!(
        why.contains("m01 (Stalled)") && why.contains("Lease expired"),
        "{why}"
    );
    assert_eq!(p.status.as_ref().unwrap().unavailable_member_count, 2);
    assert_eq!(p.status.as_ref().unwrap().degraded_member_count, 1);
    // The stalled member itself may take a slot (to fix itself), its own state aside.
    ms[2].agent_gone = false;
    assert_eq!(ask(&mut p, &ms, "m01", slot("restart")), Answer::Granted);
}

#[test]
fn a_failed_holder_keeps_its_slot_and_pauses_the_pool_once() {
    let ms = members(4);
    let mut p = pool(MaxUnavailable::Count(2));
    ask(&mut p, &ms, "m01", slot("restart"));
    let failed = State::Failed {
        step: "InferenceServer/default/qwen-1".into(),
        reason: "Crashed".into(),
        message: "the unit failed\nexit 1".into(),
    };
    ask(&mut p, &ms, "m01", Ask::Report(failed.clone()));
    let st = p.status.clone().unwrap();
    assert_eq!(st.slots.len(), 1, "the failed member keeps its slot");
    let f = st.failure.clone().expect("the pool paused itself");
    assert_eq!((f.member.as_str(), f.reason.as_str()), ("m01", "Crashed"));
    assert!(!f.message.contains('\n'));
    assert_eq!(cond(&p, types::PAUSED).reason, "MemberFailed");
    assert_eq!(cond(&p, types::STALLED).status, "True");
    assert_eq!(cond(&p, types::READY).status, "False");
    assert_eq!(cond(&p, types::RECONCILING).status, "False");
    assert_eq!(cond(&p, types::DEGRADED).status, "True");
    let Answer::Denied(why) = ask(&mut p, &ms, "m02", slot("restart")) else {
        panic!("nothing starts while paused by a failure")
    };
    assert!(why.contains("m01 failed"), "{why}");
    // A person clears the failure (accepting it): the same failure does not pause again.
    p.status.as_mut().unwrap().failure = None;
    ask(&mut p, &ms, "m01", Ask::Report(failed));
    assert!(p.status.as_ref().unwrap().failure.is_none());
    assert_eq!(ask(&mut p, &ms, "m02", slot("restart")), Answer::Granted);
    // Whole again: its slot goes back.
    ask(&mut p, &ms, "m01", Ask::Report(State::Whole));
    assert_eq!(p.status.as_ref().unwrap().slots.len(), 1);
}

#[test]
fn a_paused_pool_grants_nothing_and_a_bad_percentage_freezes_it() {
    let ms = members(3);
    let mut p = pool(MaxUnavailable::Count(3));
    p.spec.paused = true;
    assert!(
        matches!(ask(&mut p, &ms, "m00", slot("x")), Answer::Denied(w) if w.contains("spec.paused"))
    );
    assert_eq!(cond(&p, types::PAUSED).status, "True");
    let mut p = pool(MaxUnavailable::Percent("half".into()));
    assert!(
        matches!(ask(&mut p, &ms, "m00", slot("x")), Answer::Denied(w) if w.contains("spec.maxUnavailable: \"half\" is not a count"))
    );
    let mut p = pool(MaxUnavailable::Count(0));
    assert!(matches!(
        ask(&mut p, &ms, "m00", slot("x")),
        Answer::Denied(_)
    ));
    let mut p = pool(MaxUnavailable::Percent("50%".into()));
    assert_eq!(ask(&mut p, &ms, "m00", slot("x")), Answer::Granted);
    assert!(matches!(
        ask(&mut p, &ms, "m01", slot("x")),
        Answer::Denied(_)
    ));
}

#[test]
fn holders_that_left_the_pool_free_their_slot_and_counts_follow_the_members() {
    let mut ms = members(3);
    let mut p = pool(MaxUnavailable::Count(1));
    ask(&mut p, &ms, "m00", slot("x"));
    ms.remove(0);
    assert_eq!(ask(&mut p, &ms, "m01", slot("x")), Answer::Granted);
    let st = p.status.clone().unwrap();
    assert_eq!(st.member_count, 2);
    assert!(st.members.iter().all(|m| m.name != "m00"));
    assert_eq!(
        st.members.iter().find(|m| m.name == "m02").unwrap().state,
        "Pending"
    );
    for m in ["m01", "m02"] {
        ask(&mut p, &ms, m, Ask::Report(State::Whole));
    }
    assert_eq!(cond(&p, types::UPDATED).status, "True");
    assert_eq!(cond(&p, types::READY).status, "True");
    assert_eq!(cond(&p, types::RECONCILING).status, "False");
    assert_eq!(cond(&p, types::UPDATING).status, "False");
    assert_eq!(p.status.as_ref().unwrap().updated_member_count, 2);
}

#[test]
fn a_report_that_changes_nothing_leaves_the_status_equal() {
    let ms = members(2);
    let mut p = pool(MaxUnavailable::Count(1));
    ask(&mut p, &ms, "m00", Ask::Report(State::Whole));
    let before = p.status.clone();
    ask(&mut p, &ms, "m00", Ask::Report(State::Whole));
    assert_eq!(before, p.status, "no write needed for the same report");
}

/// Issue 37: a tenant's server that fails (Stalled, or its smoke test failed) gives the slot
/// back and never pauses the pool; the next member gets the slot at once.
#[test]
fn a_tenants_failed_server_gives_the_slot_back_and_never_pauses_the_pool() {
    let ms = members(3);
    let mut p = pool(MaxUnavailable::Count(1));
    assert_eq!(ask(&mut p, &ms, "m00", slot("restart")), Answer::Granted);
    let failed = State::ServersFailed {
        servers: vec!["InferenceServer/tenant-a/bad (Crashed)".into()],
    };
    assert_eq!(
        ask(&mut p, &ms, "m00", Ask::Report(failed)),
        Answer::Recorded
    );
    let st = p.status.clone().unwrap();
    assert!(st.slots.is_empty(), "{st:?}");
    assert!(st.failure.is_none(), "{st:?}");
    assert_eq!(cond(&p, types::PAUSED).status, "False");
    let m00 = st.members.iter().find(|m| m.name == "m00").unwrap();
    assert_eq!(m00.state, "Updated");
    assert!(m00.waiting_for.contains("tenant-a/bad"), "{m00:?}");
    assert_eq!(ask(&mut p, &ms, "m01", slot("restart")), Answer::Granted);
}

/// Issue 37: a partition that is whole while its servers still start (a smoke test that never
/// answers, a server that never gets ready) keeps its slot only until the bound.
#[test]
fn a_slot_kept_for_starting_servers_is_given_back_at_the_bound() {
    let ms = members(2);
    let mut p = pool(MaxUnavailable::Count(1));
    assert_eq!(ask(&mut p, &ms, "m00", slot("restart")), Answer::Granted);
    let pending = Ask::Report(State::ServersPending { bound_secs: 600 });
    // Within the bound: kept, and the member says until when.
    ask(&mut p, &ms, "m00", pending.clone());
    let st = p.status.clone().unwrap();
    assert_eq!(st.slots.len(), 1);
    assert!(st.members[0].waiting_for.contains("at the latest 600 s"));
    assert!(matches!(
        ask(&mut p, &ms, "m01", slot("restart")),
        Answer::Denied(_)
    ));
    // The slot was taken 601 s ago: the report gives it back; the pool is not paused.
    let since: jiff::Timestamp = now().0 - jiff::SignedDuration::from_secs(601);
    p.status.as_mut().unwrap().slots[0].since = since.to_string();
    ask(&mut p, &ms, "m00", pending);
    let st = p.status.clone().unwrap();
    assert!(st.slots.iter().all(|s| s.member != "m00"), "{st:?}");
    assert!(st.failure.is_none());
    let m00 = st.members.iter().find(|m| m.name == "m00").unwrap();
    assert_eq!(m00.state, "Updating");
    assert!(
        m00.waiting_for.contains("given back after 600 s"),
        "{m00:?}"
    );
    // Handed on to the member that waited.
    assert_eq!(holders(&p), ["m01"]);
    assert_eq!(ask(&mut p, &ms, "m01", slot("restart")), Answer::Held);
}

/// Issue 37: `"0%"` granted one slot while `0` froze the pool; Kubernetes reads 0% as none. Both
/// now freeze the members' disruptions, and the refusal says so.
#[test]
fn zero_percent_grants_no_slot_as_zero_does() {
    let ms = members(4);
    for max in [
        MaxUnavailable::Count(0),
        MaxUnavailable::Percent("0%".into()),
    ] {
        let mut p = pool(max.clone());
        let Answer::Denied(why) = ask(&mut p, &ms, "m00", slot("restart")) else {
            panic!("{max:?} granted a slot")
        };
        assert!(
            why.contains("gives no slot") && why.contains("frozen"),
            "{why}"
        );
        assert!(p.status.as_ref().unwrap().slots.is_empty());
        // The pool itself says it is frozen, not "members may take slots".
        let c = cond(&p, types::PAUSED);
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "NoBudget"));
    }
}

/// The last line of defence: a pool admitted with an invalid `maxUnavailable` (the webhook down)
/// grants nothing, and its own status says why: `Paused=True` and `Stalled=True`, reason
/// `InvalidSpec`, the field and the fix.
#[test]
fn an_invalid_max_unavailable_freezes_the_pool_and_its_status_says_why() {
    let ms = members(3);
    for max in [
        MaxUnavailable::Count(-1),
        MaxUnavailable::Percent("150%".into()),
        MaxUnavailable::Percent("25".into()),
    ] {
        let mut p = pool(max.clone());
        let Answer::Denied(why) = ask(&mut p, &ms, "m00", slot("restart")) else {
            panic!("{max:?} granted a slot")
        };
        assert!(
            why.starts_with("spec.maxUnavailable: ") && why.contains("write "),
            "{why}"
        );
        for t in [types::PAUSED, types::STALLED] {
            let c = cond(&p, t);
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("True", "InvalidSpec"),
                "{t}"
            );
            assert!(c.message.contains("spec.maxUnavailable"), "{}", c.message);
        }
        assert_eq!(cond(&p, types::RECONCILING).status, "False");
        assert_eq!(cond(&p, types::READY).status, "False");
    }
}

/// A slot given back wakes the waiters next in line for the free slots, not every waiter; a
/// paused pool wakes none; a member the status does not list as waiting is always woken.
#[test]
fn a_slot_given_back_helps_the_waiters_next_in_line_only() {
    let ms = members(6);
    let mut p = pool(MaxUnavailable::Count(2));
    let whole = Ask::Report(State::Whole);
    // Slots given back and not handed on (as when the hand-on was refused).
    let ask =
        |p: &mut GpuNodePool, ms: &[Member], who: &str, a: Ask| ask_with(p, ms, who, a, false);
    assert_eq!(ask(&mut p, &ms, "m00", slot("restart")), Answer::Granted);
    assert_eq!(ask(&mut p, &ms, "m01", slot("restart")), Answer::Granted);
    for w in ["m02", "m03", "m04"] {
        assert!(matches!(
            ask(&mut p, &ms, w, slot("restart")),
            Answer::Denied(_)
        ));
    }
    // Both slots held: no waiter can be helped.
    let helped = |p: &GpuNodePool| {
        ["m02", "m03", "m04"]
            .into_iter()
            .filter(|w| may_help(p, w))
            .collect::<Vec<_>>()
    };
    assert_eq!(helped(&p), Vec::<&str>::new());
    // One given back: the first waiter only.
    assert_eq!(ask(&mut p, &ms, "m00", whole.clone()), Answer::Recorded);
    assert_eq!(helped(&p), ["m02"]);
    // Both given back: the first two.
    assert_eq!(ask(&mut p, &ms, "m01", whole.clone()), Answer::Recorded);
    assert_eq!(helped(&p), ["m02", "m03"]);
    // m02 takes one (it waits no more): m03 is next for the one left.
    assert_eq!(ask(&mut p, &ms, "m02", slot("restart")), Answer::Granted);
    assert!(may_help(&p, "m03") && !may_help(&p, "m04"));
    // A waiter the status does not list (its wait not recorded yet) is woken.
    assert!(may_help(&p, "m05"));
    // A paused pool helps no listed waiter, though a slot is free.
    p.spec.paused = true;
    assert!(!may_help(&p, "m03") && !may_help(&p, "m04"));
}

/// A slot given back goes, in the same write, to the first member the status lists as waiting
/// that may take one now: not one whose agent is gone, not past the budget, not while paused,
/// not when the caller asks without hand-on. Its agent then finds it held and writes nothing.
#[test]
fn a_slot_given_back_is_handed_to_the_next_waiter_in_the_same_write() {
    let mut ms = members(6);
    let mut p = pool(MaxUnavailable::Count(2));
    let whole = || Ask::Report(State::Whole);
    for m in ["m00", "m01"] {
        assert_eq!(ask(&mut p, &ms, m, slot("restart")), Answer::Granted);
    }
    for w in ["m02", "m03", "m04", "m05"] {
        assert!(matches!(
            ask(&mut p, &ms, w, slot("restart")),
            Answer::Denied(_)
        ));
    }
    ask(&mut p, &ms, "m00", whole());
    assert_eq!(holders(&p), ["m01", "m02"]);
    let st = p.status.clone().unwrap();
    assert_eq!(st.slots[1].reason, "handed on by m00");
    assert_eq!(
        (state(&p, "m00"), state(&p, "m02")),
        ("Updated", "Updating")
    );
    assert!(may_help(&p, "m02"), "the member handed a slot is woken");
    // Its own ask finds the slot held and changes nothing: no write of its own, and its agent
    // may say so from the pool alone.
    assert!(already_held(&p, "m02", "n02"));
    assert_eq!(ask(&mut p, &ms, "m02", slot("restart")), Answer::Held);
    assert_eq!(p.status.as_ref(), Some(&st));
    // m03's agent is gone (unavailable itself): the budget is spent, nothing handed on.
    ms[3].agent_gone = true;
    ask(&mut p, &ms, "m01", whole());
    assert_eq!(holders(&p), ["m02"]);
    // With room, the next live waiter (m04) gets the slot, not m03.
    p.spec.max_unavailable = Some(MaxUnavailable::Count(3));
    ask(&mut p, &ms, "m02", whole());
    assert_eq!(holders(&p), ["m04"]);
    assert_eq!(state(&p, "m03"), "Waiting");
    // Paused: given back, not handed on; nor when the caller asks without it.
    p.spec.paused = true;
    ask(&mut p, &ms, "m04", whole());
    assert!(holders(&p).is_empty());
    p.spec.paused = false;
    assert_eq!(ask(&mut p, &ms, "m05", slot("restart")), Answer::Granted);
    ask_with(&mut p, &ms, "m05", whole(), false);
    assert!(holders(&p).is_empty());
    assert_eq!(state(&p, "m03"), "Waiting");
}

/// A member that leaves the pool while it holds a slot hands it on as well.
#[test]
fn a_holder_leaving_the_pool_hands_its_slot_on() {
    let ms = members(3);
    let mut p = pool(MaxUnavailable::Count(1));
    assert_eq!(ask(&mut p, &ms, "m00", slot("restart")), Answer::Granted);
    assert!(matches!(
        ask(&mut p, &ms, "m02", slot("restart")),
        Answer::Denied(_)
    ));
    ask(&mut p, &ms, "m00", Ask::Report(State::Leaving));
    assert_eq!(holders(&p), ["m02"]);
    let st = p.status.as_ref().unwrap();
    assert!(st.members.iter().all(|m| m.name != "m00"));
}

/// `already_held` says Held exactly where `decide` would answer Held and change no entry of the
/// asker's: never for a waiter, another node's holder of that name, or a pool without a status.
#[test]
fn a_slot_is_already_held_only_where_deciding_would_change_nothing_of_the_holders() {
    let ms = members(3);
    let mut p = pool(MaxUnavailable::Count(1));
    assert!(!already_held(&p, "m00", "n00"), "no status yet");
    assert_eq!(ask(&mut p, &ms, "m00", slot("restart")), Answer::Granted);
    assert!(already_held(&p, "m00", "n00"));
    let before = p.status.clone();
    assert_eq!(ask(&mut p, &ms, "m00", slot("restart")), Answer::Held);
    assert_eq!(p.status, before, "held: deciding changes nothing");
    assert!(
        !already_held(&p, "m00", "n01"),
        "the same name on another node"
    );
    assert!(matches!(
        ask(&mut p, &ms, "m01", slot("restart")),
        Answer::Denied(_)
    ));
    assert!(!already_held(&p, "m01", "n01"), "a waiter");
    // A slot whose entry says otherwise (a person's edit, an older writer) is decided in full.
    let st = p.status.as_mut().unwrap();
    st.members
        .iter_mut()
        .find(|e| e.name == "m00")
        .unwrap()
        .state = "Updated".into();
    assert!(!already_held(&p, "m00", "n00"));
    assert_eq!(ask(&mut p, &ms, "m00", slot("restart")), Answer::Held);
    assert_eq!(state(&p, "m00"), "Updating");
    assert!(already_held(&p, "m00", "n00"));
}
