//! `reboot: Auto` in a pool, on a real kube-apiserver + etcd (issue 25, part 3, with issue 26):
//! two members of a pool with `maxUnavailable: 1`, each agent (`gpuplane run`) on its own copy of
//! the simulated reference host, and one change that adds a kernel argument to both partitions
//! with `spec.host.reboot: Auto` (as a GitOps sync does).
//!
//! The host's reboot is played by this test, as a bootloader would play it: the agent asks for
//! it (`systemctl reboot` on a real host; the simulated host counts the ask in its file), the
//! test kills the agent (the host goes down), waits past the agent's Lease, then boots the host
//! file (the kernel command line becomes what the refreshed boot entries hold, a new boot id,
//! every unit and container stopped) and starts the agent again. The real shutdown and boot are
//! proven on a real kernel in `vm_reboot.rs`; this test proves what the API server sees.
//!
//! Judged: never more than one slot held; each member reboots exactly once, holding the slot
//! when it asks; the member that asked reads `Reconciling=True Rebooting`; the slot stays with it
//! while its host is down (its Lease expired) and the other member waits
//! (`WaitingForDisruptionBudget` naming it); after the boot the agent verifies the arguments
//! (`RebootRequired=False KernelArgsBooted`), starts its server again and only then gives the slot
//! back; in the end both hosts run the argument, one refresh each, the pool `Ready`.
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test kube_reboot -- --nocapture

use gpuplane_e2e::agent::{Agent, AgentOpts};
use gpuplane_e2e::fleet::{
    agent_node, agent_server, node_host_file, partition, server, slot_holders,
};
use gpuplane_e2e::kube::{cond3, ready_for_generation, Cluster};
use gpuplane_e2e::sim_host::{edit_host, read_host};
use gpuplane_e2e::wait::wait_for;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const POOL: &str = "racks";
const ARG: &str = "vfio-pci.disable_idle_d3=1";
const MEMBERS: usize = 2;
/// The agents' Lease, in seconds: a host down for longer has an expired Lease.
const LEASE: u64 = 6;

fn host_file(c: &Cluster, i: usize) -> PathBuf {
    node_host_file(&c.cp, &agent_node(i))
}

fn start_agent(c: &Cluster, i: usize, boot: u32) -> Agent {
    let host = host_file(c, i);
    let o = AgentOpts {
        drift_interval: 30,
        lease_duration: LEASE,
    };
    let node = agent_node(i);
    Agent::start_on(&c.cp, &format!("{node}-boot{boot}"), &node, &host, o, &[])
}

/// How many times the agent asked host `i` for a reboot (`systemctl reboot` on a real host).
fn reboots_asked(c: &Cluster, i: usize) -> u64 {
    read_host(&host_file(c, i))["boot"]["rebootsAsked"]
        .as_u64()
        .unwrap_or(0)
}

/// The host goes down and comes up, as the simulated host's own `reboot_host` does it: the
/// kernel boots what the boot entries hold (written by the agent's bootloader refresh), with a
/// new boot id; nothing runs (no autostart: the agent starts what the spec wants). GPU bindings
/// are kept, as early binding does at boot.
fn boot_host(path: &Path) {
    edit_host(path, |h| {
        let boot = &mut h["boot"];
        let entries: Vec<String> = boot["entries"]
            .as_sequence()
            .expect("boot entries: the agent refreshed the bootloader before asking")
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        boot["cmdline"] = Yaml::String(entries.join(" "));
        let old = boot["bootId"].as_str().unwrap_or("boot").to_string();
        boot["bootId"] = Yaml::String(format!("{old}-next"));
        if let Some(units) = h["units"].as_mapping_mut() {
            for (_, u) in units.iter_mut() {
                if let Some(u) = u.as_mapping_mut() {
                    u.remove("startedAt");
                    u.remove("running");
                }
            }
        }
        if let Some(cts) = h["containers"].as_mapping_mut() {
            for (_, ct) in cts.iter_mut() {
                ct["state"] = Yaml::String("stopped".into());
            }
        }
    });
}

