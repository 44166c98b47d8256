//! Smoke test of the emulated GPU host (e2e/vm/run.sh): Debian's kernel under qemu (TCG,
//! q35 + intel-iommu), restored from the machine's snapshot, checked from inside the guest for
//! what the agent will rely on: four
//! display-class stand-in GPUs (bochs-display, vendor 0x1234) spread over two NUMA nodes, each
//! alone in its IOMMU group, one more behind a PCIe-to-PCI bridge sharing its group with an e1000
//! (a "group companion"), group type DMA-FQ by default and identity with `iommu=pt`, and a real
//! rebind to vfio-pci. And a restored machine is the booted one: the same layout, rebind and host
//! digest from a restore and from a boot (`VM_BOOT=fresh`), and a script's failure comes back
//! the same from both.
//!
//! Needs the VM set-up; without it the test fails (on purpose) and says how to make it:
//!   e2e/setup/install-vm-deps.sh && e2e/vm/build-image.sh
//! Run: cargo test -p gpuplane-e2e --test vm_smoke -- --nocapture   (three restores and a boot, ~1 min)

use gpuplane_e2e::paths::repo_root;
use gpuplane_e2e::vm::{self, gpuplane_for_vm, preflight, HINT};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Prints one `DEV` line per PCI device and one `GROUP` line per IOMMU group; with VFIO=1 also
/// moves one stand-in GPU to vfio-pci the way the agent will (driver_override, unbind,
/// drivers_probe) and prints `VFIO` lines about the result.
const CHECK_SCRIPT: &str = r#"#!/bin/sh
set -u
dev_line() {
  d=/sys/bus/pci/devices/$1
  drv=-; [ -e "$d/driver" ] && drv=$(basename "$(readlink "$d/driver")")
  grp=-; typ=-
  if [ -e "$d/iommu_group" ]; then
    grp=$(basename "$(readlink "$d/iommu_group")"); typ=$(cat "$d/iommu_group/type")
  fi
  echo "DEV $1 $(cat "$d/vendor") $(cat "$d/device") $(cat "$d/class") $(cat "$d/numa_node") $drv $grp $typ"
}
for d in /sys/bus/pci/devices/*; do dev_line "${d##*/}"; done
for g in /sys/kernel/iommu_groups/*; do
  echo "GROUP ${g##*/} $(cat "$g/type") $(ls "$g/devices" | tr '\n' ' ')"
done
[ "$VFIO" = 1 ] || exit 0
modprobe vfio-pci || { echo "VFIO modprobe-failed"; exit 3; }
t=""
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor")" = 0x1234 ] && [ "$(cat "$d/class")" = 0x038000 ] || continue
  [ "$(ls "$d/iommu_group/devices" | wc -l)" = 1 ] || continue
  t=${d##*/}
done
[ -n "$t" ] || { echo "VFIO no-target"; exit 3; }
d=/sys/bus/pci/devices/$t
g=$(basename "$(readlink "$d/iommu_group")")
echo "VFIO target $t $g"
echo vfio-pci > "$d/driver_override"
[ -e "$d/driver" ] && echo "$t" > "$d/driver/unbind"
echo "$t" > /sys/bus/pci/drivers_probe
echo "VFIO driver $(basename "$(readlink "$d/driver")")"
[ -c "/dev/vfio/$g" ] && echo "VFIO devnode /dev/vfio/$g"
echo "VFIO ls $(ls /dev/vfio | tr '\n' ' ')"
"#;

#[derive(Debug, Clone)]
struct Dev {
    bdf: String,
    vendor: String,
    device: String,
    class: String,
    numa: i32,
    driver: String,
    group: String,
    group_type: String,
}

/// Boots the VM once with CHECK_SCRIPT; returns its output. Panics on any failure.
fn boot(label: &str, kargs: &str, vfio: bool, tmp: &Path) -> String {
    let script = tmp.join(format!("check-{label}.sh"));
    let body = CHECK_SCRIPT.replacen("set -u\n", &format!("set -u\nVFIO={}\n", vfio as u8), 1);
    std::fs::write(&script, body).unwrap();
    let out = vm::run(&script, &[], &[("KARGS", kargs)]);
    let (secs, stdout, stderr) = (out.secs, &out.stdout, &out.stderr);
    eprintln!(
        "--- boot {label} (KARGS={kargs:?}): {secs:.1}s wall, exit {:?}",
        out.code
    );
    eprint!("{stdout}");
    if !stderr.is_empty() {
        eprintln!("--- stderr\n{stderr}");
    }
    if out.code == Some(2) {
        panic!("run.sh refused to run ({}); {HINT}", stderr.trim());
    }
    assert!(
        out.code == Some(0),
        "boot {label}: run.sh exited {:?}\n{stderr}",
        out.code
    );
    out.stdout
}

fn parse_devs(out: &str) -> Vec<Dev> {
    out.lines()
        .filter_map(|l| l.strip_prefix("DEV "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 8, "bad DEV line: {l}");
            Dev {
                bdf: f[0].into(),
                vendor: f[1].into(),
                device: f[2].into(),
                class: f[3].into(),
                numa: f[4]
                    .parse()
                    .unwrap_or_else(|_| panic!("bad numa_node in {l}")),
                driver: f[5].into(),
                group: f[6].into(),
                group_type: f[7].into(),
            }
        })
        .collect()
}

