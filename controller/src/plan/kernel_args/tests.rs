//! The reference story (kpro6 twin: tp-8 in LXC 129, split into tp-4 + the confidential VM's
//! vfio-pci slice) on a host whose partition also asks for kernel arguments.

use crate::bootloader::Bootloader;
use crate::converge::{converge, Report, Stop};
use crate::desired::reboot::RebootGate;
use crate::desired::Desired;
use crate::host::sim::{SimBoot, SimHost};
use crate::host::Host;
use crate::testutil::{desired, key, manifests, twin};
use gpuplane_crds::KernelArgs;

const PART: &str = "GpuPartition/kpro6";
/// The twin's NUMA node 1 GPUs: the confidential VM's slice.
const VM_GPUS: [&str; 4] = [
    "0000:81:00.0",
    "0000:91:00.0",
    "0000:e1:00.0",
    "0000:f1:00.0",
];
const CMDLINE: &str = "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_iommu=on iommu=pt\n";
const GRUB: &str = "# If you change this file, run 'update-grub' afterwards\nGRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet amd_iommu=on iommu=pt\"\nGRUB_CMDLINE_LINUX=\"\"\n";

fn args() -> KernelArgs {
    KernelArgs {
        present: vec!["vfio-pci.disable_idle_d3=1".into()],
        absent: vec!["iommu=pt".into()],
        allow_keys: vec![],
    }
}

/// The twin booted with `iommu=pt`, its bootloader `b`.
fn host(b: Bootloader) -> (SimHost, Desired) {
    let mut h = twin();
    h.file.boot = Some(SimBoot {
        cmdline: "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_iommu=on iommu=pt".into(),
        boot_id: "boot-1".into(),
        kernel_cmdline: (b == Bootloader::ProxmoxBootTool).then(|| CMDLINE.into()),
        grub: (b == Bootloader::Grub).then(|| GRUB.into()),
        ..SimBoot::default()
    });
    let mut d = desired(&mut h, &manifests());
    d.partition.kernel_args = Some(args());
    (h, d)
}

fn run(h: &mut SimHost, d: &Desired) -> Report {
    h.watch_units(&d.servers.iter().map(|s| s.unit.clone()).collect::<Vec<_>>());
    let mut door = crate::door::Door::new(h);
    converge(d, &mut door, &Default::default())
}

/// (status, reason, message) of the partition's condition `t`.
fn cond(d: &Desired, r: &Report, t: &str) -> (String, String, String) {
    let st = crate::status::compute(d, r, &Default::default(), &crate::clock::now());
    let c = st[&key(PART)]
        .condition(t)
        .cloned()
        .unwrap_or_else(|| panic!("no {t}"));
    (c.status, c.reason, c.message)
}

fn drivers(h: &mut SimHost, addrs: &[&str]) -> Vec<String> {
    let st = h.observe().unwrap();
    addrs
        .iter()
        .map(|a| st.pci_devices[*a].driver.clone().unwrap_or_default())
        .collect()
}

