//! A real control plane (etcd + kube-apiserver v1.20.2) started by `e2e/kube/control-plane.sh`
//! in a private RUN directory on free ports, stopped when dropped; kubectl runs against it as the
//! admin or as the non-admin agent user.
//!
//! Binaries come from `e2e/setup/kube-build.sh` (cache `$GPUPLANE_E2E_CACHE/kube`, default
//! `/var/cache/gpuplane-e2e/kube`); `KUBE_APISERVER` / `KUBECTL` / `ETCD` override them. A missing
//! binary is a test failure that names the setup script, never a skip.

use super::kubectl::Kubectl;
use crate::net::free_ports;
use crate::paths::{cache_dir, find_in_path, repo_root};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// `e2e/kube/control-plane.sh`.
pub fn control_plane_script() -> PathBuf {
    repo_root().join("e2e/kube/control-plane.sh")
}

/// `$GPUPLANE_E2E_CACHE/kube`, where `e2e/setup/kube-build.sh` puts its binaries.
fn kube_cache_dir() -> PathBuf {
    cache_dir().join("kube")
}

/// Paths of the real binaries. Panics, naming the setup script, if one is missing.
#[derive(Clone, Debug)]
pub struct KubeBinaries {
    pub kube_apiserver: PathBuf,
    pub kubectl: PathBuf,
    pub etcd: PathBuf,
}

impl KubeBinaries {
    /// The binaries from the environment or the cache; panics, naming the setup script, if one is
    /// missing.
    pub fn require() -> KubeBinaries {
        let from_env = |var: &str, default: PathBuf| {
            std::env::var_os(var).map(PathBuf::from).unwrap_or(default)
        };
        let etcd_default = find_in_path("etcd").unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
        let bins = KubeBinaries {
            kube_apiserver: from_env(
                "KUBE_APISERVER",
                kube_cache_dir().join("bin/kube-apiserver"),
            ),
            kubectl: from_env("KUBECTL", kube_cache_dir().join("bin/kubectl")),
            etcd: from_env("ETCD", etcd_default),
        };
        let missing = missing(&[&bins.kube_apiserver, &bins.kubectl, &bins.etcd]);
        assert!(
            missing.is_empty(),
            "missing Kubernetes test binaries: {}\n\
             Build them once (as root, a few minutes) with:\n    {}/e2e/setup/kube-build.sh\n\
             (set GPUPLANE_E2E_CACHE if you build them elsewhere than /var/cache/gpuplane-e2e)",
            missing.join(", "),
            repo_root().display()
        );
        bins
    }

    /// The CEL lane's binaries (`e2e/setup/kube-cel-build.sh`: Kubernetes' CRD server at the
    /// version Debian sid ships, sid's etcd and kubectl); panics, naming the script, if missing.
    pub fn require_crd_server() -> KubeBinaries {
        let dir = cache_dir().join("kube-cel/bin");
        let bins = KubeBinaries {
            kube_apiserver: dir.join("apiextensions-apiserver"),
            kubectl: dir.join("kubectl"),
            etcd: dir.join("etcd"),
        };
        let missing = missing(&[
            &bins.kube_apiserver,
            &bins.kubectl,
            &bins.etcd,
            &dir.join("discovery-front"),
        ]);
        assert!(
            missing.is_empty(),
            "missing the CEL lane's binaries: {}\n\
             Build them once (as root, about 7 minutes; needs a Debian mirror that carries sid) with:\n    {}/e2e/setup/kube-cel-build.sh",
            missing.join(", "),
            repo_root().display()
        );
        bins
    }
}

/// The paths of `files` that are not files, for the message that names the set-up script.
fn missing(files: &[&PathBuf]) -> Vec<String> {
    files
        .iter()
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect()
}

/// A running etcd + kube-apiserver in its own RUN directory. Stopped (RUN removed) on drop, also when
/// the test panics; on panic the tails of both logs are printed first.
pub struct ControlPlane {
    pub run: PathBuf,
    pub apiserver_port: u16,
    pub etcd_port: u16,
    pub etcd_peer_port: u16,
    pub bins: KubeBinaries,
    /// KEY=value pairs of `$RUN/env` (KUBE_APISERVER_URL, ADMIN_TOKEN, AGENT_TOKEN, ...).
    pub env: HashMap<String, String>,
    /// Kubernetes' CRD server (`CRD_SERVER=1` of control-plane.sh) instead of kube-apiserver.
    crd_server: Option<u16>,
    stopped: bool,
}

impl ControlPlane {
    /// Starts a control plane in a fresh temporary RUN directory on free ports
    /// ([`free_ports`]: reserved, outside the kernel's ephemeral range). Should a port still be
    /// taken by a program that binds fixed ports, it starts again on new ports (three tries).
    pub fn start(name: &str) -> ControlPlane {
        Self::start_with(name, KubeBinaries::require(), false)
    }

    /// The CEL lane: etcd and Kubernetes' CRD server at the newest version Debian sid ships
    /// (`e2e/setup/kube-cel-build.sh`), behind its discovery front; the admin's kubeconfig
    /// authenticates by client certificate. CRDs, CEL and server-side apply only: no
    /// namespaces, RBAC, Leases, Events or webhooks (the 1.20 plane keeps those).
    pub fn start_crd_server(name: &str) -> ControlPlane {
        Self::start_with(name, KubeBinaries::require_crd_server(), true)
    }

