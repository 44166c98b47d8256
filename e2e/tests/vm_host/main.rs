//! The real host backend on a real Linux kernel, in the qemu GPU host: the scenarios of the base
//! image with the default kernel arguments, one module each (`agent`: rebinding, refusals, a real
//! unit, the IOMMU mode and the reference story; `faults`; `preflight`). Each scenario runs on its
//! own restore of the booted machine's snapshot (`e2e/vm/run.sh`), so the tests run side by side
//! (run.sh bounds how many VMs run at once), through `e2e/vm/shared-boot.sh`: a digest of the host
//! before the scenario and after the reset that follows it (`reset_host` in
//! `e2e/vm/scenario-lib.sh`, which `kernel-args.sh` uses between its stories).
//! [`every_restore_starts_from_the_booted_host_and_the_reset_gives_it_back`] checks both.
//! Needs `e2e/setup/install-vm-deps.sh`, `e2e/vm/build-image.sh` and `cargo build --bin
//! gpuplane` (or `GPUPLANE_BIN`). One test runs its own scenario (under a minute to two; the
//! first run of a machine boots it once to make its snapshot):
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test vm_host -- --nocapture

mod agent;
mod faults;
mod preflight;

use gpuplane_e2e::vm::{boot_shared, SharedBoot};
use serde_json::Value;
use std::sync::OnceLock;

/// The scenarios, each on a VM of its own.
const SCENARIOS: [&str; 5] = ["iommu-mode", "host-agent", "faults", "preflight", "story"];

static RUNS: [OnceLock<SharedBoot>; 5] = [const { OnceLock::new() }; 5];

/// The run of scenario `name`, made by the first test that asks (another asking waits for it).
fn run_of(name: &str) -> &'static SharedBoot {
    let i = SCENARIOS
        .iter()
        .position(|s| *s == name)
        .unwrap_or_else(|| panic!("{name} is not one of {SCENARIOS:?}"));
    RUNS[i].get_or_init(|| boot_shared(&[name]))
}

/// What scenario `name` printed.
pub fn scenario(name: &str) -> &'static str {
    run_of(name).output(name)
}

/// A digest with what no reset can take back left out: the IOMMU page faults the kernel logged
/// (the story writes them to /dev/kmsg on purpose).
fn comparable(digest: &[String]) -> Vec<String> {
    digest
        .iter()
        .map(|l| match l.strip_prefix("observe ") {
            Some(json) => {
                let mut v: Value = serde_json::from_str(json)
                    .unwrap_or_else(|e| panic!("observe in the digest: {e}: {json}"));
                if let Some(i) = v["iommu"].as_object_mut() {
                    i.remove("pageFaults");
                }
                format!("observe {v}")
            }
            None => l.clone(),
        })
        .collect()
}

/// Every scenario's VM starts from the same host, the one the scenarios expect (five stand-in GPUs
/// on bochs-drm, no override, no vfio module, no SGLang unit); after each, `reset_host` gives it
/// back.
#[test]
fn every_restore_starts_from_the_booted_host_and_the_reset_gives_it_back() {
    let first = comparable(&run_of(SCENARIOS[0]).digests[0].1);
    for name in SCENARIOS {
        let b = run_of(name);
        let names: Vec<&str> = b.digests.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["pristine", name],
            "a digest before the scenario and after it\n{}",
            b.stderr
        );
        let pristine = comparable(&b.digests[0].1);
        assert_eq!(
            pristine, first,
            "{name}'s VM did not start from the host {}'s did",
            SCENARIOS[0]
        );
        check_booted_host(&pristine);
        check_reset(name, &pristine, &comparable(&b.digests[1].1));
    }
}

/// The host the scenarios expect: five stand-in GPUs on bochs-drm, no override, no vfio module,
/// no SGLang unit.
fn check_booted_host(pristine: &[String]) {
    let observe: Value =
        serde_json::from_str(pristine[0].strip_prefix("observe ").expect("observe first")).unwrap();
    let gpus: Vec<(&String, &Value)> = observe["pciDevices"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, d)| d["vendor"] == "1234")
        .collect();
    assert_eq!(gpus.len(), 5, "{observe}");
    for (a, d) in &gpus {
        assert_eq!(d["driver"], "bochs-drm", "{a}: {d}");
        assert!(d.get("driverOverride").is_none(), "{a}: {d}");
    }
    assert!(
        !pristine
            .iter()
            .any(|l| l.starts_with("module vfio") || l.starts_with("unit ")),
        "{pristine:#?}"
    );
}

/// The reset after scenario `name` gave back the host it started from.
fn check_reset(name: &str, pristine: &[String], after: &[String]) {
    let lost: Vec<&String> = pristine.iter().filter(|l| !after.contains(l)).collect();
    let left: Vec<&String> = after.iter().filter(|l| !pristine.contains(l)).collect();
    assert!(
        lost.is_empty() && left.is_empty(),
        "the reset after {name} did not give back the booted host:\n  missing: {lost:#?}\n  \
         left behind: {left:#?}"
    );
}