#[test]
fn args_written_refreshed_then_reboot_required_while_the_vm_slice_waits() {
    let (mut h, d) = host(Bootloader::ProxmoxBootTool);
    let r = run(&mut h, &d);
    let kinds: Vec<&str> = r.applied.iter().map(|a| a.planned.step.kind()).collect();
    // First after the GPU ledger: nothing on the GPUs depends on them.
    assert_eq!(
        &kinds[..3],
        ["writeLedger", "setKernelArgs", "refreshBootloader"],
        "{kinds:?}"
    );
    let boot = h.file.boot.clone().unwrap();
    assert_eq!(
        boot.kernel_cmdline.as_deref(),
        Some("root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_iommu=on vfio-pci.disable_idle_d3=1\n"),
        "only the partition's words changed"
    );
    assert_eq!(boot.refreshes, ["proxmox-boot-tool refresh"]);
    // The VM slice waits; the inference slice and its server went on.
    assert_eq!(drivers(&mut h, &VM_GPUS), ["nvidia"; 4]);
    assert!(!kinds.contains(&"unbind"), "{kinds:?}");
    assert!(
        kinds.contains(&"startUnit"),
        "the server moved to tp-4: {kinds:?}"
    );
    let Some(Stop::Blocked { blockers }) = &r.stop else {
        panic!("{:?}", r.stop)
    };
    assert_eq!(blockers.len(), 1, "{blockers:?}");
    assert_eq!(blockers[0].reason, "RebootRequired");
    assert!(
        blockers[0].message.contains("slices confidential-vm wait"),
        "{}",
        blockers[0].message
    );
    let (s, reason, msg) = cond(&d, &r, "RebootRequired");
    assert_eq!((s.as_str(), reason.as_str()), ("True", "KernelArgsPending"));
    assert!(
        msg == "the running kernel lacks vfio-pci.disable_idle_d3=1 and still has iommu=pt (/proc/cmdline); the agent wrote them to /etc/kernel/cmdline and ran proxmox-boot-tool refresh: reboot the host to boot with them (reboot: Manual: the agent never reboots)",
        "{msg}"
    );
    let (ready, why, _) = cond(&d, &r, "Ready");
    assert_eq!((ready.as_str(), why.as_str()), ("False", "RebootRequired"));
    assert_eq!(cond(&d, &r, "Stalled").0, "True", "a person must reboot");
    // A second run writes nothing and says the same.
    let again = run(&mut h, &d);
    assert_eq!(again.writes, 0, "{:?}", again.applied);
    assert_eq!(cond(&d, &again, "RebootRequired").1, "KernelArgsPending");

    // The reboot: the kernel comes up with what the bootloader was refreshed from.
    h.file.boot.as_mut().unwrap().reboot();
    let after = run(&mut h, &d);
    assert!(after.converged(), "{:?}", after.stop);
    assert_eq!(
        drivers(&mut h, &VM_GPUS),
        ["vfio-pci"; 4],
        "the VM slice went on after the reboot"
    );
    let (s, reason, msg) = cond(&d, &after, "RebootRequired");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("False", "KernelArgsBooted"),
        "{msg}"
    );
    assert_eq!(cond(&d, &after, "Ready").0, "True");
    // The argument was the confidential VM's missing prerequisite (vfio-pci loads with it).
    let (_, _, cc) = cond(&d, &after, "ConfidentialReady");
    assert!(!cc.contains("VfioIdleD3"), "{cc}");
    assert!(cond(&d, &r, "ConfidentialReady").2.contains("VfioIdleD3"));
    assert_eq!(run(&mut h, &d).writes, 0, "converged: zero writes");
    assert_eq!(h.file.boot.unwrap().refreshes.len(), 1, "refreshed once");
}

#[test]
fn grub_hosts_get_their_default_line_edited() {
    let (mut h, d) = host(Bootloader::Grub);
    let r = run(&mut h, &d);
    let boot = h.file.boot.clone().unwrap();
    assert_eq!(
        boot.grub.as_deref(),
        Some(
            GRUB.replace(
                "amd_iommu=on iommu=pt\"",
                "amd_iommu=on vfio-pci.disable_idle_d3=1\""
            )
            .as_str()
        )
    );
    assert_eq!(boot.refreshes, ["update-grub"]);
    let (_, _, msg) = cond(&d, &r, "RebootRequired");
    assert!(
        msg.contains("/etc/default/grub") && msg.contains("update-grub"),
        "{msg}"
    );
    h.file.boot.as_mut().unwrap().reboot();
    let after = run(&mut h, &d);
    assert!(after.converged(), "{:?}", after.stop);
    assert_eq!(cond(&d, &after, "RebootRequired").1, "KernelArgsBooted");
}