    fn start_with(name: &str, bins: KubeBinaries, crd_server: bool) -> ControlPlane {
        let t = Instant::now();
        let mut attempt = 0;
        let mut cp = loop {
            attempt += 1;
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .subsec_nanos();
            let run = std::env::temp_dir().join(format!(
                "gpuplane-e2e-{name}-{}-{nanos:x}",
                std::process::id()
            ));
            let ports = free_ports(4);
            let cp = ControlPlane {
                run,
                apiserver_port: ports[0],
                etcd_port: ports[1],
                etcd_peer_port: ports[2],
                bins: bins.clone(),
                env: HashMap::new(),
                crd_server: crd_server.then_some(ports[3]),
                stopped: false,
            };
            // The guard exists before `start`, so a half-started plane is cleaned up too.
            let out = cp.script("start");
            if out.status.success() {
                break cp;
            }
            let text = describe(&out);
            if attempt < 3 && text.contains("is in use") {
                eprintln!("[harness] a port was taken ({attempt}/3); starting again on new ports");
                drop(cp);
                continue;
            }
            panic!("control-plane.sh start failed:\n{text}");
        };
        let env_text = std::fs::read_to_string(cp.run.join("env")).expect("read $RUN/env");
        cp.env = env_text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        eprintln!(
            "[harness] control plane up in {:.1}s: {} (RUN={})",
            t.elapsed().as_secs_f64(),
            cp.url(),
            cp.run.display()
        );
        cp
    }

    /// Runs `control-plane.sh <command>` for this instance.
    pub fn script(&self, command: &str) -> Output {
        self.script_with_env(command, &[])
    }

    /// Runs `control-plane.sh <command>` with extra environment (e.g. `STOP_SIGNAL=KILL`).
    pub fn script_with_env(&self, command: &str, env: &[(&str, &str)]) -> Output {
        Command::new("bash")
            .arg(control_plane_script())
            .arg(command)
            .env("RUN", &self.run)
            .env("KUBE_APISERVER_PORT", self.apiserver_port.to_string())
            .env("ETCD_PORT", self.etcd_port.to_string())
            .env("ETCD_PEER_PORT", self.etcd_peer_port.to_string())
            .env("KUBE_APISERVER", &self.bins.kube_apiserver)
            .env("ETCD", &self.bins.etcd)
            .envs(self.crd_server.iter().flat_map(|port| {
                [
                    ("CRD_SERVER", "1".to_string()),
                    ("CRD_SERVER_PORT", port.to_string()),
                ]
            }))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("run control-plane.sh")
    }

    /// `restart-apiserver`, `restart-all`, `stop-apiserver`, ... ; panics on failure.
    pub fn control(&self, command: &str) {
        self.control_with_env(command, &[]);
    }

    /// [`ControlPlane::control`] with extra environment, e.g. `&[("STOP_SIGNAL", "KILL")]` to
    /// crash the components instead of stopping them.
    pub fn control_with_env(&self, command: &str, env: &[(&str, &str)]) {
        let t = Instant::now();
        let out = self.script_with_env(command, env);
        assert!(
            out.status.success(),
            "control-plane.sh {command} failed:\n{}",
            describe(&out)
        );
        eprintln!(
            "[harness] {command} done in {:.1}s",
            t.elapsed().as_secs_f64()
        );
    }

    /// `https://127.0.0.1:PORT` of kube-apiserver.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver_port)
    }
    /// `$RUN/kubeconfig`: the admin (system:masters).
    pub fn kubeconfig(&self) -> PathBuf {
        self.run.join("kubeconfig")
    }
    /// `$RUN/agent.kubeconfig`: the non-admin agent user.
    pub fn agent_kubeconfig(&self) -> PathBuf {
        self.run.join("agent.kubeconfig")
    }

    /// kubectl as the admin (system:masters).
    pub fn kubectl(&self, args: &[&str]) -> Kubectl {
        self.kubectl_as(&self.kubeconfig(), args)
    }
    /// kubectl as the non-admin agent user.
    pub fn kubectl_agent(&self, args: &[&str]) -> Kubectl {
        self.kubectl_as(&self.agent_kubeconfig(), args)
    }
    /// kubectl with `kubeconfig`.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Kubectl {
        // A private discovery cache: no stale discovery from an earlier server on this port.
        Kubectl::new(
            &self.bins.kubectl,
            kubeconfig,
            &self.run.join("kubectl-cache"),
            args,
        )
    }

    /// `restart-all` with SIGKILL. When tests run in parallel, a port freed by the kill can be taken
    /// for a moment by another test's client or server; then the components are started again
    /// until they come up (what an operator would do), failing after a few tries.
    pub fn restart_all_killed(&self) {
        let out = self.script_with_env("restart-all", &[("STOP_SIGNAL", "KILL")]);
        if out.status.success() {
            return;
        }
        eprintln!(
            "[harness] restart-all failed, retrying the starts:\n{}",
            describe(&out)
        );
        for _ in 0..10 {
            std::thread::sleep(Duration::from_secs(1));
            let e = self.script("start-etcd");
            let a = e.status.success().then(|| self.script("start-apiserver"));
            if a.as_ref().is_some_and(|a| a.status.success()) {
                return;
            }
        }
        panic!("the control plane did not come back after restart-all");
    }

    fn log_tail(&self, file: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.run.join(file)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// `control-plane.sh stop` (once): stops both components and removes RUN.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let out = self.script("stop");
        if !out.status.success() {
            eprintln!(
                "[harness] control-plane.sh stop failed:\n{}",
                describe(&out)
            );
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.stopped {
            eprintln!(
                "[harness] test failed; last lines of kube-apiserver.log:\n{}\n[harness] etcd.log:\n{}",
                self.log_tail("kube-apiserver.log", 30),
                self.log_tail("etcd.log", 10)
            );
        }
        self.stop();
    }
}

/// Exit status, stdout and stderr of a finished process, for a failure message.
pub fn describe(out: &Output) -> String {
    format!(
        "exit: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
