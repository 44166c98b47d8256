//! The agent tests' cluster: a [`ControlPlane`] with gpuplane's CRDs and the agent's RBAC
//! (`e2e/kube/agent-rbac.yaml`, the Helm chart's rules) installed, and a private live copy of the
//! simulated reference host for the agent to act on. Stopped with the control plane on drop.

use super::control_plane::ControlPlane;
use super::objects::{cond3, ready_for_generation, ready_is};
use crate::kpro6::{NODE, SERVER};
use crate::paths::{repo_path, repo_root};
use crate::sim_host::read_host;
use crate::wait::wait_for;
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Namespace of the agent's Lease (and of its Role in agent-rbac.yaml).
pub const LEASE_NS: &str = "gpuplane-system";

/// What the agent user may and may not do under agent-rbac.yaml: (`kubectl auth can-i` args,
/// answer). It can do what the agent needs, and nothing beyond the lease namespace.
const AGENT_CAN_I: [(&[&str], &str); 11] = [
    (
        &["auth", "can-i", "watch", "gpupartitions.gpuplane.dev"],
        "yes",
    ),
    (
        &[
            "auth",
            "can-i",
            "patch",
            "inferenceservers.gpuplane.dev",
            "--subresource=status",
            "-n",
            "default",
        ],
        "yes",
    ),
    (
        &[
            "auth",
            "can-i",
            "update",
            "leases.coordination.k8s.io",
            "-n",
            LEASE_NS,
        ],
        "yes",
    ),
    (
        &[
            "auth",
            "can-i",
            "create",
            "leases.coordination.k8s.io",
            "-n",
            "default",
        ],
        "no",
    ),
    (
        &["auth", "can-i", "delete", "gpupartitions.gpuplane.dev"],
        "no",
    ),
    (&["auth", "can-i", "list", "secrets", "-A"], "no"),
    // A pool: read it, write its status (the slots), never its spec.
    (
        &["auth", "can-i", "get", "gpunodepools.gpuplane.dev"],
        "yes",
    ),
    // Watched, so a member waiting for a slot asks again the moment one is given back.
    (
        &["auth", "can-i", "watch", "gpunodepools.gpuplane.dev"],
        "yes",
    ),
    (
        &[
            "auth",
            "can-i",
            "update",
            "gpunodepools.gpuplane.dev",
            "--subresource=status",
        ],
        "yes",
    ),
    (
        &["auth", "can-i", "update", "gpunodepools.gpuplane.dev"],
        "no",
    ),
    (
        &["auth", "can-i", "delete", "gpunodepools.gpuplane.dev"],
        "no",
    ),
];

/// A control plane with the CRDs and the agent's RBAC installed, and a private host file.
pub struct Cluster {
    pub cp: ControlPlane,
    /// The live simulated host of this test.
    pub host: PathBuf,
}

impl Cluster {
    /// Starts a control plane, installs CRDs and RBAC (checking the agent user's permissions) and
    /// copies `examples/hosts/kpro6.yaml` into its RUN directory.
    pub fn start(name: &str) -> Cluster {
        let t = Instant::now();
        let cp = ControlPlane::start(name);
        let c = Cluster {
            host: cp.run.join("host-kpro6.yaml"),
            cp,
        };
        c.install_crds_and_rbac();
        std::fs::copy(repo_root().join("examples/hosts/kpro6.yaml"), &c.host)
            .expect("copy host file");
        eprintln!(
            "[kube_agent] {name}: control plane + CRDs + RBAC in {:.1}s",
            t.elapsed().as_secs_f64()
        );
        c
    }

    fn install_crds_and_rbac(&self) {
        // 1.20 predates CEL in CRDs (`x-kubernetes-validations`, 1.23): its kubectl refuses the
        // field client-side and its server drops it. The rules run on the 1.36 lane (kube_cel).
        self.k(&[
            "apply",
            "--validate=false",
            "-f",
            &repo_path("crds/gpuplane.dev_crds.yaml"),
        ]);
        self.k(&[
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd/gpupartitions.gpuplane.dev",
            "crd/inferenceservers.gpuplane.dev",
            "crd/gpunodepools.gpuplane.dev",
        ]);
        self.apply("e2e/kube/agent-rbac.yaml");
        for (args, want) in AGENT_CAN_I {
            let out = self.cp.kubectl_agent(args).run();
            assert_eq!(
                out.stdout.trim(),
                want,
                "agent user: kubectl {}: {}{}",
                args.join(" "),
                out.stdout,
                out.stderr
            );
        }
    }