#[test]
fn killed_between_the_write_and_the_refresh_the_next_run_refreshes() {
    let (mut h, d) = host(Bootloader::ProxmoxBootTool);
    let st = h.observe().unwrap();
    let p = super::super::plan(&d, &st);
    let first = p.steps[1].step.clone();
    assert_eq!(first.kind(), "setKernelArgs");
    h.apply(&p.steps[0].step).unwrap();
    h.apply(&first).unwrap();
    // "Killed" here: the next plan starts with the refresh, and says why.
    let p = super::super::plan(&d, &h.observe().unwrap());
    assert_eq!(p.steps[0].step.kind(), "refreshBootloader", "{:?}", p.steps);
    assert!(
        p.steps[0].why.contains("not yet refreshed"),
        "{}",
        p.steps[0].why
    );
    assert!(!p.steps.iter().any(|s| s.step.kind() == "setKernelArgs"));
    // A person's later edit (another hash) is not the agent's to refresh.
    let boot = h.file.boot.as_mut().unwrap();
    boot.kernel_cmdline = Some(
        boot.kernel_cmdline
            .clone()
            .unwrap()
            .replace('\n', " mine=1\n"),
    );
    let p = super::super::plan(&d, &h.observe().unwrap());
    assert!(
        !p.steps.iter().any(|s| s.step.kind() == "refreshBootloader"),
        "{:?}",
        p.steps
    );
}

#[test]
fn a_boot_without_the_arguments_stalls_and_never_writes_again() {
    let (mut h, d) = host(Bootloader::ProxmoxBootTool);
    run(&mut h, &d);
    // The host rebooted, but the bootloader booted an old entry: same command line, new boot.
    h.file.boot.as_mut().unwrap().boot_id = "boot-2".into();
    let r = run(&mut h, &d);
    assert_eq!(r.writes, 0, "{:?}", r.applied);
    let Some(Stop::Blocked { blockers }) = &r.stop else {
        panic!("{:?}", r.stop)
    };
    assert_eq!(blockers[0].reason, "KernelArgsNotBooted");
    let (s, reason, msg) = cond(&d, &r, "RebootRequired");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("False", "KernelArgsNotBooted")
    );
    assert!(
        msg.contains("lacks vfio-pci.disable_idle_d3=1 and still has iommu=pt")
            && msg.contains("does not reboot again"),
        "{msg}"
    );
    let (st, why, _) = cond(&d, &r, "Stalled");
    assert_eq!((st.as_str(), why.as_str()), ("True", "KernelArgsNotBooted"));
    assert_eq!(drivers(&mut h, &VM_GPUS), ["nvidia"; 4]);
}

#[test]
fn no_bootloader_config_is_said_plainly_and_nothing_is_written_for_it() {
    let (mut h, d) = host(Bootloader::ProxmoxBootTool);
    h.file.boot.as_mut().unwrap().kernel_cmdline = None;
    let r = run(&mut h, &d);
    assert!(!r
        .applied
        .iter()
        .any(|a| a.planned.step.kind().contains("Kernel")
            || a.planned.step.kind() == "refreshBootloader"));
    let (s, reason, msg) = cond(&d, &r, "RebootRequired");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "BootloaderNotFound")
    );
    assert!(msg.contains("neither /etc/kernel/cmdline"), "{msg}");
}

#[test]
fn an_unsupported_grub_line_is_refused_not_guessed() {
    let (mut h, d) = host(Bootloader::Grub);
    h.file.boot.as_mut().unwrap().grub =
        Some("GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT iommu=pt\"\n".into());
    let r = run(&mut h, &d);
    assert!(!r
        .applied
        .iter()
        .any(|a| a.planned.step.kind() == "setKernelArgs"));
    let (s, reason, msg) = cond(&d, &r, "RebootRequired");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "BootloaderConfigUnsupported")
    );
    assert!(msg.contains("expansion"), "{msg}");
}

#[test]
fn arguments_a_person_wrote_are_not_refreshed_and_the_message_says_so() {
    let (mut h, d) = host(Bootloader::ProxmoxBootTool);
    h.file.boot.as_mut().unwrap().kernel_cmdline =
        Some("root=ZFS=rpool/ROOT/pve-1 quiet vfio-pci.disable_idle_d3=1\n".into());
    let r = run(&mut h, &d);
    assert!(h.file.boot.as_ref().unwrap().refreshes.is_empty());
    let (s, _, msg) = cond(&d, &r, "RebootRequired");
    assert_eq!(s, "True");
    assert!(msg.contains("/etc/kernel/cmdline has them (not written by the agent: make sure proxmox-boot-tool refresh ran)"), "{msg}");
}

