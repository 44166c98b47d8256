//! Injected faults on the simulated host (issue 13, item 2), through the real `gpuplane converge`.
//!
//! The simulated host injects what a real one throws (`faults:` in its file, see
//! `controller/src/host/sim/fault.rs`): `EBUSY`/`EIO` on a sysfs write, an unbind that blocks
//! until the write deadline fires, `pct` or `systemctl` failing or hanging, a full disk or a
//! read-only `/etc/pve` on a config write, and a config changed by someone else between the
//! agent's read and its write. For each fault, on the reference split and on its reverse:
//!
//! - the run it hits stops (exit 1) with `Ready=False` on the partition or the server, and a
//!   message that carries the fault's own words; the host file is whole (it parses, foreign
//!   lines kept, no temporary file, a running container sees only nvidia GPUs);
//! - while the fault lasts (`times`), every run stops the same way;
//! - once it is gone, the next run converges (exit 0), the one after makes zero writes, and the
//!   host equals that of a run without the fault (clocks aside), one owner per GPU.
//!
//! A concurrent edit is not a failure: the run converges and the edit is kept.

mod common;

use common::*;
use gpuplane::host::sim::{FaultEffect, SimFault, SimHostFile};
use serde_json::Value;

/// (name, step kind, matching, times, error message) of the faults that fail a step.
type Case = (&'static str, &'static str, &'static str, u32, &'static str);

const SPLIT: &[Case] = &[
    (
        "EBUSY on unbind",
        "unbind",
        "0000:91:00.0",
        1,
        "write of /sys/bus/pci/drivers/nvidia/unbind: Device or resource busy (os error 16)",
    ),
    (
        "EIO on driver_override",
        "setDriverOverride",
        "0000:e1:00.0",
        1,
        "write of driver_override: Input/output error (os error 5)",
    ),
    (
        "EIO on drivers_probe",
        "probe",
        "0000:f1:00.0",
        1,
        "write of /sys/bus/pci/drivers_probe: Input/output error (os error 5)",
    ),
    (
        "unbind blocks past its deadline",
        "unbind",
        "0000:81:00.0",
        2,
        "write of unbind did not return within 10 s (deadline); the driver still holds the device",
    ),
    (
        "pct stop fails",
        "stopContainer",
        "129",
        1,
        "pct stop 129: lxc-stop: failed to stop container (exit 1)",
    ),
    (
        "pct start fails",
        "startContainer",
        "129",
        1,
        "pct start 129: startup for container '129' failed",
    ),
    (
        "pct push hangs",
        "writeUnit",
        "sglang-qwen",
        1,
        "pct push 129 did not finish within 60 s (deadline)",
    ),
    (
        "systemctl daemon-reload fails",
        "daemonReload",
        "129",
        1,
        "systemctl daemon-reload: Failed to reload daemon: Connection timed out",
    ),
    (
        "systemctl start fails",
        "startUnit",
        "sglang-qwen",
        1,
        "Job for sglang-qwen.service failed because the control process exited with error code",
    ),
    (
        "systemctl stop hangs",
        "stopUnit",
        "sglang-qwen",
        1,
        "systemctl stop sglang-qwen.service did not finish within 90 s (deadline)",
    ),
    (
        "full disk on the container config",
        "setContainerGpus",
        "129",
        1,
        "write of /etc/pve/lxc/129.conf.tmp.4242: No space left on device (os error 28)",
    ),
    (
        "read-only /etc/pve on pci.cfg",
        "setPciMapping",
        "pro6000-vm",
        3,
        "write of /etc/pve/mapping/pci.cfg.tmp.4242: Read-only file system (os error 30)",
    ),
    (
        "read-only /etc/pve on the mapping removal",
        "setPciMapping",
        "from PCI mapping pro6000",
        1,
        "write of /etc/pve/mapping/pci.cfg.tmp.4242: Read-only file system (os error 30)",
    ),
    (
        "modprobe fails",
        "loadDriver",
        "vfio-pci",
        1,
        "modprobe vfio-pci: FATAL: Module vfio-pci not found",
    ),
];

const REVERSE: &[Case] = &[
    (
        "EBUSY on unbind from vfio-pci",
        "unbind",
        "0000:e1:00.0",
        1,
        "write of /sys/bus/pci/drivers/vfio-pci/unbind: Device or resource busy (os error 16)",
    ),
    (
        "EIO on drivers_probe",
        "probe",
        "0000:81:00.0",
        1,
        "write of /sys/bus/pci/drivers_probe: Input/output error (os error 5)",
    ),
    (
        "pct stop fails",
        "stopContainer",
        "129",
        2,
        "pct stop 129: lxc-stop: failed to stop container (exit 1)",
    ),
    (
        "read-only /etc/pve on pci.cfg",
        "setPciMapping",
        "pro6000-vm",
        1,
        "write of /etc/pve/mapping/pci.cfg.tmp.4242: Read-only file system (os error 30)",
    ),
    (
        "full disk on the container config",
        "setContainerGpus",
        "129",
        1,
        "write of /etc/pve/lxc/129.conf.tmp.4242: No space left on device (os error 28)",
    ),
    (
        "systemctl start fails",
        "startUnit",
        "sglang-qwen",
        1,
        "Job for sglang-qwen.service failed because the control process exited with error code",
    ),
];

