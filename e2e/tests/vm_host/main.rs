//! The real host backend on a real Linux kernel, in the qemu GPU host: the scenarios that boot the
//! base image with the same kernel arguments, one module each (`agent`: rebinding, refusals, a
//! real unit, the IOMMU mode and the reference story; `faults`; `preflight`). They share one boot
//! (`e2e/vm/shared-boot.sh`): a boot costs about 35 s of a 2-core machine, and CI's time is
//! short. Between two scenarios the host is reset (`reset_host` in `e2e/vm/scenario-lib.sh`);
//! [`the_reset_between_scenarios_gives_back_the_booted_host`] checks that each reset did.
//! Needs `e2e/setup/install-vm-deps.sh`, `e2e/vm/build-image.sh` and `cargo build --bin
//! gpuplane` (or `GPUPLANE_BIN`). Any one test boots the whole set (about 5 minutes):
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test vm_host -- --nocapture

mod agent;
mod faults;
mod preflight;

use gpuplane_e2e::vm::{boot_shared, SharedBoot};
use serde_json::Value;
use std::sync::OnceLock;

/// The scenarios of the shared boot, in the order they run. `story` writes IO_PAGE_FAULT lines to
/// the kernel log, which no reset takes back, so it runs last.
const SHARED: [&str; 5] = ["iommu-mode", "host-agent", "faults", "preflight", "story"];

static BOOT: OnceLock<SharedBoot> = OnceLock::new();

/// The shared boot, booted by the first test that asks (the others wait for it).
fn boot() -> &'static SharedBoot {
    BOOT.get_or_init(|| boot_shared(&SHARED))
}

/// What scenario `name` of the shared boot printed.
pub fn scenario(name: &str) -> &'static str {
    boot().output(name)
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

#[test]
fn the_reset_between_scenarios_gives_back_the_booted_host() {
    let b = boot();
    let names: Vec<&str> = b.digests.iter().map(|(n, _)| n.as_str()).collect();
    let mut want = vec!["pristine"];
    want.extend(SHARED);
    assert_eq!(
        names, want,
        "a digest before the first scenario and after each\n{}",
        b.stderr
    );

    // The booted host is the one the scenarios expect: five stand-in GPUs on bochs-drm, no
    // override, no vfio module, no SGLang unit.
    let pristine = comparable(&b.digests[0].1);
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

    for (name, digest) in &b.digests[1..] {
        let after = comparable(digest);
        let lost: Vec<&String> = pristine.iter().filter(|l| !after.contains(l)).collect();
        let left: Vec<&String> = after.iter().filter(|l| !pristine.contains(l)).collect();
        assert!(
            lost.is_empty() && left.is_empty(),
            "the reset after {name} did not give back the booted host:\n  missing: {lost:#?}\n  \
             left behind: {left:#?}"
        );
    }
}
