//! Test-side handle on a real control plane (etcd + kube-apiserver v1.20.2) started by
//! `e2e/kube/control-plane.sh`, plus a `kubectl` runner.
//!
//! Include it from an integration test with
//! `#[path = "../kube/harness.rs"] mod kube_harness;` (std only, no extra crates).
//!
//! Binaries come from `e2e/setup/kube-build.sh` (cache `$GPUPLANE_E2E_CACHE/kube`, default
//! `/var/cache/gpuplane-e2e/kube`); `KUBE_APISERVER` / `KUBECTL` / `ETCD` override them. A missing
//! binary is a test failure that names the setup script, never a skip.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Root of the repository (the parent of the `e2e` crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e has a parent")
        .to_path_buf()
}

pub fn control_plane_script() -> PathBuf {
    repo_root().join("e2e/kube/control-plane.sh")
}

fn cache_dir() -> PathBuf {
    std::env::var_os("GPUPLANE_E2E_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/gpuplane-e2e"))
        .join("kube")
}

/// Paths of the real binaries. Panics, naming the setup script, if one is missing.
#[derive(Clone, Debug)]
pub struct KubeBinaries {
    pub kube_apiserver: PathBuf,
    pub kubectl: PathBuf,
    pub etcd: PathBuf,
}

impl KubeBinaries {
    pub fn require() -> KubeBinaries {
        let from_env = |var: &str, default: PathBuf| {
            std::env::var_os(var).map(PathBuf::from).unwrap_or(default)
        };
        let etcd_default = std::env::var_os("PATH")
            .and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("etcd"))
                    .find(|f| f.is_file())
            })
            .unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
        let bins = KubeBinaries {
            kube_apiserver: from_env("KUBE_APISERVER", cache_dir().join("bin/kube-apiserver")),
            kubectl: from_env("KUBECTL", cache_dir().join("bin/kubectl")),
            etcd: from_env("ETCD", etcd_default),
        };
        let missing: Vec<String> = [&bins.kube_apiserver, &bins.kubectl, &bins.etcd]
            .iter()
            .filter(|p| !p.is_file())
            .map(|p| p.display().to_string())
            .collect();
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
}

/// Free loopback TCP ports, found by binding port 0 (all held until the end so they differ).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
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
    stopped: bool,
}

impl ControlPlane {
    /// Starts a control plane in a fresh temporary RUN directory on free ports.
    pub fn start(name: &str) -> ControlPlane {
        let bins = KubeBinaries::require();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let run = std::env::temp_dir().join(format!(
            "gpuplane-e2e-{name}-{}-{nanos:x}",
            std::process::id()
        ));
        let ports = free_ports(3);
        let mut cp = ControlPlane {
            run,
            apiserver_port: ports[0],
            etcd_port: ports[1],
            etcd_peer_port: ports[2],
            bins,
            env: HashMap::new(),
            stopped: false,
        };
        let t = Instant::now();
        // The guard exists before `start`, so a half-started plane is cleaned up too.
        let out = cp.script("start");
        assert!(
            out.status.success(),
            "control-plane.sh start failed:\n{}",
            describe(&out)
        );
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

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver_port)
    }
    pub fn kubeconfig(&self) -> PathBuf {
        self.run.join("kubeconfig")
    }
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
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Kubectl {
        let mut cmd = Command::new(&self.bins.kubectl);
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            // A private discovery cache: no stale discovery from an earlier server on this port.
            .arg("--cache-dir")
            .arg(self.run.join("kubectl-cache"))
            .args(args)
            .stdin(Stdio::null());
        Kubectl {
            cmd,
            args: args.iter().map(|s| s.to_string()).collect(),
            stdin: None,
        }
    }

    fn log_tail(&self, file: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.run.join(file)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

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

/// A kubectl invocation being built.
pub struct Kubectl {
    cmd: Command,
    args: Vec<String>,
    stdin: Option<String>,
}

/// Result of a kubectl run.
pub struct KubectlOutput {
    pub args: Vec<String>,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    /// Feeds `text` on stdin (for `-f -`).
    pub fn stdin(mut self, text: &str) -> Kubectl {
        self.stdin = Some(text.to_string());
        self
    }

    pub fn run(mut self) -> KubectlOutput {
        use std::io::Write;
        let out = if let Some(input) = self.stdin.take() {
            let mut child = self
                .cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn kubectl");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .expect("write kubectl stdin");
            child.wait_with_output().expect("wait for kubectl")
        } else {
            self.cmd.output().expect("run kubectl")
        };
        KubectlOutput {
            args: self.args,
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs and panics unless kubectl succeeded; returns stdout.
    pub fn ok(self) -> String {
        let out = self.run();
        assert!(
            out.success,
            "kubectl {} failed:\n{}{}",
            out.args.join(" "),
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// Runs and panics if kubectl succeeded; returns stderr.
    pub fn fails(self) -> String {
        let out = self.run();
        assert!(
            !out.success,
            "kubectl {} should have failed but printed:\n{}",
            out.args.join(" "),
            out.stdout
        );
        out.stderr
    }
}

pub fn describe(out: &Output) -> String {
    format!(
        "exit: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
