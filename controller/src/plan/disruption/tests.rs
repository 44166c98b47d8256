use super::*;
use crate::host::model::UnitRef;
use crate::host::Host;
use crate::plan::plan;
use crate::testutil::{desired, manifests, twin};

/// The twin converged to the reference split, and the split.
fn converged() -> (crate::host::sim::SimHost, crate::desired::Desired) {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let mut door = crate::door::Door::new(&mut h);
    assert!(crate::converge::converge(&d, &mut door, &Default::default()).converged());
    (h, d)
}

#[test]
fn the_reference_split_from_the_old_host_is_disruptive_at_its_first_stop() {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let st = h.observe().unwrap();
    let p = plan(&d, &st);
    let (step, why) = first_disruption(&p, &st).expect("the split stops the old server");
    assert!(step.contains("stop"), "{step}");
    assert!(why.contains("sglang-qwen"), "{why}");
}

#[test]
fn a_changed_server_flag_needs_a_slot_and_a_converged_host_does_not() {
    let (mut h, mut d) = converged();
    let st = h.observe().unwrap();
    assert!(first_disruption(&plan(&d, &st), &st).is_none());
    d.servers[0].spec.mem_fraction_static = Some(0.8);
    let p = plan(&d, &st);
    assert!(!p.steps.is_empty());
    let (_, why) = first_disruption(&p, &st).expect("a restart of a running server");
    assert!(why.contains("server unit"), "{why}");
}

#[test]
fn stopping_what_is_already_stopped_or_a_free_gpu_is_no_disruption() {
    let (mut h, d) = converged();
    let mut st = h.observe().unwrap();
    let unit = d.servers[0].unit.clone();
    assert!(disruption(&Step::StopUnit { unit: unit.clone() }, &st).is_some());
    assert!(disruption(
        &Step::StartUnit {
            unit: unit.clone(),
            restart: true
        },
        &st
    )
    .is_some());
    assert!(disruption(
        &Step::StartUnit {
            unit: unit.clone(),
            restart: false
        },
        &st
    )
    .is_none());
    assert!(disruption(&Step::RemoveUnit { unit: unit.clone() }, &st).is_some());
    let missing = UnitRef {
        name: "gpuplane-none".into(),
        ..unit.clone()
    };
    assert!(disruption(&Step::StopUnit { unit: missing }, &st).is_none());
    assert!(disruption(&Step::StopContainer { vmid: 129 }, &st).is_some());
    if let Some(c) = st.containers.get_mut(&129) {
        c.state = RunState::Stopped;
    }
    assert!(disruption(&Step::StopContainer { vmid: 129 }, &st).is_none());
    // A GPU nobody holds, no container gives and no running VM maps: free to unbind.
    let free = st
        .pci_devices
        .iter()
        .find(|(a, dev)| {
            dev.driver.is_some() && dev.holders.is_empty() && gpu_in_use(&st, a).is_none()
        })
        .map(|(a, _)| a.clone());
    if let Some(a) = free {
        let step = Step::Unbind {
            address: a.clone(),
            driver: "nvidia".into(),
        };
        assert!(disruption(&step, &st).is_none(), "{a}");
    }
}

#[test]
fn a_gpu_a_container_or_a_process_uses_is_disruptive_to_unbind() {
    let (mut h, _) = converged();
    let st = h.observe().unwrap();
    let used: Vec<String> = st
        .pci_devices
        .iter()
        .filter(|(_, dev)| {
            dev.nvidia_minor.is_some_and(|m| {
                st.containers
                    .get(&129)
                    .is_some_and(|c| c.gpu_mounts.minors.contains(&m))
            })
        })
        .map(|(a, _)| a.clone())
        .collect();
    assert!(!used.is_empty(), "container 129 has GPUs");
    for a in used {
        let why = disruption(&Step::ReturnToHostDriver { address: a.clone() }, &st)
            .expect("in use by the container");
        assert!(
            why.contains("container 129") || why.contains("process"),
            "{why}"
        );
    }
    let mut held = st.clone();
    let (a, dev) = held.pci_devices.iter_mut().next().unwrap();
    let a = a.clone();
    dev.driver = Some("nvidia".into());
    dev.holders.clear();
    dev.holders.push(crate::host::model::Holder {
        pid: 42,
        command: "python3".into(),
        ..Default::default()
    });
    let step = Step::Unbind {
        address: a,
        driver: "nvidia".into(),
    };
    assert!(disruption(&step, &held).unwrap().contains("process 42"));
}