/// Checks the PCI/IOMMU layout every boot must show; returns the four stand-in GPUs.
fn check_layout(devs: &[Dev], want_type: &str) -> Vec<Dev> {
    let mut members: BTreeMap<&str, Vec<&Dev>> = BTreeMap::new();
    for d in devs.iter().filter(|d| d.group != "-") {
        members.entry(d.group.as_str()).or_default().push(d);
    }
    assert!(!members.is_empty(), "no IOMMU groups at all: {devs:#?}");
    for d in devs {
        assert_ne!(d.group, "-", "device {} has no IOMMU group", d.bdf);
        assert_eq!(d.group_type, want_type, "IOMMU group type of {}", d.bdf);
    }
    let display: Vec<&Dev> = devs
        .iter()
        .filter(|d| d.vendor == "0x1234" && d.class == "0x038000")
        .collect();
    let alone: Vec<Dev> = display
        .iter()
        .filter(|d| members[d.group.as_str()].len() == 1)
        .map(|d| (*d).clone())
        .collect();
    assert_eq!(
        alone.len(),
        4,
        "want 4 display-class 0x1234 devices alone in their group: {display:#?}"
    );
    for d in &alone {
        assert_eq!(d.device, "0x1111", "bochs-display device id at {}", d.bdf);
        assert_eq!(d.driver, "bochs-drm", "driver of {}", d.bdf);
    }
    let on = |n: i32| alone.iter().filter(|d| d.numa == n).count();
    assert_eq!(
        (on(0), on(1)),
        (2, 2),
        "NUMA spread of the stand-in GPUs: {alone:#?}"
    );
    let groups: BTreeSet<&str> = alone.iter().map(|d| d.group.as_str()).collect();
    assert_eq!(
        groups.len(),
        4,
        "stand-in GPUs must be in distinct IOMMU groups"
    );

    // The companion pair: one more display device sharing its group with an e1000 (8086:100e).
    let shared: Vec<&&Dev> = display
        .iter()
        .filter(|d| members[d.group.as_str()].len() > 1)
        .collect();
    assert_eq!(
        shared.len(),
        1,
        "want one display device with group companions: {display:#?}"
    );
    let companions = &members[shared[0].group.as_str()];
    assert!(
        companions
            .iter()
            .any(|c| c.vendor == "0x8086" && c.device == "0x100e" && c.class == "0x020000"),
        "the e1000 must share group {} with {}: {companions:#?}",
        shared[0].group,
        shared[0].bdf
    );
    alone
}