    /// kubectl as admin; panics on failure; returns stdout.
    pub fn k(&self, args: &[&str]) -> String {
        self.cp.kubectl(args).ok()
    }

    /// `kubectl delete` of the reference server, not waiting for its finalizer.
    pub fn delete_server(&self) -> String {
        self.k(&[
            "delete",
            "inferenceserver",
            SERVER,
            "-n",
            "default",
            "--wait=false",
        ])
    }

    /// `kubectl apply -f REL` of a file or directory of the repository; returns stdout.
    pub fn apply(&self, rel: &str) -> String {
        self.k(&["apply", "-f", &repo_path(rel)])
    }

    /// [`Cluster::k`] with `input` on stdin.
    pub fn k_stdin(&self, args: &[&str], input: &str) -> String {
        self.cp.kubectl(args).stdin(input).ok()
    }

    /// Waits until the reference server's Ready is `status` with `reason` for its current
    /// generation; returns the server.
    pub fn wait_server_ready_is(&self, status: &str, reason: &str, timeout: Duration) -> Json {
        wait_for(&format!("server Ready={status} {reason}"), timeout, || {
            let s = self.server();
            match ready_is(&s, status, reason) {
                Ok(()) if s["status"]["observedGeneration"] == s["metadata"]["generation"] => Ok(s),
                r => Err(format!(
                    "{} (status {})",
                    r.err().unwrap_or_default(),
                    s["status"]
                )),
            }
        })
    }

