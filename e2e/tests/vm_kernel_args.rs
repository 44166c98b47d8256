//! Kernel arguments written where the bootloader reads them, and a reboot that is verified
//! (issue 25, part 3), on a real kernel in the qemu GPU host (`e2e/vm/scenarios/kernel-args.sh`).
//!
//! Run 1 (a restore of the `KARGS=iommu=pt` machine: the host as it was booted) runs two stories with the same partition
//! (`spec.host.kernelArgs: {present: [vfio-pci.disable_idle_d3=1], absent: [iommu=pt]}`, a host
//! slice and a vfio-pci slice for VM 300): `cmdline`, a host with `/etc/kernel/cmdline`
//! (proxmox-boot-tool), and `grub`, a host with `/etc/default/grub`. The agent edits the file,
//! runs the refresh command, reports `RebootRequired=True` with the difference, and the
//! vfio-pci slice waits. Boot 2 is the reboot, a real boot (`VM_BOOT=fresh`): the harness boots the kernel with the command
//! line of the boot entry the refresh made, the agent's state restored, and the same spec
//! converges: `/proc/cmdline` holds the arguments, `RebootRequired=False`, the partition Ready,
//! the vfio-pci slice bound — and the kernel itself took the argument (vfio_pci's
//! `disable_idle_d3` reads `Y`).
//!
//! **The real bootloader is not run here.** `proxmox-boot-tool` and `update-grub` are stand-ins
//! that record that they ran and the command line the real tool would put into the boot entry
//! (the text of `/etc/kernel/cmdline`; for GRUB, the entry's root and `rw`, then
//! `$GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT` with `/etc/default/grub` sourced, as
//! grub-mkconfig does); the harness plays the bootloader by booting that entry. The two
//! stories' entries are the same command line, so one second boot serves both.
//!
//! Needs `e2e/setup/install-vm-deps.sh`, `e2e/vm/build-image.sh` and `cargo build --bin
//! gpuplane` (or `GPUPLANE_BIN`). A restore and a boot, 1.5 to 3 minutes on a busy 2-core
//! machine (the journal of each story is printed with `--nocapture`):
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test vm_kernel_args -- --nocapture

use gpuplane_e2e::vm::{boot_scenario_with, gpuplane_for_vm, preflight, ready, Report};
use serde_json::Value;
use std::sync::OnceLock;

const PART: &str = "GpuPartition/vmhost";
const STORIES: [&str; 2] = ["cmdline", "grub"];

struct Boots {
    first: Report,
    second: Report,
    /// The command line boot 2 was given (the boot entry the refresh recorded).
    entry: String,
}

static BOOTS: OnceLock<Boots> = OnceLock::new();

fn boots() -> &'static Boots {
    BOOTS.get_or_init(|| {
        preflight();
        let dir = std::env::temp_dir().join(format!("gpuplane-vm-kargs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out1 = boot_scenario_with(
            "kernel-args.sh",
            &[gpuplane_for_vm()],
            &[("KARGS", "iommu=pt")],
        );
        let first = Report::parse(&out1);
        let mut files = vec![gpuplane_for_vm()];
        for s in STORIES {
            let state = &first.get("STATE", s)[0];
            assert!(!state.is_empty(), "boot 1 printed no state for {s}");
            let f = dir.join(format!("kargs-{s}.state"));
            std::fs::write(&f, state).unwrap();
            files.push(f);
        }
        let entry = first.get("ENTRY", "cmdline")[0].clone();
        assert_eq!(
            first.get("ENTRY", "grub")[0],
            entry,
            "both bootloaders' entries give the kernel the same command line"
        );
        // Boot 2 boots the kernel (no snapshot): the command line under test is the boot's.
        let out2 = boot_scenario_with(
            "kernel-args.sh",
            &files,
            &[("KARGS", entry.as_str()), ("VM_BOOT", "fresh")],
        );
        let _ = std::fs::remove_dir_all(&dir);
        Boots {
            first,
            second: Report::parse(&out2),
            entry,
        }
    })
}

/// (status, reason, message) of the partition's condition `t` in a converge's JSON.
fn condition(j: &Value, t: &str) -> (String, String, String) {
    let c = j["status"][PART]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
        .cloned()
        .unwrap_or_default();
    (
        c["status"].as_str().unwrap_or("").into(),
        c["reason"].as_str().unwrap_or("").into(),
        c["message"].as_str().unwrap_or("").into(),
    )
}

