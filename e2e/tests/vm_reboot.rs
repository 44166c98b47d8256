//! `reboot: Auto` on the real kernel in the qemu GPU host (issue 25, part 3): the agent, a
//! systemd service on manifest files, is given kernel arguments with `reboot: Auto` and a
//! maintenance window while its SGLang stand-in serves; it writes `/etc/kernel/cmdline`, runs
//! the refresh, stops the server and reboots the host itself (`systemctl reboot`, a real
//! shutdown); at the next boot it verifies `/proc/cmdline`, reports the partition Ready and
//! starts the server again, without asking for another reboot.
//!
//! THE REAL BOOTLOADER IS NOT RUN: `proxmox-boot-tool` is a stand-in that records the kernel
//! command line the real one would put into the boot entry (`e2e/vm/scenario-lib.sh`,
//! `boot_standins`), and the harness plays the bootloader: `run.sh VM_REBOOT=entry` boots that
//! entry when the guest reboots.
//!
//!     cargo test --workspace --test vm_reboot -- --nocapture   (a restore, then a real reboot: ~2 min)

use gpuplane_e2e::paths::repo_root;
use gpuplane_e2e::vm::{gpuplane_for_vm, preflight, run, standin_tar, tagged as lines};

#[test]
fn auto_reboots_once_into_the_written_arguments_and_verifies_them() {
    preflight();
    let (dir, tar) = standin_tar("gpuplane-vm-reboot");
    let r = run(
        &repo_root().join("e2e/vm/scenarios/reboot-auto.sh"),
        &[
            gpuplane_for_vm(),
            tar,
            repo_root().join("e2e/vm/scenario-lib.sh"),
        ],
        &[
            ("VM_REBOOT", "entry"),
            ("KARGS", "iommu=pt"),
            ("VM_TIMEOUT", "900"),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let out = r.stdout;
    eprintln!("--- reboot-auto.sh: {:.0}s\n{out}\n{}", r.secs, r.stderr);
    assert_eq!(r.code, Some(0), "{out}\n{}", r.stderr);

    // Two boots, the second a real one (another boot id), into the written entry.
    let ids = lines(&out, "BOOT-ID");
    assert!(ids.len() == 2 && ids[0] != ids[1], "{ids:?}");
    let cmdlines = lines(&out, "CMDLINE");
    assert!(
        cmdlines[0].split(' ').any(|w| w == "iommu=pt"),
        "{cmdlines:?}"
    );
    let booted: Vec<&str> = cmdlines[1].split(' ').collect();
    assert!(
        booted.contains(&"vfio-pci.disable_idle_d3=1") && !booted.contains(&"iommu=pt"),
        "the second boot runs the entry the agent's refresh made: {cmdlines:?}"
    );
    assert!(
        r.stderr
            .contains("the guest rebooted; boot 2 runs the entry"),
        "the guest rebooted by itself: {}",
        r.stderr
    );
    assert_eq!(
        lines(&out, "RAN"),
        ["proxmox-boot-tool refresh"],
        "refreshed once"
    );

    // Before: serving; after: verified, Ready, serving again, the VM's GPUs on vfio-pci with
    // the argument in force.
    assert!(out.contains("ACTIVE before active"), "{out}");
    let boot2 = out
        .split("PHASE boot2")
        .nth(1)
        .unwrap_or_else(|| panic!("no second boot: {out}"));
    let after = lines(boot2, "STATUS");
    assert!(after.contains(&"Ready True Converged"), "{after:?}");
    assert!(
        after.contains(&"RebootRequired False KernelArgsBooted"),
        "{after:?}"
    );
    assert!(boot2.contains("ACTIVE after active"), "{boot2}");
    assert!(
        boot2.contains("DRV after 0000:81:00.0 vfio-pci")
            && boot2.contains("DRV after 0000:82:00.0 vfio-pci"),
        "{boot2}"
    );
    assert_eq!(
        lines(&out, "PARAM"),
        ["Y"],
        "vfio-pci reads disable_idle_d3"
    );
    assert!(!out.contains("PHASE not-ready"), "{out}");
    assert!(!out.contains("PHASE no-reboot"), "{out}");

    // The agent's log, by boot: in the first, the arguments written and refreshed, the server
    // stopped, then the reboot asked, Rebooting meanwhile; in the second, no reboot at all.
    let log = lines(&out, "AGENTLOG");
    let starts: Vec<usize> = (0..log.len())
        .filter(|&i| log[i].starts_with("=== boot"))
        .collect();
    assert_eq!(starts.len(), 2, "the agent started once per boot: {log:#?}");
    let (first, second) = log.split_at(starts[1]);
    let at = |part: &[&str], what: &str| {
        part.iter()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{what:?} not in {part:#?}"))
    };
    let written = at(
        first,
        "host write: set kernel arguments in /etc/kernel/cmdline",
    );
    let refreshed = at(first, "host write: run proxmox-boot-tool refresh");
    let stopped = at(first, "host write: stop unit");
    let reboot = at(first, "host write: reboot the host");
    assert!(
        written < refreshed && refreshed < stopped && stopped < reboot,
        "{first:#?}"
    );
    assert!(first[stopped].contains("sglang-e2e"), "{}", first[stopped]);
    // The shutdown the agent asked for stops the agent too (SIGTERM): it finishes the pass
    // that asked, so the status says Rebooting before the host goes down, then it exits.
    let rebooting = at(first, "Reconciling=True (Rebooting)");
    let term = at(first, "SIGTERM: stopping once the pass in progress is done");
    let ended = at(first, "stopped after a whole pass");
    assert!(
        reboot < rebooting && reboot < term && rebooting < ended && term < ended,
        "{first:#?}"
    );
    assert!(
        !second.iter().any(|l| l.contains("reboot the host")),
        "no second reboot: {second:#?}"
    );
    assert!(
        second
            .iter()
            .any(|l| l.contains("RebootRequired=False (KernelArgsBooted)")),
        "{second:#?}"
    );
}