    /// `kubectl ARGS -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> Json {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.k(&a)).expect("kubectl -o json")
    }

    /// Waits until `kubectl get ARGS` answers NotFound.
    pub fn wait_gone(&self, what: &str, get_args: &[&str], timeout: Duration) {
        wait_for(&format!("{what} gone"), timeout, || {
            let out = self.cp.kubectl(get_args).run();
            if !out.success && out.stderr.contains("NotFound") {
                Ok(())
            } else {
                Err(out.stdout + &out.stderr)
            }
        });
    }

    /// `kubectl delete OBJECT --timeout=60s`, then waits until `kubectl get OBJECT` answers
    /// NotFound (finalizers done); returns how long both took. `what` names it in a timeout.
    pub fn delete_and_wait_gone(&self, what: &str, object: &[&str], timeout: Duration) -> Duration {
        let t = Instant::now();
        let delete: Vec<&str> = ["delete"]
            .into_iter()
            .chain(object.iter().copied())
            .chain(["--timeout=60s"])
            .collect();
        self.k(&delete);
        let get: Vec<&str> = ["get"].into_iter().chain(object.iter().copied()).collect();
        self.wait_gone(what, &get, timeout);
        t.elapsed()
    }

    /// The GpuPartition of the node.
    pub fn partition(&self) -> Json {
        self.json(&["get", "gpupartition", NODE])
    }

    /// The InferenceServer of the examples.
    pub fn server(&self) -> Json {
        self.json(&["get", "inferenceserver", SERVER, "-n", "default"])
    }

    /// events.k8s.io/v1 events in `ns`.
    pub fn events(&self, ns: &str) -> Vec<Json> {
        self.json(&["get", "events.v1.events.k8s.io", "-n", ns])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// events.k8s.io/v1 events in every namespace.
    pub fn all_events(&self) -> Vec<Json> {
        self.json(&["get", "events.v1.events.k8s.io", "-A"])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Events with `reason` about `kind`/`name`, in any namespace (a partition's live in the
    /// agent's namespace, a server's in the server's).
    pub fn events_about(&self, reason: &str, kind: &str, name: &str) -> Vec<Json> {
        self.all_events()
            .into_iter()
            .filter(|e| {
                e["reason"] == reason
                    && e["regarding"]["kind"] == kind
                    && e["regarding"]["name"] == name
            })
            .collect()
    }

    /// Waits for an event with `reason` about `kind`/`name` and returns it.
    pub fn wait_event(&self, reason: &str, kind: &str, name: &str, timeout: Duration) -> Json {
        wait_for(
            &format!("a {reason} event about {kind}/{name}"),
            timeout,
            || {
                self.events_about(reason, kind, name)
                    .into_iter()
                    .next()
                    .ok_or_else(|| {
                        let all: Vec<String> = self
                            .all_events()
                            .iter()
                            .map(|e| {
                                format!(
                                    "{} {}/{}",
                                    e["reason"], e["regarding"]["kind"], e["regarding"]["name"]
                                )
                            })
                            .collect();
                        format!("events: {all:?}")
                    })
            },
        )
    }

    /// The live host file, parsed.
    pub fn host(&self) -> Yaml {
        read_host(&self.host)
    }

    /// The live host file's bytes (to check that nothing changed).
    pub fn host_bytes(&self) -> Vec<u8> {
        std::fs::read(&self.host).unwrap()
    }

    /// `kubectl apply -f examples/kpro6/` and the documented `kubectl wait`.
    pub fn apply_examples_and_wait(&self) -> Duration {
        let t = Instant::now();
        let out = self.apply("examples/kpro6/");
        eprintln!("$ kubectl apply -f examples/kpro6/\n{}", out.trim_end());
        let out = self.k(&[
            "wait",
            "--for=condition=Ready",
            &format!("gpupartition/{NODE}"),
            &format!("inferenceserver/{SERVER}"),
            "-n",
            "default",
            "--timeout=120s",
        ]);
        eprintln!("{}", out.trim_end());
        let took = t.elapsed();
        eprintln!(
            "[kube_agent] examples Ready after {:.1}s",
            took.as_secs_f64()
        );
        took
    }

    /// Waits until the partition and the server are Ready for their current generations.
    pub fn wait_converged(&self, timeout: Duration) {
        wait_for(
            "GpuPartition and InferenceServer Ready for their generation",
            timeout,
            || {
                ready_for_generation(&self.partition())
                    .map_err(|e| format!("GpuPartition: {e}"))?;
                ready_for_generation(&self.server()).map_err(|e| format!("InferenceServer: {e}"))
            },
        );
    }

    /// `kubectl patch` of the examples' InferenceServer with a JSON merge patch.
    pub fn patch_server(&self, patch: &str) {
        self.k(&[
            "patch",
            "inferenceserver",
            SERVER,
            "-n",
            "default",
            "--type",
            "merge",
            "-p",
            patch,
        ]);
    }

    /// [`Cluster::patch_server`], then [`Cluster::wait_converged`]; logs how long it took,
    /// after `what` (`[test] the change`).
    pub fn patch_server_converged(&self, what: &str, patch: &str, timeout: Duration) {
        let t = std::time::Instant::now();
        self.patch_server(patch);
        self.wait_converged(timeout);
        eprintln!(
            "{what}: converged {:.1} s after the patch",
            t.elapsed().as_secs_f64()
        );
    }

    /// Waits until the agent has bound `address` to `driver` in the host file; the last state
    /// names the server's Ready condition too.
    pub fn wait_driver(&self, what: &str, address: &str, driver: &str, timeout: Duration) {
        wait_for(what, timeout, || {
            let d = crate::sim_host::driver(&self.host(), address);
            if d == driver {
                Ok(())
            } else {
                Err(format!(
                    "{address} on {d}; server Ready {:?}",
                    cond3(&self.server(), "Ready")
                ))
            }
        });
    }

    /// The holder of the node's Lease ("" when none).
    pub fn lease_holder(&self) -> String {
        let l = self.json(&[
            "get",
            "lease",
            &format!("gpuplane-node-{NODE}"),
            "-n",
            LEASE_NS,
        ]);
        l["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

/// The items of a `kubectl get -o json` list, by `metadata.name`.
pub fn by_name(list: &serde_json::Value) -> std::collections::BTreeMap<String, serde_json::Value> {
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .into_iter()
        .map(|o| (o["metadata"]["name"].as_str().unwrap_or("").to_string(), o))
        .collect()
}
