//! One decision before any host write: for any mutation of the reference manifests (hostile
//! strings in every text field, arbitrary numbers, deleted and renamed keys), either the
//! validation that `plan` and `converge` run first refuses it — nothing is observed beyond a
//! read, nothing written — or the converge that follows never fails because of the spec's
//! text: no step fails, no unit is refused by the renderer, no server is refused by SGLang's
//! own argument checks (the simulated server applies them).
//!
//! Cases: `PROPTEST_CASES` (default 500: about 40 s in a debug build on 2 cores; 2000 took 160 s
//! there, most of CI's budget for one property); the long run is
//! `PROPTEST_CASES=20000 cargo test -p gpuplane --release --test validation_props`.

use gpuplane::cli::desired_for_host;
use gpuplane::converge::{converge, Options, Stop, WaitOutcome};
use gpuplane::door::Door;
use gpuplane::host::sim::SimHost;
use gpuplane::manifests::Manifests;
use proptest::prelude::*;
use serde_yaml::Value;
use support::mutations::{apply, mutation};

mod support;

const PARTITION: &str = include_str!("../../examples/kpro6/partition.yaml");
const SERVER: &str = include_str!("../../examples/kpro6/server.yaml");
const HOST: &str = include_str!("../../examples/hosts/kpro6.yaml");

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(500),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn validation_fails_or_nothing_later_fails_because_of_the_text(
        muts in prop::collection::vec(mutation(), 1..4)
    ) {
        let mut partition: Value = serde_yaml::from_str(PARTITION).unwrap();
        let mut server: Value = serde_yaml::from_str(SERVER).unwrap();
        for m in &muts {
            apply(m, &mut partition, &mut server);
        }
        let text = format!(
            "{}---\n{}",
            serde_yaml::to_string(&partition).unwrap(),
            serde_yaml::to_string(&server).unwrap()
        );
        let mut manifests = Manifests::default();
        if manifests.add_text(&text, "mutated.yaml").is_err() {
            return Ok(()); // refused while reading: nothing was even observed
        }
        let mut host = SimHost::from_yaml(HOST, "twin").unwrap();
        let Ok(desired) = desired_for_host(&manifests, &mut host, "10de", "nvidia") else {
            return Ok(()); // refused by validation: converge never runs
        };
        let report = {
            let mut door = Door::new(&mut host);
            converge(&desired, &mut door, &Options::default())
        };
        if let Some(Stop::StepFailed { step, error }) = &report.stop {
            prop_assert!(false, "a step failed after validation passed: {step}: {error}\n{text}");
        }
        for b in &report.final_plan.blockers {
            prop_assert!(b.reason != "InvalidSpec", "blocked as InvalidSpec after validation: {}\n{text}", b.message);
        }
        for (unit, w) in &report.waits {
            if let WaitOutcome::Crashed { log_tail, .. } = w {
                prop_assert!(false, "{unit} was refused at start: {log_tail:?}\n{text}");
            }
        }
    }
}