#[test]
fn arguments_already_booted_need_nothing_and_no_kernel_args_means_no_condition() {
    let (mut h, mut d) = host(Bootloader::ProxmoxBootTool);
    let boot = h.file.boot.as_mut().unwrap();
    boot.cmdline = "root=ZFS=rpool/ROOT/pve-1 quiet vfio-pci.disable_idle_d3=1".into();
    boot.kernel_cmdline =
        Some("root=ZFS=rpool/ROOT/pve-1 quiet vfio-pci.disable_idle_d3=1\n".into());
    let r = run(&mut h, &d);
    assert!(r.converged(), "{:?}", r.stop);
    assert!(
        h.file.boot.as_ref().unwrap().refreshes.is_empty(),
        "a config the agent did not write is not refreshed"
    );
    assert_eq!(cond(&d, &r, "RebootRequired").1, "KernelArgsBooted");
    d.partition.kernel_args = None;
    let st = crate::status::compute(&d, &r, &Default::default(), &crate::clock::now());
    assert!(st[&key(PART)].condition("RebootRequired").is_none());
}

/// A GRUB drop-in: its words count (a `present` word it already adds is not written again);
/// an `absent` word it adds cannot be removed by an edit of /etc/default/grub, so the agent
/// writes nothing and names the drop-in.
#[test]
fn a_grub_drop_in_counts_and_an_absent_word_there_is_named_not_edited_around() {
    let (mut h, d) = host(Bootloader::Grub);
    {
        let b = h.file.boot.as_mut().unwrap();
        b.grub = Some(GRUB.replace(" iommu=pt", "")); // main no longer has it
        b.grub_d.insert(
            "50-iommu.cfg".into(),
            "GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT iommu=pt\"\n".into(),
        );
    }
    let before = h.file.boot.clone().unwrap();
    let r = run(&mut h, &d);
    let kinds: Vec<&str> = r.applied.iter().map(|a| a.planned.step.kind()).collect();
    assert!(
        !kinds.contains(&"setKernelArgs") && !kinds.contains(&"refreshBootloader"),
        "{kinds:?}"
    );
    assert_eq!(h.file.boot.as_ref().unwrap().grub, before.grub, "untouched");
    let (status, _reason, message) = cond(&d, &r, "RebootRequired");
    assert!(
        message.contains("/etc/default/grub.d/50-iommu.cfg adds it")
            && message.contains("iommu=pt must be absent"),
        "{status}: {message}"
    );

    // Without the absent word there, a present word the drop-in already gives is not added.
    let (mut h, d) = host(Bootloader::Grub);
    {
        let b = h.file.boot.as_mut().unwrap();
        b.grub_d.insert(
            "50-d3.cfg".into(),
            "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} vfio-pci.disable_idle_d3=1\"\n"
                .into(),
        );
    }
    run(&mut h, &d);
    let grub = h.file.boot.as_ref().unwrap().grub.clone().unwrap();
    assert!(
        grub.contains("GRUB_CMDLINE_LINUX_DEFAULT=\"quiet amd_iommu=on\"")
            && !grub.contains("disable_idle_d3"),
        "only iommu=pt removed; the drop-in's word is not written into the main file: {grub}"
    );
}

/// `host`, with `reboot: Auto` and its gate as a front door decided it.
fn auto(b: Bootloader, gate: RebootGate) -> (SimHost, Desired) {
    let (h, mut d) = host(b);
    d.partition.reboot = gate;
    (h, d)
}

fn reboots(h: &SimHost) -> u32 {
    h.file.boot.as_ref().unwrap().reboots_asked
}