fn slots(c: &Cluster) -> Vec<String> {
    slot_holders(&c.json(&["get", "gpunodepool", POOL]))
}

/// (status, reason, message) of condition `t` of member `i`'s partition.
fn part_cond(c: &Cluster, i: usize, t: &str) -> (String, String, String) {
    cond3(&c.json(&["get", "gpupartition", &agent_node(i)]), t)
}

fn server_ready(c: &Cluster, i: usize) -> Result<(), String> {
    let s = c.json(&["get", "inferenceserver", "-n", "default", &agent_server(i)]);
    ready_for_generation(&s)
}

#[test]
fn a_pool_member_reboots_once_for_its_kernel_arguments_holding_its_slot_across_the_boot() {
    let t_all = Instant::now();
    let c = Cluster::start("reboot");
    let pool = serde_json::json!({
        "apiVersion": "gpuplane.dev/v1alpha1", "kind": "GpuNodePool",
        "metadata": {"name": POOL}, "spec": {"maxUnavailable": 1}
    });
    c.k_stdin(&["apply", "-f", "-"], &pool.to_string());
    let mut items = vec![];
    for i in 0..MEMBERS {
        let mut p = partition(&agent_node(i), true);
        p["metadata"]["labels"]["gpuplane.dev/pool"] = POOL.into();
        items.push(p);
        items.push(server(&agent_server(i), "default", &agent_node(i), true));
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    c.k_stdin(&["apply", "-f", "-"], &list.to_string());
    let mut agents: Vec<Agent> = (0..MEMBERS).map(|i| start_agent(&c, i, 1)).collect();
    wait_for("both members converged", Duration::from_secs(300), || {
        for i in 0..MEMBERS {
            server_ready(&c, i)?;
        }
        let p = c.json(&["get", "gpunodepool", POOL]);
        match cond3(&p, "Ready").0.as_str() {
            "True" => Ok(()),
            _ => Err(format!("pool {}", p["status"])),
        }
    });
    eprintln!(
        "[kube_reboot] both members converged {:.1}s after the start",
        t_all.elapsed().as_secs_f64()
    );
    for i in 0..MEMBERS {
        let cmdline = read_host(&host_file(&c, i))["boot"]["cmdline"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(!cmdline.contains(ARG), "{cmdline}");
    }

    // The change: one kernel argument more, the agent reboots.
    let t0 = Instant::now();
    let patch = format!(
        r#"{{"spec":{{"host":{{"kernelArgs":{{"present":["{ARG}"]}},"reboot":"Auto"}}}}}}"#
    );
    for i in 0..MEMBERS {
        c.k(&[
            "patch",
            "gpupartition",
            &agent_node(i),
            "--type",
            "merge",
            "-p",
            &patch,
        ]);
    }
    let mut order: Vec<usize> = vec![];
    let mut max_slots = 0;
    // Who was seen waiting while another member's host was down.
    let mut waited_for: Vec<String> = vec![];
    while order.len() < MEMBERS {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "no reboot asked in 300 s; rebooted so far: {order:?}; slots {:?}",
            slots(&c)
        );
        let held = slots(&c);
        max_slots = max_slots.max(held.len());
        assert!(held.len() <= 1, "more than maxUnavailable slots: {held:?}");
        for (i, agent) in agents.iter_mut().enumerate() {
            if order.contains(&i) {
                continue;
            }
            let asked = reboots_asked(&c, i);
            if asked == 0 {
                continue;
            }
            assert_eq!(asked, 1, "{} asked more than once", agent_node(i));
            let node = agent_node(i);
            let at = t0.elapsed().as_secs_f64();
            eprintln!("[kube_reboot] {node} asked for its reboot at {at:.1}s");
            // It asked holding the slot, and says what it does.
            assert_eq!(slots(&c), vec![node.clone()], "the slot at {node}'s reboot");
            let (s, r, m) = wait_for(
                "Reconciling=True Rebooting",
                Duration::from_secs(30),
                || {
                    let (s, r, m) = part_cond(&c, i, "Reconciling");
                    if r == "Rebooting" {
                        Ok((s, r, m))
                    } else {
                        Err(format!("{s} {r}: {m}"))
                    }
                },
            );
            eprintln!("[kube_reboot] {node} Reconciling={s} {r}: {m}");
            assert_eq!(s, "True");
            // The host goes down: the agent with it. Past its Lease, the slot is still its own
            // and the other member still waits.
            agent.kill();
            std::thread::sleep(Duration::from_secs(LEASE + 2));
            assert_eq!(
                slots(&c),
                vec![node.clone()],
                "the slot while {node} is down"
            );
            for j in (0..MEMBERS).filter(|j| !order.contains(j) && *j != i) {
                let (s, r, m) = part_cond(&c, j, "Reconciling");
                assert_eq!(
                    (s.as_str(), r.as_str()),
                    ("True", "WaitingForDisruptionBudget"),
                    "{m}"
                );
                assert!(m.contains(&node), "the waiter names the holder: {m}");
                eprintln!(
                    "[kube_reboot] while {node} is down, {} waits: {m}",
                    agent_node(j)
                );
                waited_for.push(agent_node(j));
            }
            boot_host(&host_file(&c, i));
            *agent = start_agent(&c, i, 2);
            // Whole again: the arguments verified, the server Ready, then the slot given back.
            wait_for(
                &format!("{node} whole after its boot"),
                Duration::from_secs(180),
                || {
                    let (s, r, m) = part_cond(&c, i, "RebootRequired");
                    if (s.as_str(), r.as_str()) != ("False", "KernelArgsBooted") {
                        return Err(format!("RebootRequired={s} {r}: {m}"));
                    }
                    server_ready(&c, i)?;
                    if slots(&c).contains(&node) {
                        return Err("the slot not given back yet".into());
                    }
                    Ok(())
                },
            );
            eprintln!(
                "[kube_reboot] {node} whole and its slot given back at {:.1}s",
                t0.elapsed().as_secs_f64()
            );
            order.push(i);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // Both rebooted, one at a time, once each, onto the argument.
    for i in 0..MEMBERS {
        let h = read_host(&host_file(&c, i));
        let boot = &h["boot"];
        assert_eq!(boot["rebootsAsked"].as_u64(), Some(1), "{boot:?}");
        assert!(boot["cmdline"].as_str().unwrap().contains(ARG), "{boot:?}");
        assert!(
            boot["kernelCmdline"].as_str().unwrap().contains(ARG),
            "{boot:?}"
        );
        assert_eq!(
            boot["refreshes"].as_sequence().map(|r| r.len()),
            Some(1),
            "{boot:?}"
        );
        let (s, r, m) = part_cond(&c, i, "Ready");
        assert_eq!((s.as_str(), r.as_str()), ("True", "Converged"), "{m}");
    }
    assert_eq!(max_slots, 1);
    assert_eq!(
        waited_for.len(),
        1,
        "the second member waited while the first was down"
    );
    let p = wait_for("the pool Ready", Duration::from_secs(60), || {
        let p = c.json(&["get", "gpunodepool", POOL]);
        match cond3(&p, "Ready").0.as_str() {
            "True" => Ok(p),
            _ => Err(format!("{}", p["status"])),
        }
    });
    assert_eq!(p["status"]["updatedMemberCount"], Json::from(MEMBERS));
    eprintln!(
        "[kube_reboot] both members rebooted one after the other in {:.1}s; done in {:.1}s",
        t0.elapsed().as_secs_f64(),
        t_all.elapsed().as_secs_f64()
    );
}
