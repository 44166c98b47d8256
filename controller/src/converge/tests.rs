use super::*;
use crate::host::{Host, HostError, StepOutcome};
use crate::testutil::{desired, manifests, twin};

/// The twin, counting full observations; with `partial`, it refreshes after binding steps the
/// way the local host does: only the touched device is read again.
struct Counting {
    inner: crate::host::sim::SimHost,
    partial: bool,
    observes: usize,
    refreshes: usize,
}

impl Host for Counting {
    fn observe(&mut self) -> Result<HostState, HostError> {
        self.observes += 1;
        self.inner.observe()
    }
    fn apply(&mut self, step: &Step) -> Result<StepOutcome, HostError> {
        self.inner.apply(step)
    }
    fn refresh(&mut self, step: &Step, st: &HostState) -> Result<Option<HostState>, HostError> {
        let address = match step {
            Step::SetDriverOverride { address, .. }
            | Step::Unbind { address, .. }
            | Step::Probe { address }
            | Step::ReturnToHostDriver { address }
                if self.partial =>
            {
                address
            }
            _ => return Ok(None),
        };
        let now = self.inner.observe()?;
        let mut st = st.clone();
        st.pci_devices
            .insert(address.clone(), now.pci_devices[address].clone());
        self.refreshes += 1;
        Ok(Some(st))
    }
    fn sleep(&mut self, secs: u64) {
        self.inner.sleep(secs)
    }
    fn now(&self) -> u64 {
        self.inner.now()
    }
    fn watch_units(&mut self, units: &[crate::host::model::UnitRef]) {
        self.inner.watch_units(units)
    }
}

fn run(partial: bool) -> (Report, Counting) {
    let mut sim = twin();
    let d = desired(&mut sim, &manifests());
    let units: Vec<_> = d.servers.iter().map(|s| s.unit.clone()).collect();
    sim.watch_units(&units);
    let mut h = Counting {
        inner: sim,
        partial,
        observes: 0,
        refreshes: 0,
    };
    let r = {
        let mut door = Door::new(&mut h);
        converge(&d, &mut door, &Options::default())
    };
    (r, h)
}

#[test]
fn refreshing_only_what_a_step_changed_takes_the_same_steps_and_ends_on_a_full_look() {
    let (full, fh) = run(false);
    let (part, mut ph) = run(true);
    assert!(
        full.converged() && part.converged(),
        "{:?} {:?}",
        full.stop,
        part.stop
    );
    let steps = |r: &Report| -> Vec<String> {
        r.applied
            .iter()
            .map(|a| a.planned.step.to_string())
            .collect()
    };
    assert_eq!(steps(&full), steps(&part));
    assert_eq!(full.writes, part.writes);
    // The reference split rebinds GPUs: those steps were refreshed, not observed in full.
    assert!(ph.refreshes >= 4, "{} refreshes", ph.refreshes);
    assert_eq!(
        ph.observes + ph.refreshes,
        fh.observes,
        "one look per step either way"
    );
    // What the run reports is a full observation of the host as it is now.
    let now = ph.inner.observe().unwrap();
    assert_eq!(part.final_host.as_ref(), Some(&now));
}

/// The caller's own full observation starts the loop: the same steps, one observation fewer,
/// and the end is still a full look at the host as it is.
#[test]
fn a_seed_observation_takes_the_first_look_and_nothing_else_changes() {
    let (plain, ph) = run(true);
    let mut sim = twin();
    let d = desired(&mut sim, &manifests());
    let units: Vec<_> = d.servers.iter().map(|s| s.unit.clone()).collect();
    sim.watch_units(&units);
    let seed = sim.observe().unwrap();
    let mut h = Counting {
        inner: sim,
        partial: true,
        observes: 0,
        refreshes: 0,
    };
    let seeded = {
        let mut door = Door::new(&mut h);
        converge_seeded(
            &d,
            &mut door,
            &Options::default(),
            &mut BTreeMap::new(),
            Some(seed),
        )
    };
    assert!(seeded.converged(), "{:?}", seeded.stop);
    let steps = |r: &Report| -> Vec<String> {
        r.applied
            .iter()
            .map(|a| a.planned.step.to_string())
            .collect()
    };
    assert_eq!(steps(&plain), steps(&seeded));
    assert_eq!(h.observes + 1, ph.observes, "the seed is the first look");
    let now = h.inner.observe().unwrap();
    assert_eq!(seeded.final_host.as_ref(), Some(&now));
}

/// A pool member without a slot: the loop stops before the first disruptive step (here the
/// restart of the running server), having done no disruption, and the partition's conditions
/// say `WaitingForDisruptionBudget`; with the slot the same change converges.
#[test]
fn without_a_slot_the_loop_stops_before_the_first_disruptive_step() {
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    {
        let mut door = Door::new(&mut h);
        assert!(converge(&d, &mut door, &Options::default()).converged());
    }
    d.servers[0].spec.mem_fraction_static = Some(0.8);
    let held = Options {
        hold_disruptions: Some(Slot {
            pool: "fleet".into(),
        }),
        ..Options::default()
    };
    let r = {
        let mut door = Door::new(&mut h);
        converge(&d, &mut door, &held)
    };
    let Some(Stop::WaitingForSlot { step, slot, .. }) = &r.stop else {
        panic!("stopped for {:?}", r.stop)
    };
    assert!(step.contains("restart"), "{step}");
    assert_eq!(slot.pool, "fleet");
    for a in &r.applied {
        let host = r.final_host.clone().unwrap_or_default();
        assert!(
            !matches!(
                a.planned.step,
                Step::StopUnit { .. }
                    | Step::StartUnit { restart: true, .. }
                    | Step::StopContainer { .. }
            ),
            "a disruptive step ran without a slot: {} ({host:?})",
            a.planned.step
        );
    }
    let key = crate::resource_key::ResourceKey::partition(d.partition.name.as_str());
    let st = crate::status::compute(
        &d,
        &r,
        &Default::default(),
        &gpuplane_crds::condition::Time("2026-12-04T03:00:00Z".parse().unwrap()),
    );
    let ready = st[&key].condition("Ready").unwrap();
    assert_eq!(ready.reason, crate::status::WAITING_FOR_DISRUPTION_BUDGET);
    let mut door = Door::new(&mut h);
    assert!(converge(&d, &mut door, &Options::default()).converged());
}
