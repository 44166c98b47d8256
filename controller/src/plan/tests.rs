use super::*;
use crate::host::Host;
use crate::testutil::{desired, manifests, twin};

fn kinds(p: &Plan) -> Vec<&'static str> {
    p.steps.iter().map(|s| s.step.kind()).collect()
}

/// The twin converged to the reference split, and the split.
fn converged_twin() -> (crate::host::sim::SimHost, crate::desired::Desired) {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let mut door = crate::door::Door::new(&mut h);
    assert!(crate::converge::converge(&d, &mut door, &Default::default()).converged());
    (h, d)
}

fn index(p: &Plan, f: impl Fn(&Step) -> bool) -> Option<usize> {
    p.steps.iter().position(|s| f(&s.step))
}

#[test]
fn reference_split_is_ordered_safely() {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let st = h.observe().unwrap();
    let p = plan(&d, &st);
    assert!(p.blockers.is_empty(), "{:?}", p.blockers);
    let k = kinds(&p);
    let stop_unit = index(&p, |s| matches!(s, Step::StopUnit { .. })).unwrap();
    let stop_ct = index(&p, |s| matches!(s, Step::StopContainer { vmid: 129 })).unwrap();
    let first_unbind = index(&p, |s| matches!(s, Step::Unbind { .. })).unwrap();
    let load = index(
        &p,
        |s| matches!(s, Step::LoadDriver { driver } if driver == "vfio-pci"),
    )
    .unwrap();
    let lines = index(&p, |s| {
        matches!(s, Step::SetContainerGpus { vmid: 129, .. })
    })
    .unwrap();
    let start_ct = index(&p, |s| matches!(s, Step::StartContainer { vmid: 129 })).unwrap();
    assert!(stop_unit < stop_ct && stop_ct < first_unbind, "{k:?}");
    assert!(load < first_unbind, "{k:?}");
    assert!(first_unbind < start_ct && lines < start_ct, "{k:?}");
    // Each rebound GPU: override, then unbind, then probe.
    for a in [
        "0000:81:00.0",
        "0000:91:00.0",
        "0000:e1:00.0",
        "0000:f1:00.0",
    ] {
        let o = index(
            &p,
            |s| matches!(s, Step::SetDriverOverride { address, .. } if address == a),
        )
        .unwrap();
        let u = index(
            &p,
            |s| matches!(s, Step::Unbind { address, .. } if address == a),
        )
        .unwrap();
        let pr = index(&p, |s| matches!(s, Step::Probe { address } if address == a)).unwrap();
        assert!(o < u && u < pr);
    }
    // NUMA-0 GPUs are never unbound, only pinned.
    for a in [
        "0000:01:00.0",
        "0000:11:00.0",
        "0000:61:00.0",
        "0000:71:00.0",
    ] {
        assert!(index(
            &p,
            |s| matches!(s, Step::Unbind { address, .. } if address == a)
        )
        .is_none());
    }
    // On a translated IOMMU the plan probes P2P before it writes the unit, and stops there.
    assert_eq!(k.last(), Some(&"probeP2p"));
    assert!(p
        .continues_after
        .as_deref()
        .is_some_and(|c| c.contains("P2P probe")));
}

