//! Smoke tests run beside the observation, never inside it.
//!
//! A smoke test is up to 16 chat requests against a Ready server. Run inside the observation,
//! it held the host lock for as long as a slow server took to answer (16 × 600 s at worst),
//! and every server of the node waited. Here each test runs on its own thread, holding no lock;
//! an observation only reads what is done ([`Runner::result_or_start`]) and starts a test that
//! is not. A test has one budget ([`BUDGET`]): requests not sent in time are failures that say
//! so, so a test always ends.

use crate::host::model::SmokeResult;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most one smoke test may take, all requests together.
pub const BUDGET: Duration = Duration::from_secs(300);

/// One request to send: its name and a closure that sends it within a deadline and judges the
/// answer (`Err` says what was wrong).
pub struct Request {
    pub name: String,
    pub send: Box<dyn FnOnce(Duration) -> Result<(), String> + Send>,
}

#[derive(Debug, Clone)]
enum State {
    Running(String),
    Done(SmokeResult),
}

/// The smoke tests of one backend, by key (the unit and the test's spec).
#[derive(Debug, Clone, Default)]
pub struct Runner {
    tests: Arc<Mutex<BTreeMap<String, State>>>,
}

impl Runner {
    /// The finished result for `key` when it was run against the unit with `unit_hash`; else
    /// `None`, after starting the test (`requests`, each given at most `per_request`) unless it
    /// already runs for that unit.
    pub fn result_or_start(
        &self,
        key: &str,
        unit_hash: &str,
        per_request: Duration,
        requests: impl FnOnce() -> Vec<Request>,
    ) -> Option<SmokeResult> {
        let mut tests = self.tests.lock().unwrap_or_else(|p| p.into_inner());
        match tests.get(key) {
            Some(State::Done(r)) if r.unit_hash == unit_hash => return Some(r.clone()),
            Some(State::Running(h)) if h == unit_hash => return None,
            _ => {}
        }
        tests.insert(key.to_string(), State::Running(unit_hash.to_string()));
        drop(tests);
        let reqs = requests();
        let (all, key, hash) = (self.tests.clone(), key.to_string(), unit_hash.to_string());
        std::thread::spawn(move || {
            let res = run(reqs, per_request, BUDGET, hash.clone());
            let mut tests = all.lock().unwrap_or_else(|p| p.into_inner());
            // A newer unit's test replaced this one meanwhile: its result is not this one's.
            if matches!(tests.get(&key), Some(State::Running(h)) if *h == hash) {
                tests.insert(key, State::Done(res));
            }
        });
        None
    }

    /// Forgets the tests whose key `keep` rejects (servers gone).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut tests = self.tests.lock().unwrap_or_else(|p| p.into_inner());
        tests.retain(|k, _| keep(k));
    }

    /// Whether a test runs now for `key` (tests).
    #[cfg(test)]
    pub fn is_running(&self, key: &str) -> bool {
        let tests = self.tests.lock().unwrap_or_else(|p| p.into_inner());
        matches!(tests.get(key), Some(State::Running(_)))
    }
}

/// Sends `requests` one after another, each within `per_request` and all within `budget`.
fn run(
    requests: Vec<Request>,
    per_request: Duration,
    budget: Duration,
    unit_hash: String,
) -> SmokeResult {
    let start = Instant::now();
    let n = requests.len() as u32;
    let mut failures = vec![];
    for r in requests {
        let left = budget.saturating_sub(start.elapsed());
        if left.is_zero() {
            failures.push(format!(
                "{}: not sent, the test's budget of {:?} ran out",
                r.name, budget
            ));
            continue;
        }
        if let Err(e) = (r.send)(per_request.min(left)) {
            failures.push(e);
        }
    }
    SmokeResult {
        unit_hash,
        requests: n,
        failures,
    }
}

#[cfg(test)]
mod tests;
