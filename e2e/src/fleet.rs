//! The fleet test's harness (`tests/kube_fleet.rs`): many nodes' objects on one real API
//! server, what one agent process costs (RSS, CPU from `/proc`), and the API server's own load
//! (its `/metrics`).
//!
//! Objects: every partition is the reference partition (`examples/kpro6/partition.yaml`) and
//! every server the reference server (`examples/kpro6/server.yaml`), renamed and relabelled
//! (`gpuplane.dev/node`), so an agent that lists them decodes realistic objects. The nodes
//! that run an agent (`fleet-NNN`) carry the label [`ROLE_LABEL`]`=agent`; the others
//! (`node-NNNN`) have no agent and are never reconciled.

use crate::kube::ControlPlane;
use crate::paths::repo_root;
use serde_json::Value as Json;
use std::time::Duration;

/// Marks the objects of the nodes that run an agent.
pub const ROLE_LABEL: &str = "e2e.gpuplane.dev/fleet";
/// Namespace of the servers of the nodes without an agent.
pub const OTHERS_NS: &str = "fleet";

/// The size of a fleet run, from the environment (see `tests/kube_fleet.rs`).
#[derive(Debug, Clone, Copy)]
pub struct FleetSize {
    /// Agents of the node-scoped row.
    pub agents: usize,
    /// Agents of the cluster-scoped ("before") row, on nodes of their own: every one of them
    /// lists the whole cluster, which costs the API server gigabytes (docs/BENCHMARKS.md).
    pub before_agents: usize,
    pub partitions: usize,
    pub servers: usize,
    /// Rounds of spec changes (one change per agent node each).
    pub rounds: usize,
    /// The at-rest window for CPU.
    pub rest: Duration,
    /// Seconds a fleet gets to converge.
    pub ready_timeout: u64,
}

impl FleetSize {
    /// CI bounds, or `GPUPLANE_FLEET_FULL=1` for the size; each figure can be set on
    /// its own (`GPUPLANE_FLEET_AGENTS`, `_PARTITIONS`, `_SERVERS`, `_ROUNDS`, `_REST_SECONDS`).
    pub fn from_env() -> FleetSize {
        let full = std::env::var("GPUPLANE_FLEET_FULL").is_ok_and(|v| v == "1");
        let get = |name: &str, ci: usize, full_v: usize| {
            std::env::var(format!("GPUPLANE_FLEET_{name}"))
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(if full { full_v } else { ci })
        };
        let s = FleetSize {
            agents: get("AGENTS", 20, 50),
            before_agents: get("BEFORE_AGENTS", 3, 5),
            partitions: get("PARTITIONS", 1000, 1000),
            servers: get("SERVERS", 10_000, 10_000),
            rounds: get("ROUNDS", 3, 5),
            rest: Duration::from_secs(get("REST_SECONDS", 10, 30) as u64),
            ready_timeout: get("READY_TIMEOUT", 240, 600) as u64,
        };
        assert!(s.partitions >= s.agent_nodes() && s.servers >= s.partitions);
        s
    }

    /// Nodes with an agent: the node-scoped row's, then the cluster-scoped row's.
    pub fn agent_nodes(&self) -> usize {
        self.agents + self.before_agents
    }
}

/// The name of agent node `i`.
pub fn agent_node(i: usize) -> String {
    format!("fleet-{i:03}")
}

/// The server of agent node `i` (namespace default).
pub fn agent_server(i: usize) -> String {
    format!("qwen-fleet-{i:03}")
}

/// `node`'s own simulated host file in the control plane's RUN directory (`host-NODE.yaml`):
/// a copy of the reference host made the first time, the host as the agents left it after.
pub fn node_host_file(cp: &ControlPlane, node: &str) -> std::path::PathBuf {
    let host = cp.run.join(format!("host-{node}.yaml"));
    if !host.exists() {
        std::fs::copy(repo_root().join("examples/hosts/kpro6.yaml"), &host).unwrap();
    }
    host
}