#[test]
fn container_lines_are_exactly_the_slice_minors() {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let p = plan(&d, &h.observe().unwrap());
    let minors = p
        .steps
        .iter()
        .find_map(|s| match &s.step {
            Step::SetContainerGpus { minors, .. } => Some(minors.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(minors, [0, 1, 2, 3].into_iter().collect());
}

#[test]
fn held_gpu_blocks_everything() {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    h.hold("0000:91:00.0", 777, "nvidia-persistenced");
    let p = plan(&d, &h.observe().unwrap());
    assert!(
        p.steps.is_empty(),
        "a blocked plan must not change anything: {:?}",
        kinds(&p)
    );
    assert_eq!(p.blockers.len(), 1);
    assert_eq!(p.blockers[0].reason, "GpuInUse");
    assert!(
        p.blockers[0]
            .message
            .contains("pid 777 (nvidia-persistenced)"),
        "{}",
        p.blockers[0].message
    );
    assert!(p.blockers[0].message.contains("0000:91:00.0"));
}

/// Issue 28: a tenant's process inside the consumer container (LXC 129) that holds a GPU the
/// split moves to the VM refuses the plan, naming the container and the process; the agent's own
/// server there (unit sglang-qwen, adopted) holding the same GPU does not (the container's stop
/// ends it, in the safe order).
#[test]
fn a_tenant_process_in_the_consumer_container_blocks_the_move() {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    h.hold("0000:91:00.0", 4321, "python3").container = Some(129);
    let st = h.observe().unwrap();
    let own: Vec<_> = st.pci_devices["0000:91:00.0"]
        .holders
        .iter()
        .filter(|x| x.unit.as_deref() == Some("sglang-qwen.service"))
        .collect();
    assert!(!own.is_empty(), "the running server holds it too: {st:?}");
    let p = plan(&d, &st);
    assert!(p.steps.is_empty(), "nothing is written: {:?}", kinds(&p));
    assert_eq!(p.blockers.len(), 1, "{:?}", p.blockers);
    let b = &p.blockers[0];
    assert_eq!(b.reason, "GpuInUse");
    assert!(
        b.message
            .contains("0000:91:00.0 must move from nvidia to vfio-pci")
            && b.message.contains("pid 4321 (python3) in container 129")
            && b.message.contains("stop it inside container 129 first"),
        "{}",
        b.message
    );

    // The same process in the server's own unit inside the container is the agent's to stop.
    h.file.holders.last_mut().unwrap().holder.unit = Some("sglang-qwen.service".into());
    let p = plan(&d, &h.observe().unwrap());
    assert!(p.blockers.is_empty(), "{:?}", p.blockers);
    assert!(kinds(&p).contains(&"stopContainer"), "{:?}", kinds(&p));
}

/// Least privilege (issue 28's finding): the reference container's broad `c 195:* rwm` grant
/// is narrowed to its slice's minors by the split; a broad grant written back later by hand is
/// narrowed again by one write, without stopping the running container.
#[test]
fn a_broad_nvidia_cgroup_grant_is_narrowed_without_a_restart() {
    let (mut h, d) = converged_twin();
    let conf = h.file.containers[&129].config.clone();
    assert!(!conf.contains("c 195:* rwm"), "{conf}");
    let st = h.observe().unwrap();
    for m in &st.containers[&129].gpu_mounts.minors {
        assert!(
            conf.contains(&format!("lxc.cgroup2.devices.allow: c 195:{m} rwm\n")),
            "{conf}"
        );
    }
    assert!(
        conf.contains("lxc.cgroup2.devices.allow: c 195:255 rwm\n"),
        "{conf}"
    );

    h.file.containers.get_mut(&129).unwrap().config =
        format!("{conf}lxc.cgroup2.devices.allow: c 195:* rwm\n");
    let p = plan(&d, &h.observe().unwrap());
    assert_eq!(kinds(&p), ["setContainerGpus"], "{p:?}");
    assert!(
        p.steps[0].why.contains("allows every GPU of the host"),
        "{}",
        p.steps[0].why
    );
    let mut door = crate::door::Door::new(&mut h);
    assert!(crate::converge::converge(&d, &mut door, &Default::default()).converged());
    assert_eq!(h.file.containers[&129].config, conf, "narrowed back");
    assert_eq!(
        h.file.containers[&129].state,
        RunState::Running,
        "never stopped"
    );
}

#[test]
fn running_vm_blocks_return_to_nvidia() {
    // Start from the converged host, then give the NUMA-1 slice back to nvidia while VM 200 runs.
    let mut h = twin();
    let m = manifests();
    let d = desired(&mut h, &m);
    let mut door = crate::door::Door::new(&mut h);
    let r = crate::converge::converge(&d, &mut door, &Default::default());
    assert!(r.converged());
    h.file.vms.get_mut(&200).unwrap().state = RunState::Running;
    let mut d2 = d.clone();
    d2.partition.slices[1].driver = gpuplane_crds::GpuDriver::Nvidia;
    d2.partition.slices[1].consumer = None;
    let p = plan(&d2, &h.observe().unwrap());
    assert!(p.steps.is_empty());
    assert!(
        p.blockers
            .iter()
            .all(|b| b.reason == "GpuInUse" && b.message.contains("VM 200")),
        "{:?}",
        p.blockers
    );
    assert_eq!(p.blockers.len(), 4);
}

#[test]
fn converged_host_plans_nothing() {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let mut door = crate::door::Door::new(&mut h);
    let r = crate::converge::converge(&d, &mut door, &Default::default());
    assert!(r.converged(), "{:?}", r.stop);
    assert!(plan(&d, &h.observe().unwrap()).is_empty());
}

#[test]
fn unit_change_restarts_once_and_unrelated_reconcile_does_not() {
    let (mut h, d) = converged_twin();
    let mut d2 = d.clone();
    d2.servers[0].spec.speculative.as_mut().unwrap().num_steps = Some(4);
    d2.servers[0]
        .spec
        .speculative
        .as_mut()
        .unwrap()
        .num_draft_tokens = Some(5);
    let p = plan(&d2, &h.observe().unwrap());
    assert_eq!(
        kinds(&p),
        vec!["writeUnit", "daemonReload", "startUnit", "waitReady"]
    );
    assert!(matches!(
        p.steps[2].step,
        Step::StartUnit { restart: true, .. }
    ));
    assert!(
        p.steps[0].why.contains("--speculative-num-steps 3 -> 4"),
        "{}",
        p.steps[0].why
    );
}

#[test]
fn crash_between_reload_and_restart_is_finished() {
    let (mut h, d) = converged_twin();
    let mut d2 = d.clone();
    d2.servers[0].spec.mem_fraction_static = Some(0.8);
    let p = plan(&d2, &h.observe().unwrap());
    // Apply write + reload only, as if the agent died before the restart.
    for s in p.steps.iter().take(2) {
        h.apply(&s.step).unwrap();
    }
    let p = plan(&d2, &h.observe().unwrap());
    assert_eq!(
        kinds(&p),
        vec!["startUnit", "waitReady"],
        "the stale process must be restarted"
    );
}

fn add_device(
    h: &mut crate::host::sim::SimHost,
    address: &str,
    class: &str,
    group: u32,
    driver: &str,
) {
    h.file.pci_devices.push(crate::host::sim::SimDevice {
        address: address.into(),
        vendor: "10de".into(),
        device: "22e8".into(),
        class: class.into(),
        subsystem: None,
        numa_node: 1,
        iommu_group: Some(group),
        driver: Some(driver.into()),
        driver_override: None,
        default_driver: Some(driver.into()),
        minor: None,
        identity: Default::default(),
        health: Default::default(),
    });
    h.file.pci_drivers.insert(driver.into());
}

#[test]
fn audio_function_moves_with_its_gpu_both_ways() {
    let mut h = twin();
    // 0000:81:00.0 is in group 14 in the twin; give it its HDMI audio function.
    add_device(&mut h, "0000:81:00.1", "040300", 14, "snd_hda_intel");
    let d = desired(&mut h, &manifests());
    let mut door = crate::door::Door::new(&mut h);
    assert!(crate::converge::converge(&d, &mut door, &Default::default()).converged());
    let st = h.observe().unwrap();
    let audio = &st.pci_devices["0000:81:00.1"];
    assert_eq!(
        (audio.driver.as_deref(), audio.driver_override.as_deref()),
        (Some("vfio-pci"), Some("vfio-pci"))
    );
    let paths: Vec<String> = st.pci_mappings["pro6000-vm"]
        .iter()
        .flat_map(|e| e.paths.clone())
        .collect();
    assert!(
        paths.contains(&"0000:81:00".to_string()),
        "whole slot passed through: {paths:?}"
    );
    // Give the NUMA-1 GPUs back to nvidia: the audio function returns to its own driver.
    let mut back = d.clone();
    back.partition.slices[1].driver = gpuplane_crds::GpuDriver::Nvidia;
    back.partition.slices[1].consumer = None;
    let mut door = crate::door::Door::new(&mut h);
    let r = crate::converge::converge(&back, &mut door, &Default::default());
    assert!(r.converged(), "{:?}", r.stop);
    let steps: Vec<String> = r
        .applied
        .iter()
        .map(|a| a.planned.step.to_string())
        .collect();
    assert!(
        steps
            .iter()
            .any(|s| s == "return 0000:81:00.1 to its host driver"),
        "{steps:#?}"
    );
    let st = h.observe().unwrap();
    let audio = &st.pci_devices["0000:81:00.1"];
    assert_eq!(
        (audio.driver.as_deref(), audio.driver_override.as_deref()),
        (Some("snd_hda_intel"), None),
        "{steps:#?}"
    );
    assert_eq!(
        st.pci_devices["0000:81:00.0"].driver.as_deref(),
        Some("nvidia")
    );
}

#[test]
fn a_group_shared_with_a_foreign_device_is_refused() {
    let mut h = twin();
    // A NIC in another slot shares group 15 with 0000:91:00.0 (no ACS between them).
    add_device(&mut h, "0000:92:00.0", "020000", 15, "mlx5_core");
    let d = desired(&mut h, &manifests());
    let p = plan(&d, &h.observe().unwrap());
    assert!(p.steps.is_empty());
    assert_eq!(p.blockers.len(), 1);
    assert_eq!(p.blockers[0].reason, "IommuGroupShared");
    assert!(
        p.blockers[0].message.contains("0000:92:00.0")
            && p.blockers[0].message.contains("mlx5_core"),
        "{}",
        p.blockers[0].message
    );
}

#[test]
fn rollback_auto_returns_to_the_last_ready_unit_and_does_not_retry_the_failed_one() {
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    d.servers[0].spec.rollback = gpuplane_crds::RollbackPolicy::Auto;
    let run = |h: &mut crate::host::sim::SimHost, d: &crate::desired::Desired| {
        let mut door = crate::door::Door::new(h);
        crate::converge::converge(d, &mut door, &Default::default())
    };
    let r = run(&mut h, &d);
    assert!(r.converged());
    assert_eq!(
        r.applied.last().unwrap().planned.step.kind(),
        "saveReadyUnit"
    );
    let good = h.observe().unwrap().units["lxc-129/sglang-qwen.service"]
        .file
        .clone()
        .unwrap();

    // A new spec whose server dies while loading.
    let mut bad = d.clone();
    bad.servers[0].spec.env.push(gpuplane_crds::EnvVar {
        name: "SIM_CRASH_AT".into(),
        value: "load".into(),
    });
    let r = run(&mut h, &bad);
    let kinds: Vec<&str> = r.applied.iter().map(|a| a.planned.step.kind()).collect();
    assert!(kinds.contains(&"markUnitFailed"), "{kinds:?}");
    assert!(r.converged(), "{:?}", r.stop);
    let st = h.observe().unwrap();
    let u = &st.units["lxc-129/sglang-qwen.service"];
    assert_eq!(
        u.file.as_deref(),
        Some(good.as_str()),
        "the last unit that reached Ready runs again"
    );
    assert!(u
        .server
        .as_ref()
        .unwrap()
        .models
        .contains(&"qwen3.5-122b".to_string()));
    let status = crate::status::compute(&bad, &r, &Default::default(), &crate::clock::now());
    let deg = status[&crate::testutil::key("InferenceServer/default/qwen35-122b")]
        .condition("Degraded")
        .unwrap();
    assert_eq!(deg.reason, "RolledBack", "{}", deg.message);
    assert!(
        r.applied.iter().any(|a| a
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("crashed"))),
        "the crash was seen before rolling back"
    );

    // The failed spec is not tried again; a new spec is.
    assert_eq!(run(&mut h, &bad).writes, 0);
    let mut fixed = bad.clone();
    fixed.servers[0].spec.env.pop();
    fixed.servers[0].spec.mem_fraction_static = Some(0.8);
    let r = run(&mut h, &fixed);
    assert!(r.converged());
    assert!(h.observe().unwrap().units["lxc-129/sglang-qwen.service"]
        .file
        .as_deref()
        .unwrap()
        .contains("--mem-fraction-static 0.8"));
}

/// Drift that makes the running server crash (a GPU rebound behind the agent's back and a device
/// line removed) is corrected: the server's crash must not keep the partition steps from running.
#[test]
fn drift_that_crashes_the_server_is_corrected() {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    assert!(crate::converge::converge(
        &d,
        &mut crate::door::Door::new(&mut h),
        &Default::default()
    )
    .converged());
    h.file
        .pci_devices
        .iter_mut()
        .find(|x| x.address == "0000:81:00.0")
        .unwrap()
        .driver = Some("nvidia".into());
    let ct = h.file.containers.get_mut(&129).unwrap();
    ct.config = ct.config.replace(
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n",
        "",
    );
    // ... and the container restarted with that config (a running one keeps what it started with).
    ct.started_with = None;
    let st = h.observe().unwrap();
    assert_eq!(
        st.units["lxc-129/sglang-qwen.service"].active_state, "failed",
        "the drift crashed the server"
    );
    let r = crate::testutil::converged_run(&mut h, &d);
    assert!(r.converged(), "{:?}", r.stop);
    let st = h.observe().unwrap();
    assert_eq!(
        st.pci_devices["0000:81:00.0"].driver.as_deref(),
        Some("vfio-pci")
    );
    assert!(st.containers[&129].gpu_mounts.minors.contains(&0));
    assert!(plan(&d, &st).is_empty());
}

/// Finding 3: a unit file the agent did not write (no header) is never written over,
/// restarted or stopped unless the slice's admin adopted it; a deleted server's unit without
/// the header is never stopped or removed.
#[test]
fn a_unit_the_agent_did_not_write_is_never_touched() {
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    let st = h.observe().unwrap();
    // The twin's hand-written sglang-qwen is adopted by the reference slice.
    assert!(d.servers[0].adopt);
    assert!(plan(&d, &st).blockers.is_empty());
    // Not adopted: blocked, and no step names the unit.
    d.servers[0].adopt = false;
    let p = plan(&d, &st);
    assert!(
        p.blockers.iter().any(|b| b.reason == "UnitNotManaged"),
        "{:?}",
        p.blockers
    );
    let unit = d.servers[0].unit.clone();
    assert!(!p.steps.iter().any(|s| matches!(&s.step,
        Step::WriteUnit { unit: u, .. } | Step::StopUnit { unit: u } | Step::RemoveUnit { unit: u } if *u == unit)));
    // A deleted server's hand-written unit: left alone.
    let removed = Desired {
        servers: vec![],
        removed_units: vec![unit.clone()],
        ..d.clone()
    };
    let p = plan(&removed, &st);
    assert!(
        !p.steps.iter().any(|s| matches!(&s.step,
        Step::StopUnit { unit: u } | Step::RemoveUnit { unit: u } if *u == unit)),
        "{:?}",
        kinds(&p)
    );
}

/// Finding 8: env values (tokens) appeared in the step's why, and so in events and status.
#[test]
fn env_values_never_appear_in_a_plan() {
    let unit = |env: &[(&str, &str)]| {
        let key = env
            .iter()
            .find(|(k, _)| *k == "HF_TOKEN")
            .map_or("", |e| e.1);
        crate::systemd::unit::render(&crate::systemd::unit::UnitSpec {
            exec_start: vec![
                "/p".into(),
                "--tp-size".into(),
                "4".into(),
                "--api-key".into(),
                format!("sk-{key}"),
            ],
            environment: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        })
        .unwrap()
    };
    let old = unit(&[("HF_TOKEN", "hf_old"), ("CUDA_VISIBLE_DEVICES", "0")]);
    let new = unit(&[
        ("HF_TOKEN", "hf_secret123"),
        ("API_KEY", "k3y"),
        ("CUDA_VISIBLE_DEVICES", "0,1"),
    ]);
    let text = servers::describe_change(&old, &new);
    assert!(
        text.contains("env HF_TOKEN changed") && text.contains("added env API_KEY"),
        "{text}"
    );
    assert!(!text.contains("hf_") && !text.contains("k3y"), "{text}");
    // Nor a secret flag's value.
    assert!(text.contains("--api-key changed"), "{text}");
    // The agent's own variables keep their values: they say what changed on the host.
    assert!(text.contains("env CUDA_VISIBLE_DEVICES 0 -> 0,1"), "{text}");
}

/// The reference server with a smoke test (math, thinking, tools) and rollback: Auto, run on the
/// twin with the agent's reads watched.
fn smoke_story(
    edit: impl FnOnce(&mut crate::host::sim::SimHost, &mut crate::desired::Desired),
) -> (
    crate::converge::Report,
    crate::host::sim::SimHost,
    crate::desired::Desired,
) {
    use gpuplane_crds::{SmokeExpect, SmokeRequest, SmokeTestSpec, SmokeTool};
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    let req = |name: &str, prompt: &str, expect: SmokeExpect| SmokeRequest {
        name: name.into(),
        prompt: prompt.into(),
        tools: vec![],
        max_tokens: 512,
        expect,
    };
    let mut tools = req(
        "tools",
        "What is the weather in Paris?",
        SmokeExpect {
            tool_call: Some("get_weather".into()),
            ..Default::default()
        },
    );
    tools.tools = vec![SmokeTool {
        name: "get_weather".into(),
        description: "current weather of a city".into(),
        parameters: vec!["city".into()],
    }];
    d.servers[0].spec.rollback = gpuplane_crds::RollbackPolicy::Auto;
    d.servers[0].spec.smoke_test = Some(SmokeTestSpec {
        timeout_seconds: 60,
        requests: vec![
            req(
                "math",
                "What is 17 * 23?",
                SmokeExpect {
                    answer_contains: Some("17 * 23".into()),
                    ..Default::default()
                },
            ),
            req(
                "thinking",
                "Why is the sky blue?",
                SmokeExpect {
                    reasoning: Some(true),
                    ..Default::default()
                },
            ),
            tools,
        ],
    });
    edit(&mut h, &mut d);
    h.watch_units(&[d.servers[0].unit.clone()]);
    h.watch_preflight(&crate::desired::preflight::requests(&d));
    let mut door = crate::door::Door::new(&mut h);
    let r = crate::converge::converge(&d, &mut door, &Default::default());
    (r, h, d)
}

const QWEN: &str = "InferenceServer/default/qwen35-122b";

#[test]
fn a_passing_smoke_test_is_reported_and_makes_the_unit_the_one_to_go_back_to() {
    let (r, mut h, d) = smoke_story(|_, _| {});
    assert!(r.converged(), "{:?}", r.stop);
    let st = crate::status::compute(&d, &r, &Default::default(), &crate::clock::now());
    let c = st[&crate::testutil::key(QWEN)]
        .condition("SmokeTested")
        .unwrap();
    assert_eq!(
        (c.status.as_str(), c.message.as_str()),
        ("True", "3 chat requests answered as expected")
    );
    let u = first_unit(&mut h, &d);
    assert_eq!(
        u.last_ready, u.file,
        "saved only after the smoke test passed"
    );
    assert!(r
        .applied
        .iter()
        .any(|a| a.planned.why.contains("passed its smoke test")));
}

#[test]
fn a_failing_smoke_test_says_what_failed_and_the_unit_is_not_kept_as_good() {
    let (r, mut h, d) = smoke_story(|h, _| h.file.behaviour.smoke_no_tool_call = true);
    let st = crate::status::compute(&d, &r, &Default::default(), &crate::clock::now());
    let c = st[&crate::testutil::key(QWEN)]
        .condition("SmokeTested")
        .unwrap();
    assert_eq!(c.status, "False");
    assert!(
        c.message
            .contains("tools: no tool call, expected get_weather"),
        "{}",
        c.message
    );
    let u = first_unit(&mut h, &d);
    assert_eq!(u.last_ready, None);
}

#[test]
fn a_new_unit_that_fails_its_smoke_test_is_rolled_back_to_the_last_good_one() {
    let (r, mut h, d) = smoke_story(|_, _| {});
    assert!(r.converged());
    let good = h
        .observe()
        .unwrap()
        .unit(&d.servers[0].unit)
        .unwrap()
        .file
        .clone();
    // The new spec drops the tool-call parser: the server answers, but with no parsed tool call.
    let mut d2 = d.clone();
    d2.servers[0].spec.tool_call_parser = None;
    let r2 = {
        let mut door = crate::door::Door::new(&mut h);
        crate::converge::converge(&d2, &mut door, &Default::default())
    };
    let mark = r2
        .applied
        .iter()
        .find(|a| matches!(a.planned.step, Step::MarkUnitFailed { .. }))
        .expect("the failing unit is marked");
    assert!(
        mark.planned
            .why
            .contains("no tool call, expected get_weather"),
        "{}",
        mark.planned.why
    );
    let u = first_unit(&mut h, &d);
    assert_eq!(u.file, good, "the last good unit runs again");
    assert!(u.active_state == "active");
    let st = crate::status::compute(&d2, &r2, &Default::default(), &crate::clock::now());
    assert_eq!(
        st[&crate::testutil::key(QWEN)]
            .condition("SmokeTested")
            .unwrap()
            .status,
        "True",
        "the good unit passes"
    );
}

/// Issue 22: an admin's `adoptUnits` naming a unit that is not an SGLang server (pmxcfs's
/// `pve-cluster`, say) never has it written over or restarted: the server is blocked, naming
/// what the unit runs.
#[test]
fn an_adopted_unit_that_is_not_an_sglang_server_is_left_alone() {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let mut st = h.observe().unwrap();
    let unit = d.servers[0].unit.clone();
    let mut sglang = st.clone();
    sglang
        .units
        .get_mut(&unit.key())
        .expect("the twin's unit")
        .file = Some(
        "[Service]\nExecStart=/opt/venv/bin/python3 -m sglang.launch_server --model-path /m\n"
            .into(),
    );
    let not_blocked = |st: &HostState| {
        !plan(&d, st)
            .blockers
            .iter()
            .any(|b| b.reason == "UnitNotSGLang")
    };
    assert!(
        not_blocked(&sglang),
        "an adopted SGLang launch is not blocked"
    );
    let u = st.units.get_mut(&unit.key()).expect("the twin's unit");
    u.file = Some("[Unit]\nDescription=The Proxmox VE cluster filesystem\n[Service]\nExecStart=/usr/bin/pmxcfs --foreground\n".into());
    let p = plan(&d, &st);
    // The verdict is the text's own, though the planner remembers its verdicts: judged again
    // when the file changes back.
    assert!(not_blocked(&sglang), "judged again after the file changed");
    let b = p
        .blockers
        .iter()
        .find(|b| b.reason == "UnitNotSGLang")
        .unwrap_or_else(|| panic!("{:?}", p.blockers));
    assert!(
        b.message.contains("/usr/bin/pmxcfs --foreground"),
        "{}",
        b.message
    );
    assert!(!p.steps.iter().any(|s| matches!(&s.step,
        Step::WriteUnit { unit: u, .. } | Step::StartUnit { unit: u, .. } | Step::RemoveUnit { unit: u } if *u == unit)));
}

/// Issue 22: when preflight cannot look before the first write (the server's container is
/// stopped), the plan says so up front instead of claiming later that nothing was changed.
#[test]
fn a_preflight_that_cannot_look_before_the_teardown_is_said_up_front() {
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let running = h.observe().unwrap();
    h.apply(&Step::StopContainer { vmid: 129 }).unwrap();
    let st = h.observe().unwrap();
    assert!(
        st.preflight.is_empty(),
        "the stopped container's files are not read"
    );
    let p = plan(&d, &st);
    assert!(
        p.notes
            .iter()
            .any(|n| n.reason == "PreflightNotChecked"
                && n.message.contains("before the first write")),
        "{:?}",
        p.notes
    );
    // With the facts at hand, no such note.
    assert!(!plan(&d, &running)
        .notes
        .iter()
        .any(|n| n.reason == "PreflightNotChecked"));
}

/// The reference server renamed to `gpuplane-sglang-qwen` (as the refusal of a non-adopted name
/// advises).
fn renamed(d: &crate::desired::Desired) -> crate::desired::Desired {
    let mut d2 = d.clone();
    d2.servers[0].unit.name = "gpuplane-sglang-qwen.service".into();
    d2.servers[0].spec.unit.name = "gpuplane-sglang-qwen".into();
    d2
}

/// Issue 22: renaming a converged server's unit wrote and started the new unit beside the old
/// one: same GPUs, same port, `Ready=True`. The old unit is the agent's own (its header, the
/// server's id in its description): it is stopped and removed before the new one starts.
#[test]
fn a_renamed_unit_replaces_the_old_one_instead_of_starting_beside_it() {
    let (mut h, d) = converged_twin();
    let d2 = renamed(&d);
    let p = plan(&d2, &h.observe().unwrap());
    assert!(p.blockers.is_empty(), "{:?}", p.blockers);
    let old = &d.servers[0].unit;
    // One step removes it (stopped first: once stopped it would be out of sight), then the new
    // unit is written and started.
    let remove = index(
        &p,
        |s| matches!(s, Step::RemoveUnit { unit } if unit == old),
    )
    .unwrap();
    let start = index(&p, |s| matches!(s, Step::StartUnit { .. })).unwrap();
    assert!(remove < start, "{:?}", kinds(&p));
    assert!(p.steps[remove]
        .why
        .contains("older unit of InferenceServer default/qwen35-122b"));
    let r = crate::testutil::converged_run(&mut h, &d2);
    assert!(r.converged(), "{:?}", r.stop);
    let st = h.observe().unwrap();
    assert!(
        st.unit(old)
            .is_none_or(|u| u.file.is_none() && !u.is_active()),
        "{:?} {:?}",
        st.unit(old),
        r.applied
            .iter()
            .map(|a| a.planned.step.to_string())
            .collect::<Vec<_>>()
    );
    assert!(st.unit(&d2.servers[0].unit).is_some_and(|u| u.is_active()));
    assert!(plan(&d2, &st).is_empty(), "converged after the rename");
}

/// The old unit of a renamed server that holds no GPU (stopped, or failed) is still the
/// agent's file: left, it would start beside the new unit at the next boot. It is removed
/// before the new unit is written, and the host ends with one unit for the server.
#[test]
fn a_stopped_old_unit_of_a_renamed_server_is_removed_too() {
    use crate::host::Host;
    let (mut h, d) = converged_twin();
    let old = d.servers[0].unit.clone();
    h.apply(&Step::StopUnit { unit: old.clone() }).unwrap();
    let st = h.observe().unwrap();
    assert!(st
        .unit(&old)
        .is_some_and(|u| !u.is_active() && u.file.is_some()));
    assert!(
        st.pci_devices.values().all(|dev| dev
            .holders
            .iter()
            .all(|x| x.unit.as_deref() != Some(old.name.as_str()))),
        "the stopped unit holds no GPU"
    );
    let d2 = renamed(&d);
    let p = plan(&d2, &st);
    assert!(p.blockers.is_empty(), "{:?}", p.blockers);
    let remove = index(
        &p,
        |s| matches!(s, Step::RemoveUnit { unit } if *unit == old),
    )
    .unwrap_or_else(|| panic!("the old unit is removed: {:?}", kinds(&p)));
    let write = index(&p, |s| matches!(s, Step::WriteUnit { .. })).unwrap();
    assert!(remove < write, "{:?}", kinds(&p));
    let r = crate::testutil::converged_run(&mut h, &d2);
    assert!(r.converged(), "{:?}", r.stop);
    let st = h.observe().unwrap();
    assert!(st.unit(&old).is_none_or(|u| u.file.is_none()));
    let tagged = st
        .units
        .values()
        .filter_map(|u| u.file.as_deref())
        .filter(|f| crate::sglang::command::written_for(f, &d.servers[0].id))
        .count();
    assert_eq!(tagged, 1, "one unit file for the server");
}

/// A server on the GPUs that is not this server's (a hand-written unit, another server's):
/// the new unit is refused, naming it, and nothing is written.
#[test]
fn a_stranger_on_the_gpus_blocks_the_server_and_is_named() {
    let (mut h, d) = converged_twin();
    // The old unit as a person wrote it: no header.
    let key = d.servers[0].unit.key();
    let file = h.file.units[&key].file.clone().unwrap();
    h.file.units.get_mut(&key).unwrap().file = Some(
        file.lines()
            .filter(|l| !l.starts_with(crate::systemd::unit::HEADER))
            .map(|l| format!("{l}\n"))
            .collect(),
    );
    let p = plan(&renamed(&d), &h.observe().unwrap());
    assert!(
        !p.steps.iter().any(|s| matches!(
            &s.step,
            Step::StartUnit { .. }
                | Step::WriteUnit { .. }
                | Step::StopUnit { .. }
                | Step::RemoveUnit { .. }
        )),
        "{:?}",
        kinds(&p)
    );
    let b = blocker_of(&p, "InferenceServer/default/qwen35-122b");
    assert_eq!(b.reason, "GpuInUse");
    assert!(
        b.message.contains("unit sglang-qwen.service in container 129 (pid 10000, 10001, 10002, 10003) holds 0000:01:00.0"),
        "{}",
        b.message
    );
}

/// Non-server holders of every GPU (nvidia-persistenced) never block a server from starting.
#[test]
fn a_daemon_holding_every_gpu_does_not_block_a_server() {
    let mut h = twin();
    for g in [
        "0000:01:00.0",
        "0000:11:00.0",
        "0000:61:00.0",
        "0000:71:00.0",
    ] {
        h.hold(g, 4242, "nvidia-persiste").unit = Some("nvidia-persistenced.service".into());
    }
    let d = desired(&mut h, &manifests());
    let st = h.observe().unwrap();
    let p = plan(&d, &st);
    assert!(
        !p.blockers
            .iter()
            .any(|b| b.resource.kind() == "InferenceServer"),
        "{:?}",
        p.blockers
    );
}

/// Issue 22: a server never starts on a port another program holds where it runs. Its own
/// running unit listening there is no conflict.
#[test]
fn a_port_held_by_another_program_blocks_the_server() {
    let (mut h, d) = converged_twin();
    let st = h.observe().unwrap();
    assert!(
        st.listening["lxc-129"].contains(&30000),
        "the running server listens: {:?}",
        st.listening
    );
    assert!(plan(&d, &st).is_empty(), "its own port is no conflict");
    // The server's unit stopped, and something else on 30000 in the container.
    let mut st2 = st.clone();
    let key = d.servers[0].unit.key();
    st2.units.get_mut(&key).unwrap().active_state = "inactive".into();
    for dev in st2.pci_devices.values_mut() {
        dev.holders.clear();
    }
    let p = plan(&d, &st2);
    let b = blocker_of(&p, "InferenceServer/default/qwen35-122b");
    assert_eq!(b.reason, "PortInUse");
    assert!(
        b.message.contains("port 30000") && b.message.contains("container 129"),
        "{}",
        b.message
    );
    assert!(!p
        .steps
        .iter()
        .any(|s| matches!(s.step, Step::StartUnit { .. })));
    // Nothing listening: it starts.
    st2.listening.clear();
    let p = plan(&d, &st2);
    assert!(p.blockers.is_empty(), "{:?}", p.blockers);
    assert!(p
        .steps
        .iter()
        .any(|s| matches!(s.step, Step::StartUnit { .. })));
}

/// Issue 23: a slice that names no `servers.user` would run its servers as root; in a privileged
/// container (the reference CT 129: `unprivileged: 0`) that is the host's root, so the server is
/// blocked until the admin writes a user (`root` included, as the reference example does). An
/// unprivileged container's root is not the host's, and passes.
#[test]
fn root_in_a_privileged_container_needs_the_admin_to_write_it() {
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    assert_eq!(
        d.servers[0].runtime.user.as_deref(),
        Some("root"),
        "the reference example writes it"
    );
    let st = h.observe().unwrap();
    assert!(st.containers[&129].privileged, "CT 129 has unprivileged: 0");
    let reason = |p: &crate::plan::Plan| {
        p.blockers
            .iter()
            .find(|b| b.reason == "RootInPrivilegedContainer")
            .map(|b| b.message.clone())
    };
    assert_eq!(reason(&plan(&d, &st)), None);

    d.servers[0].runtime.user = None;
    let p = plan(&d, &st);
    let m = reason(&p).unwrap_or_else(|| panic!("{:?}", p.blockers));
    assert!(m.contains("container 129, which is privileged"), "{m}");
    assert!(m.contains("`user: root`"), "{m}");
    let unit = d.servers[0].unit.clone();
    assert!(!p.steps.iter().any(|s| matches!(&s.step,
        Step::WriteUnit { unit: u, .. } | Step::StartUnit { unit: u, .. } if *u == unit)));

    let mut unpriv = st.clone();
    unpriv.containers.get_mut(&129).unwrap().privileged = false;
    assert_eq!(reason(&plan(&d, &unpriv)), None);
}

/// Issue 23: a container's processes write the P2P probe's answer, so a verdict probed in one
/// container decides only for servers in that container: "all pairs copied correctly" from
/// container 129 must not turn P2P on for a server on the same GPUs on the host.
#[test]
fn a_p2p_verdict_counts_only_where_it_was_probed() {
    use crate::host::model::{Location, P2pProbe};
    use crate::p2p::{decide_p2p, P2p};
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let mut st = h.observe().unwrap();
    let s = d.servers[0].clone();
    assert_eq!(s.unit.location, Location::Container(129));
    let none = BTreeSet::new();
    assert!(
        matches!(decide_p2p(&s, &st, &none), P2p::Probe(_)),
        "no verdict yet"
    );
    let key = st.p2p_key(&s.gpus);
    let verdict = |location| P2pProbe {
        gpus: s.gpus.clone(),
        key: key.clone(),
        failing_pairs: vec![],
        location,
    };
    st.p2p_probes = vec![verdict(Some(Location::Container(129)))];
    assert_eq!(
        decide_p2p(&s, &st, &none),
        P2p::On,
        "its own container's verdict"
    );
    let mut on_host = s.clone();
    on_host.unit.location = Location::Host;
    assert!(matches!(decide_p2p(&on_host, &st, &none), P2p::Probe(_)));
    let mut elsewhere = s.clone();
    elsewhere.unit.location = Location::Container(130);
    assert!(matches!(decide_p2p(&elsewhere, &st, &none), P2p::Probe(_)));
    st.p2p_probes = vec![verdict(None)];
    assert!(
        matches!(decide_p2p(&s, &st, &none), P2p::Probe(_)),
        "an old cache entry without a place is probed again"
    );
}

/// The blocker of resource `res` in `p`; panics with the plan when there is none.
fn blocker_of<'p>(p: &'p Plan, res: &str) -> &'p crate::plan::Blocker {
    p.blockers
        .iter()
        .find(|b| b.resource == res)
        .unwrap_or_else(|| panic!("{res} is not blocked: {p:#?}"))
}

/// The unit of `d`'s first server as `h` shows it now.
fn first_unit(h: &mut crate::host::sim::SimHost, d: &Desired) -> crate::host::model::Unit {
    let st = h.observe().unwrap();
    st.unit(&d.servers[0].unit)
        .cloned()
        .expect("the unit exists")
}