#[test]
fn vm_gpu_host_layout_iommu_and_vfio() {
    preflight();
    let tmp = std::env::temp_dir().join(format!("gpuplane-vm-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();

    // Boot 1: default kernel args (intel_iommu=on): DMA-FQ groups, then a rebind to vfio-pci.
    let out = boot("dma", "", true, &tmp);
    let devs = parse_devs(&out);
    let gpus = check_layout(&devs, "DMA-FQ");
    let vfio: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("VFIO "))
        .collect();
    let target = vfio
        .iter()
        .find_map(|l| l.strip_prefix("target "))
        .unwrap_or_else(|| panic!("no VFIO target reported: {vfio:?}"));
    let (bdf, group) = target.split_once(' ').unwrap();
    assert!(
        gpus.iter().any(|g| g.bdf == bdf && g.group == group),
        "target {target} is a stand-in GPU"
    );
    assert!(
        vfio.contains(&"driver vfio-pci"),
        "driver link did not move to vfio-pci: {vfio:?}"
    );
    let node = format!("devnode /dev/vfio/{group}");
    assert!(
        vfio.contains(&node.as_str()),
        "/dev/vfio/{group} not created: {vfio:?}"
    );

    // Boot 2: iommu=pt: the same layout, identity domains.
    let out = boot("pt", "iommu=pt", false, &tmp);
    check_layout(&parse_devs(&out), "identity");

    let _ = std::fs::remove_dir_all(&tmp);
}

/// What [`a_restored_machine_is_the_booted_one`] runs: the layout (CHECK_SCRIPT, with a rebind to
/// vfio-pci), the host digest the scenarios start from (scenario-lib.sh), then a failure.
const SAME_SCRIPT: &str = r#"
. /usr/local/bin/scenario-lib.sh
echo "BOOTID $(cat /proc/sys/kernel/random/boot_id)"
echo "DIGEST $(host_digest)"
echo "ARGS $(job_arg gpuplane.smoke)"
echo "PLANTED failure"
exit 7
"#;

/// A restored machine (the default: the snapshot of a booted one) and a booted one
/// (`VM_BOOT=fresh`) show the same PCI and IOMMU layout, the same rebind, the same host digest and
/// the job's arguments, and a script's failure comes back the same from both: the restore hides
/// nothing a boot would show. The one difference allowed is the boot id (the agent observes it):
/// two boots have two (e2e/vm/README.md, "What a restored guest may not assume").
#[test]
fn a_restored_machine_is_the_booted_one() {
    preflight();
    let tmp = std::env::temp_dir().join(format!("gpuplane-vm-same-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let script = tmp.join("same.sh");
    let body = CHECK_SCRIPT
        .replacen("set -u\n", "set -u\nVFIO=1\n", 1)
        .replacen("[ \"$VFIO\" = 1 ] || exit 0\n", "", 1);
    std::fs::write(&script, format!("{body}{SAME_SCRIPT}")).unwrap();
    let files = [
        gpuplane_for_vm(),
        repo_root().join("e2e/vm/scenario-lib.sh"),
    ];
    let mut outs = vec![];
    for how in ["restore", "fresh"] {
        let r = vm::run(
            &script,
            &files,
            &[("VM_BOOT", how), ("VM_ARGS", "gpuplane.smoke=same")],
        );
        eprintln!(
            "--- {how}: {:.1}s, exit {:?}\n{}{}",
            r.secs, r.code, r.stdout, r.stderr
        );
        assert_eq!(
            r.code,
            Some(7),
            "{how}: the script's failure is its exit status\n{}",
            r.stderr
        );
        let said = if how == "fresh" {
            "booted fresh"
        } else {
            "restored from snapshot"
        };
        assert!(
            r.stderr.contains(said),
            "{how}: run.sh says what it did\n{}",
            r.stderr
        );
        for want in [
            "PLANTED failure",
            "ARGS same",
            "VFIO driver vfio-pci",
            "DIGEST [\"",
        ] {
            assert!(r.stdout.contains(want), "{how}: no {want:?}\n{}", r.stdout);
        }
        let id = r
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("BOOTID "))
            .unwrap_or_else(|| panic!("{how}: no BOOTID line"))
            .to_string();
        outs.push((r.stdout.replace(&id, "<boot id>"), id));
    }
    let ((restored, restored_id), (booted, booted_id)) = (&outs[0], &outs[1]);
    assert_ne!(restored_id, booted_id, "two boots, two boot ids");
    check_layout(&parse_devs(restored), "DMA-FQ");
    let diff: Vec<(&str, &str)> = restored
        .lines()
        .zip(booted.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert!(
        diff.is_empty() && restored.lines().count() == booted.lines().count(),
        "the restored machine differs from the booted one: {diff:#?}"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