fn file(r: &Report, name: &str) -> String {
    serde_json::from_str(&r.get("FILE", name)[0]).unwrap()
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// The story's journal, as the report prints it: args written → RebootRequired → reboot →
/// verified.
fn journal(b: &Boots, s: &str) -> String {
    let j1 = b.first.json(s);
    let j2 = b.second.json(s);
    let rr1 = condition(&j1, "RebootRequired");
    let rr2 = condition(&j2, "RebootRequired");
    let ready2 = ready(&j2, PART);
    let mut out = String::new();
    let mut line = |t: String| {
        out.push_str(&t);
        out.push('\n');
    };
    line(format!(
        "[{s}] boot 1 /proc/cmdline: {}",
        b.first.get("CMDLINE", "boot")[0]
    ));
    line(format!(
        "[{s}] before:  {:?}",
        file(&b.first, &format!("{s}-before"))
    ));
    line(format!("[{s}] written: {:?}", file(&b.first, s)));
    for r in b.first.get("RAN", s) {
        line(format!(
            "[{s}] refresh ran (stand-in, the real bootloader is not run): {r}"
        ));
    }
    line(format!("[{s}] boot entry: {}", b.first.get("ENTRY", s)[0]));
    line(format!(
        "[{s}] RebootRequired={} {}: {}",
        rr1.0, rr1.1, rr1.2
    ));
    line(format!(
        "[{s}] Ready={} {}",
        ready(&j1, PART).0,
        ready(&j1, PART).1
    ));
    line(format!(
        "[{s}] reboot: the harness boots the entry ({})",
        b.entry
    ));
    line(format!(
        "[{s}] boot 2 /proc/cmdline: {}",
        b.second.get("CMDLINE", "boot")[0]
    ));
    line(format!(
        "[{s}] vfio_pci disable_idle_d3: {}",
        b.second.get("PARAM", &format!("{s}-after"))[0]
    ));
    line(format!(
        "[{s}] RebootRequired={} {}: {}",
        rr2.0, rr2.1, rr2.2
    ));
    line(format!(
        "[{s}] Ready={} {}: {}",
        ready2.0, ready2.1, ready2.2
    ));
    out
}

#[test]
fn the_agent_writes_the_arguments_refreshes_and_says_a_reboot_is_required() {
    let b = boots();
    let cmdline = words(&b.first.get("CMDLINE", "boot")[0]);
    assert!(
        cmdline.contains(&"iommu=pt"),
        "boot 1 runs with iommu=pt: {cmdline:?}"
    );
    assert_eq!(
        file(&b.first, "cmdline"),
        "root=/dev/vda rw quiet intel_iommu=on vfio-pci.disable_idle_d3=1\n",
        "/etc/kernel/cmdline: only the partition's words changed"
    );
    let grub_before = file(&b.first, "grub-before");
    assert_eq!(
        file(&b.first, "grub"),
        grub_before.replace(
            "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet intel_iommu=on iommu=pt\"",
            "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet intel_iommu=on vfio-pci.disable_idle_d3=1\""
        ),
        "/etc/default/grub: every other byte kept"
    );
    assert_eq!(
        b.first.get("RAN", "cmdline"),
        &vec!["proxmox-boot-tool refresh".to_string()]
    );
    assert_eq!(b.first.get("RAN", "grub"), &vec!["update-grub".to_string()]);
    for s in STORIES {
        let j = b.first.json(s);
        let (st, reason, msg) = condition(&j, "RebootRequired");
        assert_eq!(
            (st.as_str(), reason.as_str()),
            ("True", "KernelArgsPending"),
            "{s}: {msg}"
        );
        assert!(
            msg.starts_with("the running kernel lacks vfio-pci.disable_idle_d3=1 and still has iommu=pt (/proc/cmdline)"),
            "{s}: {msg}"
        );
        let (r, why, m) = ready(&j, PART);
        assert_eq!(
            (r.as_str(), why.as_str()),
            ("False", "RebootRequired"),
            "{s}: {m}"
        );
        assert!(m.contains("slices vm wait"), "{s}: {m}");
        // The vm slice waits on the host driver; the host slice is in place.
        for (addr, (drv, _)) in b.first.drivers(s) {
            assert_eq!(
                drv, "bochs-drm",
                "{s}: {addr} was not moved before the reboot"
            );
        }
        // Again: nothing is written, the same is said.
        let again = b.first.json(&format!("{s}-again"));
        assert_eq!(again["writes"], 0, "{s}: {again}");
        assert_eq!(condition(&again, "RebootRequired").1, "KernelArgsPending");
    }
}

#[test]
fn after_the_reboot_the_command_line_is_verified_and_the_partition_is_ready() {
    let b = boots();
    let cmdline = words(&b.second.get("CMDLINE", "boot")[0]);
    assert!(
        cmdline.contains(&"vfio-pci.disable_idle_d3=1"),
        "{cmdline:?}"
    );
    assert!(!cmdline.contains(&"iommu=pt"), "{cmdline:?}");
    for s in STORIES {
        eprintln!("--- journal of the {s} story\n{}", journal(b, s));
        let j = b.second.json(s);
        let (st, reason, msg) = condition(&j, "RebootRequired");
        assert_eq!(
            (st.as_str(), reason.as_str()),
            ("False", "KernelArgsBooted"),
            "{s}: {msg}"
        );
        let (r, why, m) = ready(&j, PART);
        assert_eq!(
            (r.as_str(), why.as_str()),
            ("True", "Converged"),
            "{s}: {m}"
        );
        assert_eq!(b.second.rc(s), 0, "{s}: {j}");
        let drv = b.second.drivers(&format!("{s}-after"));
        for a in ["0000:81:00.0", "0000:82:00.0"] {
            assert_eq!(
                drv[a].0, "vfio-pci",
                "{s}: {a} went to the VM after the reboot"
            );
        }
        // The real kernel took the argument: vfio-pci was loaded with it.
        assert_eq!(b.second.get("PARAM", &format!("{s}-after"))[0], "Y", "{s}");
        // Nothing was written to the bootloader again, nothing refreshed; converged twice.
        let kinds = gpuplane_e2e::vm::step_kinds(&j);
        assert!(
            !kinds
                .iter()
                .any(|k| k == "setKernelArgs" || k == "refreshBootloader"),
            "{s}: {kinds:?}"
        );
        assert_eq!(
            b.second.get("RANS", &format!("{s}-after"))[0],
            "0",
            "{s}: no refresh at boot 2"
        );
        assert_eq!(b.second.json(&format!("{s}-again"))["writes"], 0, "{s}");
    }
}