/// The members holding a disruption slot of a `GpuNodePool` (its `status.slots`), in order.
pub fn slot_holders(pool: &Json) -> Vec<String> {
    pool["status"]["slots"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s["member"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn example(rel: &str) -> Json {
    let text = std::fs::read_to_string(repo_root().join(rel)).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// The reference partition for `node`, labelled for it (and for the fleet role when `agent`).
pub fn partition(node: &str, agent: bool) -> Json {
    let mut p = example("examples/kpro6/partition.yaml");
    p["metadata"]["name"] = node.into();
    p["metadata"]["labels"] = labels(node, agent);
    p["spec"]["nodeName"] = node.into();
    p
}

/// The reference server `name` in `ns` on `node`'s partition.
pub fn server(name: &str, ns: &str, node: &str, agent: bool) -> Json {
    let mut s = example("examples/kpro6/server.yaml");
    s["metadata"]["name"] = name.into();
    s["metadata"]["namespace"] = ns.into();
    s["metadata"]["labels"] = labels(node, agent);
    s["spec"]["partitionRef"]["name"] = node.into();
    s
}

fn labels(node: &str, agent: bool) -> Json {
    let mut l = serde_json::json!({ "gpuplane.dev/node": node });
    if agent {
        l[ROLE_LABEL] = "agent".into();
    }
    l
}

/// Every object of the fleet: the agent nodes' partition and server each, then the other
/// nodes' partitions, then the remaining servers spread over them round-robin.
pub fn objects(size: &FleetSize) -> Vec<Json> {
    let mut v = vec![];
    for i in 0..size.agent_nodes() {
        v.push(partition(&agent_node(i), true));
        v.push(server(&agent_server(i), "default", &agent_node(i), true));
    }
    let others: Vec<String> = (0..size.partitions - size.agent_nodes())
        .map(|j| format!("node-{j:04}"))
        .collect();
    for n in &others {
        v.push(partition(n, false));
    }
    for k in 0..size.servers - size.agent_nodes() {
        let n = &others[k % others.len()];
        v.push(server(&format!("s-{k:05}"), OTHERS_NS, n, false));
    }
    v
}

/// Creates `objects` with `kubectl create` in lists of 500, 3 kubectl at a time.
pub fn create_all(cp: &ControlPlane, objects: &[Json]) {
    let chunks: Vec<&[Json]> = objects.chunks(500).collect();
    for group in chunks.chunks(3) {
        std::thread::scope(|s| {
            for chunk in group {
                s.spawn(move || {
                    let list =
                        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": chunk});
                    let out = cp
                        .kubectl(&["create", "-f", "-", "-o", "name"])
                        .stdin(&list.to_string())
                        .run();
                    assert!(out.success, "kubectl create: {}", out.stderr);
                });
            }
        });
    }
}

/// What `/proc` says of one process.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcStat {
    /// Resident set, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set, KiB (`VmHWM`).
    pub hwm_kib: u64,
    /// User + system CPU, clock ticks.
    pub cpu_ticks: u64,
}

/// `/proc/PID/status` and `/proc/PID/stat` of `pid`.
pub fn proc_stat(pid: u32) -> ProcStat {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) end with ')'; utime and stime are the
    // 14th and 15th fields, the 12th and 13th after it.
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    ProcStat {
        rss_kib: kib("VmRSS:"),
        hwm_kib: kib("VmHWM:"),
        cpu_ticks: f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0),
    }
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
pub const CLK_TCK: f64 = 100.0;

/// The API server's `/metrics` (as admin).
pub fn apiserver_metrics(cp: &ControlPlane) -> String {
    cp.kubectl(&["get", "--raw", "/metrics"]).ok()
}

/// Sum of the samples of `name` whose labels contain every one of `having` (`key="value"`).
pub fn sum_where(metrics: &str, name: &str, having: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
        .filter(|l| having.iter().all(|h| l.contains(h)))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// The `q` quantile (0..=1) of `xs` (nearest rank); NaN when empty.
pub fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&xs, 0.5), 50.0);
        assert_eq!(quantile(&xs, 0.99), 99.0);
        assert_eq!(quantile(&[3.0], 0.99), 3.0);
    }

    #[test]
    fn the_fleet_has_the_asked_counts_and_every_object_its_node_label() {
        let size = FleetSize {
            agents: 2,
            before_agents: 1,
            partitions: 10,
            servers: 25,
            rounds: 1,
            rest: Duration::from_secs(1),
            ready_timeout: 1,
        };
        let o = objects(&size);
        let count = |k: &str| o.iter().filter(|x| x["kind"] == k).count();
        assert_eq!(count("GpuPartition"), 10);
        assert_eq!(count("InferenceServer"), 25);
        for x in &o {
            let node = &x["metadata"]["labels"]["gpuplane.dev/node"];
            match x["kind"].as_str() {
                Some("GpuPartition") => assert_eq!(node, &x["spec"]["nodeName"]),
                _ => assert_eq!(node, &x["spec"]["partitionRef"]["name"]),
            }
        }
    }

    #[test]
    fn proc_stat_reads_this_process() {
        let s = proc_stat(std::process::id());
        assert!(s.rss_kib > 0 && s.hwm_kib >= s.rss_kib, "{s:?}");
    }
}