#[test]
fn auto_stops_the_servers_then_the_container_reboots_once_and_verifies_after_the_boot() {
    let (mut h, d) = auto(
        Bootloader::ProxmoxBootTool,
        RebootGate::Now("inside spec.host.maintenanceWindow 02:00-04:00 UTC".into()),
    );
    let r = run(&mut h, &d);
    let kinds: Vec<&str> = r.applied.iter().map(|a| a.planned.step.kind()).collect();
    assert_eq!(
        kinds,
        [
            "writeLedger",
            "setKernelArgs",
            "refreshBootloader",
            "stopUnit",
            "stopContainer",
            "reboot"
        ],
        "written, refreshed, then the safe order: the server, its container, the reboot"
    );
    assert_eq!(reboots(&h), 1);
    let st = h.observe().unwrap();
    assert!(
        st.units.values().all(|u| !u.is_active()),
        "no server runs into the reboot"
    );
    assert_eq!(
        st.containers[&129].state,
        crate::host::model::RunState::Stopped
    );
    assert_eq!(
        st.boot.record.as_ref().unwrap().reboot_from.as_deref(),
        Some("boot-1")
    );
    // While the host goes down: work in progress, not a stall (a pool keeps no failure).
    let (s, reason, msg) = cond(&d, &r, "Reconciling");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "Rebooting"),
        "{msg}"
    );
    assert!(msg.contains("asked for the reboot"), "{msg}");
    assert_eq!(cond(&d, &r, "Stalled").0, "False");
    assert_eq!(cond(&d, &r, "RebootRequired").0, "True");
    // Another run in the same boot asks nothing again.
    let again = run(&mut h, &d);
    assert_eq!(again.writes, 0, "{:?}", again.applied);
    assert_eq!(reboots(&h), 1);
    // Its servers wait for the boot as work in progress too: a pool reads a Stalled server as a
    // failed member and pauses itself (found by e2e/tests/kube_reboot.rs).
    for report in [&r, &again] {
        let st = crate::status::compute(&d, report, &Default::default(), &crate::clock::now());
        let servers: Vec<_> = st.keys().filter(|k| **k != key(PART)).collect();
        assert!(!servers.is_empty());
        for k in servers {
            let c = |t: &str| st[k].condition(t).cloned().unwrap();
            assert_eq!(c("Stalled").status, "False", "{k}: {:?}", c("Stalled"));
            assert_eq!(c("Reconciling").status, "True", "{k}");
            assert_eq!(c("Ready").reason, "Rebooting", "{k}: {:?}", c("Ready"));
        }
    }

    // The boot: the kernel runs the entries' arguments; the agent verifies and goes on.
    h.reboot_host();
    let after = run(&mut h, &d);
    assert!(after.converged(), "{:?}", after.stop);
    let (s, reason, _) = cond(&d, &after, "RebootRequired");
    assert_eq!((s.as_str(), reason.as_str()), ("False", "KernelArgsBooted"));
    assert_eq!(cond(&d, &after, "Ready").0, "True");
    assert_eq!(drivers(&mut h, &VM_GPUS), ["vfio-pci"; 4]);
    assert!(
        h.observe().unwrap().units.values().any(|u| u.is_active()),
        "the server runs again"
    );
    assert_eq!(reboots(&h), 1, "one reboot for one change");
    assert_eq!(run(&mut h, &d).writes, 0);
}

#[test]
fn auto_reboot_plan_is_a_disruption_a_pool_member_needs_a_slot_for() {
    let (mut h, d) = auto(
        Bootloader::ProxmoxBootTool,
        RebootGate::Now("holding a disruption slot of pool fleet".into()),
    );
    // Written and refreshed (with Manual: no stop, no reboot), then Auto looks.
    let mut manual = d.clone();
    manual.partition.reboot = RebootGate::Manual;
    run(&mut h, &manual);
    let st = h.observe().unwrap();
    let p = crate::plan::plan(&d, &st);
    let kinds: Vec<&str> = p.steps.iter().map(|s| s.step.kind()).collect();
    assert_eq!(kinds, ["stopUnit", "stopContainer", "reboot"]);
    assert!(p.steps[2]
        .why
        .contains("holding a disruption slot of pool fleet"));
    let (step, why) = crate::plan::disruption::first_disruption(&p, &st).expect("disruptive");
    assert!(step.starts_with("stop unit"), "{step}: {why}");
    // Even with nothing running, the reboot alone is a disruption.
    assert!(crate::plan::disruption::disruption(&p.steps[2].step, &st)
        .unwrap()
        .contains("reboots the host"));
}

