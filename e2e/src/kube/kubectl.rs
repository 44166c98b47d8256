//! kubectl runs: a builder ([`Kubectl`]) with optional stdin, its output, and a parser for
//! kubectl's tables.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

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
    /// `kubectl --kubeconfig KUBECONFIG --cache-dir CACHE_DIR ARGS...`, stdin closed.
    pub fn new(kubectl: &Path, kubeconfig: &Path, cache_dir: &Path, args: &[&str]) -> Kubectl {
        let mut cmd = Command::new(kubectl);
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(cache_dir)
            .args(args)
            .stdin(Stdio::null());
        Kubectl {
            cmd,
            args: args.iter().map(|s| s.to_string()).collect(),
            stdin: None,
        }
    }

    /// Feeds `text` on stdin (for `-f -`).
    pub fn stdin(mut self, text: &str) -> Kubectl {
        self.stdin = Some(text.to_string());
        self
    }

    /// Runs kubectl; its success, stdout and stderr.
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

/// A kubectl table as rows of (column -> value); values never contain spaces here.
pub fn table(text: &str) -> Vec<BTreeMap<String, String>> {
    // Columns start where their header starts (an empty cell leaves only spaces).
    let mut lines = text.lines();
    let header = lines.next().unwrap_or("");
    let mut starts: Vec<(usize, &str)> = vec![];
    let mut prev_space = true;
    for (i, ch) in header.char_indices() {
        if ch != ' ' && prev_space {
            let name = header[i..].split(' ').next().unwrap();
            starts.push((i, name));
        }
        prev_space = ch == ' ';
    }
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            starts
                .iter()
                .enumerate()
                .map(|(k, (at, name))| {
                    let end = starts
                        .get(k + 1)
                        .map(|x| x.0)
                        .unwrap_or(l.len())
                        .min(l.len());
                    let cell = l.get((*at).min(l.len())..end).unwrap_or("").trim();
                    (name.to_string(), cell.to_string())
                })
                .collect()
        })
        .collect()
}