/// The `Ready` conditions of every resource in a converge's JSON report.
fn ready_conditions(out: &[u8]) -> Vec<Value> {
    let r: Value = serde_json::from_slice(out).expect("JSON report");
    r["status"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|s| {
            s["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")
                .cloned()
        })
        .collect()
}

/// Runs one failing fault on `start`; panics with `what` on any broken promise.
fn one_fault(manifests: &str, start: &SimHostFile, want: &str, case: &Case) {
    let (name, step, matching, times, message) = *case;
    let what = format!("{name} ({manifests})");
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host.yaml");
    let mut faulty = start.clone();
    faulty.faults.push(SimFault {
        step: step.into(),
        matching: Some(matching.into()),
        times,
        effect: FaultEffect::Error(message.into()),
    });
    std::fs::write(&host, serde_yaml::to_string(&faulty).unwrap()).unwrap();
    for run in 1..=times {
        let o = converge(manifests, &host, None);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(1), "{what}, run {run}: {out}");
        let said = ready_conditions(&o.stdout).into_iter().any(|c| {
            c["status"] == "False" && c["message"].as_str().unwrap_or("").contains(message)
        });
        assert!(
            said,
            "{what}, run {run}: no Ready=False names the fault: {out}"
        );
        check_host_file(&host, start, &format!("{what}, run {run}"));
    }
    writes_of_converged(&converge(manifests, &host, None), &what);
    let again = writes_of_converged(&converge(manifests, &host, None), &what);
    assert_eq!(again, 0, "{what}: the run after recovery wrote");
    let got = read_host(&host);
    check_ownership(&got, &what);
    assert!(got.faults.is_empty(), "{what}: the fault was not consumed");
    assert_eq!(timeless(got), want, "{what}: recovered elsewhere");
}

/// Converges `start` to `manifests` without faults: the host every recovery must reach.
fn baseline(manifests: &str, start: &SimHostFile) -> SimHostFile {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host.yaml");
    std::fs::write(&host, serde_yaml::to_string(start).unwrap()).unwrap();
    writes_of_converged(&converge(manifests, &host, None), manifests);
    read_host(&host)
}

#[test]
fn every_injected_fault_is_reported_and_the_next_run_recovers() {
    let start = reference_host_with_foreign_lines();
    let split = baseline("examples/kpro6", &start);
    for case in SPLIT {
        one_fault("examples/kpro6", &start, &timeless(split.clone()), case);
    }
    let back = baseline("examples/kpro6-all-lxc", &split);
    for case in REVERSE {
        one_fault(
            "examples/kpro6-all-lxc",
            &split,
            &timeless(back.clone()),
            case,
        );
    }
    let runs: u32 = SPLIT.iter().chain(REVERSE).map(|c| c.3 + 2).sum();
    println!(
        "faults: {} cases (split {}, reverse {}), {runs} runs, all passed",
        SPLIT.len() + REVERSE.len(),
        SPLIT.len(),
        REVERSE.len()
    );
}

#[test]
fn a_config_changed_between_read_and_write_keeps_the_other_edit() {
    let start = reference_host_with_foreign_lines();
    let edit = "# added by an admin during the converge\nmp1: /srv/data,mp=/srv/data\n";
    for (step, manifests, from) in [
        ("setContainerGpus", "examples/kpro6", start.clone()),
        ("startContainer", "examples/kpro6", start.clone()),
        (
            "setContainerGpus",
            "examples/kpro6-all-lxc",
            baseline("examples/kpro6", &start),
        ),
    ] {
        let what = format!("an edit before {step} ({manifests})");
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host.yaml");
        let mut h = from.clone();
        h.faults.push(SimFault {
            step: step.into(),
            matching: None,
            times: 1,
            effect: FaultEffect::AppendToContainerConfig {
                vmid: VMID,
                text: edit.into(),
            },
        });
        std::fs::write(&host, serde_yaml::to_string(&h).unwrap()).unwrap();
        writes_of_converged(&converge(manifests, &host, None), &what);
        let again = writes_of_converged(&converge(manifests, &host, None), &what);
        assert_eq!(again, 0, "{what}");
        let got = read_host(&host);
        let conf = &got.containers[&VMID].config;
        assert!(
            conf.ends_with(edit) || conf.contains(edit),
            "{what}: lost the edit:\n{conf}"
        );
        let mut want = foreign_lxc_lines(&from.containers[&VMID].config);
        want.extend(edit.lines().map(str::to_string));
        assert_eq!(foreign_lxc_lines(conf), want, "{what}");
        check_ownership(&got, &what);
    }
}