#[test]
fn auto_outside_its_window_waits_as_work_in_progress_and_says_why() {
    let (mut h, d) = auto(
        Bootloader::ProxmoxBootTool,
        RebootGate::Later(
            "outside spec.host.maintenanceWindow 02:00-04:00 UTC (now Fri 12:34 UTC)".into(),
        ),
    );
    let r = run(&mut h, &d);
    assert_eq!(reboots(&h), 0);
    assert!(
        !r.applied.iter().any(|a| a.planned.step.kind() == "reboot"),
        "{:?}",
        r.applied
    );
    let (s, reason, msg) = cond(&d, &r, "Reconciling");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "WaitingForMaintenanceWindow")
    );
    assert!(
        msg.contains("not now: outside spec.host.maintenanceWindow 02:00-04:00 UTC"),
        "{msg}"
    );
    assert_eq!(cond(&d, &r, "Stalled").0, "False");
    // A gate that can never open (a file agent in a pool, no window) is a stall a person fixes.
    let mut cannot = d.clone();
    cannot.partition.reboot = RebootGate::Cannot("set spec.host.maintenanceWindow".into());
    let r = run(&mut h, &cannot);
    let (s, reason, msg) = cond(&cannot, &r, "Stalled");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("True", "RebootRequired"),
        "{msg}"
    );
    assert!(
        msg.contains("reboot: Auto cannot reboot: set spec.host.maintenanceWindow"),
        "{msg}"
    );
}

#[test]
fn auto_after_a_boot_without_the_arguments_stalls_and_does_not_reboot_again() {
    let (mut h, d) = auto(
        Bootloader::ProxmoxBootTool,
        RebootGate::Now("inside spec.host.maintenanceWindow 02:00-04:00 UTC".into()),
    );
    run(&mut h, &d);
    assert_eq!(reboots(&h), 1);
    // The bootloader booted an old entry: a new boot, the same command line.
    h.reboot_host();
    h.file.boot.as_mut().unwrap().cmdline =
        "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_iommu=on iommu=pt".into();
    let r = run(&mut h, &d);
    assert_eq!(reboots(&h), 1, "no second reboot");
    let (st, why, msg) = cond(&d, &r, "Stalled");
    assert_eq!(
        (st.as_str(), why.as_str()),
        ("True", "KernelArgsNotBooted"),
        "{msg}"
    );
    assert!(msg.contains("does not reboot again"), "{msg}");
}

#[test]
fn auto_refreshes_a_config_a_person_wrote_before_it_reboots_into_it() {
    let (mut h, d) = auto(
        Bootloader::ProxmoxBootTool,
        RebootGate::Now("inside spec.host.maintenanceWindow 02:00-04:00 UTC".into()),
    );
    // A person wrote the words (no record of the agent's).
    h.file.boot.as_mut().unwrap().kernel_cmdline = Some(
        "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet amd_iommu=on vfio-pci.disable_idle_d3=1\n".into(),
    );
    let r = run(&mut h, &d);
    let kinds: Vec<&str> = r.applied.iter().map(|a| a.planned.step.kind()).collect();
    let refresh = kinds
        .iter()
        .position(|k| *k == "refreshBootloader")
        .expect("refreshed");
    let reboot = kinds.iter().position(|k| *k == "reboot").expect("rebooted");
    assert!(refresh < reboot, "{kinds:?}");
    assert!(
        !kinds.contains(&"setKernelArgs"),
        "the file already holds them: {kinds:?}"
    );
}
