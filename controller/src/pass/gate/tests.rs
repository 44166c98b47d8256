//! The gate on the twin: a port whose converge is the real loop on the simulated host and whose
//! pool answers as told, so each arm of the gate is seen doing (or not doing) host writes.

use super::*;
use crate::converge::{converge_with, Options, Stop};
use crate::desired::Desired;
use crate::door::Door;
use crate::host::sim::SimHost;
use crate::testutil::{desired, manifests, twin};
use std::future::Future;

/// The twin, converged to the reference split, then asked for a change that restarts the
/// running server (a disruption).
fn disrupting() -> (SimHost, Desired) {
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    let mut door = Door::new(&mut h);
    let plain = Options::default();
    assert!(converge_with(&d, &mut door, &plain, &mut Default::default()).converged());
    d.servers[0].spec.mem_fraction_static = Some(0.8);
    (h, d)
}

struct TwinPort {
    host: SimHost,
    desired: Desired,
    pool: Option<&'static str>,
    answer: Answer,
    asked: Vec<String>,
    holds: Vec<Option<Slot>>,
}

impl SlotPort for TwinPort {
    type Error = std::convert::Infallible;

    fn pool(&self) -> Option<&str> {
        self.pool
    }

    fn converge(
        &mut self,
        hold: Option<Slot>,
    ) -> impl Future<Output = Result<Report, Self::Error>> + Send {
        self.holds.push(hold.clone());
        let opts = Options {
            hold_disruptions: hold,
            ..Options::default()
        };
        let mut door = Door::new(&mut self.host);
        let r = converge_with(&self.desired, &mut door, &opts, &mut Default::default());
        std::future::ready(Ok(r))
    }

    fn ask(&mut self, reason: String) -> impl Future<Output = Result<Answer, Self::Error>> + Send {
        self.asked.push(reason);
        std::future::ready(Ok(self.answer.clone()))
    }
}

fn port(pool: Option<&'static str>, answer: Answer) -> TwinPort {
    let (host, desired) = disrupting();
    TwinPort {
        host,
        desired,
        pool,
        answer,
        asked: vec![],
        holds: vec![],
    }
}

fn run(p: &mut TwinPort) -> Gated {
    let Ok(g) = futures::executor::block_on(through(p, "restore on deletion: "));
    g
}

#[test]
fn outside_a_pool_the_pass_converges_without_asking() {
    let mut p = port(None, Answer::Denied("never asked".into()));
    let Gated::Passed(r) = run(&mut p) else {
        panic!("denied outside a pool")
    };
    assert!(r.converged(), "{:?}", r.stop);
    assert!(p.asked.is_empty());
    assert_eq!(p.holds, vec![None]);
}

#[test]
fn a_denied_slot_leaves_the_disruption_undone_and_says_which_step() {
    let mut p = port(
        Some("fleet"),
        Answer::Denied("node-b holds the slot".into()),
    );
    let Gated::Denied { pool, step, why } = run(&mut p) else {
        panic!("passed without a slot")
    };
    assert_eq!(pool, "fleet");
    assert!(step.contains("restart"), "{step}");
    assert_eq!(why, "node-b holds the slot");
    assert_eq!(p.asked.len(), 1, "asked once");
    assert!(
        p.asked[0].starts_with("restore on deletion: ") && p.asked[0].contains(&step),
        "{}",
        p.asked[0]
    );
    // Converged once, holding: the change is still to be made.
    assert_eq!(p.holds.len(), 1);
    let mut door = Door::new(&mut p.host);
    let opts = Options::default();
    let again = converge_with(&p.desired, &mut door, &opts, &mut Default::default());
    assert!(again.writes > 0, "the disruption was done without a slot");
}

#[test]
fn a_granted_slot_converges_again_and_keeps_both_runs_writes() {
    let mut p = port(Some("fleet"), Answer::Granted);
    let Gated::Passed(r) = run(&mut p) else {
        panic!("denied with a slot")
    };
    assert!(r.converged(), "{:?}", r.stop);
    assert!(!matches!(r.stop, Some(Stop::WaitingForSlot { .. })));
    assert_eq!(p.holds.len(), 2, "held first, then free");
    assert!(p.holds[0].is_some() && p.holds[1].is_none());
    assert!(r.writes > 0);
}

#[test]
fn a_pass_that_needs_no_slot_asks_none() {
    let (mut host, _) = disrupting();
    let desired = desired(&mut host, &manifests());
    let mut p = TwinPort {
        host,
        desired,
        pool: Some("fleet"),
        answer: Answer::Denied("never asked".into()),
        asked: vec![],
        holds: vec![],
    };
    let Gated::Passed(r) = run(&mut p) else {
        panic!("denied with nothing to disrupt")
    };
    assert!(r.converged(), "{:?}", r.stop);
    assert!(p.asked.is_empty());
}
