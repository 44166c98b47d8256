//! Every command block of the README and `docs/` runs (issue 43): a change that breaks a
//! documented command fails the suite. How blocks are marked: `e2e/src/docs.rs`.
//!
//! - The twin's blocks: each page's in order, in one `bash -euo pipefail`, in a scratch directory
//!   holding copies of the clone's `examples/`, `charts/` and `crds/`, with the `gpuplane` this
//!   suite built first on `PATH` (the README's quick start for a host without Kubernetes runs
//!   here as written, its agent included).
//! - The `kube` blocks: against a real etcd + kube-apiserver 1.20 with the CRDs and the agent's
//!   RBAC installed and the agent running for node kpro6 on a simulated host. That agent is a
//!   process this test starts, **standing in for the chart's DaemonSet pod**: the test API
//!   server has no kubelet to run pods (`vm_kube_node` installs the chart on a real node), and
//!   no webhook is registered (the CRDs' schema still applies).
//! - `real-host:` / `not-run:` blocks are counted with their reasons, never run.
//! - A block marked `exit=N` (a documented refusal) must end with that status.
//!
//! Prints each page's output (the quick starts' included) and the counts:
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test docs -- --nocapture

use gpuplane_e2e::agent::{Agent, AgentOpts};
use gpuplane_e2e::docs::{self, Block, Where};
use gpuplane_e2e::kube::control_plane::KubeBinaries;
use gpuplane_e2e::kube::Cluster;
use gpuplane_e2e::paths::{gpuplane_bin, repo_root};
use std::path::Path;
use std::process::Command;

/// Every page's command blocks, by page; panics naming every block that is not marked right.
fn all_blocks() -> Vec<(String, Vec<Block>)> {
    let root = repo_root();
    let mut errors = vec![];
    let pages = docs::pages(&root)
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(root.join(&p)).unwrap();
            let name = p.display().to_string();
            let blocks = docs::blocks(&text).unwrap_or_else(|e| {
                errors.extend(e.lines().map(|l| format!("{name}: {l}")));
                vec![]
            });
            (name, blocks)
        })
        .collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    pages
}

/// A scratch directory as a reader's clone looks to the blocks.
fn scratch(name: &str) -> tempdir::Dir {
    let dir = tempdir::Dir::new(name);
    for sub in ["examples", "charts", "crds"] {
        let ok = Command::new("cp")
            .arg("-r")
            .arg(repo_root().join(sub))
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "copy {sub}");
    }
    dir
}

/// Runs `blocks` of `page` in `dir` with `env`; panics with the output when the script fails.
/// `path`: directories put first on `PATH` (beside the `gpuplane` this suite built).
fn run_page(page: &str, blocks: &[&Block], dir: &Path, env: &[(&str, String)], path: &[&Path]) {
    let bin_dir = gpuplane_bin().parent().unwrap().to_path_buf();
    let mut dirs: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
    dirs.push(bin_dir.display().to_string());
    dirs.push(std::env::var("PATH").unwrap_or_default());
    let path = dirs.join(":");
    let script = docs::script(page, blocks, &repo_root());
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir)
        // A reader's shell, not cargo test's: the variables cargo sets for a test (CARGO_PKG_*,
        // the library path, ...) would make the README's `cargo run` rebuild and swap the
        // binary other tests are running; what configures a build stays.
        .env_clear()
        .envs(std::env::vars_os().filter(|(k, _)| reader_keeps(&k.to_string_lossy())))
        .env("PATH", path)
        .env("HOME", dir)
        .env("NO_COLOR", "1")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("==== {page}\n{text}");
    assert!(
        out.status.success(),
        "{page}: a documented command failed ({}); the last `### page:line` above is the block:\n{text}",
        out.status
    );
}

/// Whether a variable of this process stays in the reader's shell: not those cargo sets for a
/// test.
fn reader_keeps(key: &str) -> bool {
    let build = ["CARGO_HOME", "CARGO_TARGET_DIR", "CARGO_INCREMENTAL"];
    let build_prefixes = [
        "CARGO_BUILD_",
        "CARGO_PROFILE_",
        "CARGO_TERM_",
        "CARGO_REGISTRIES_",
    ];
    if key.starts_with("CARGO") {
        return build.contains(&key) || build_prefixes.iter().any(|p| key.starts_with(p));
    }
    !matches!(key, "LD_LIBRARY_PATH" | "RUST_TEST_THREADS" | "OUT_DIR")
}

#[test]
fn every_command_block_is_marked_and_the_twin_ones_run() {
    let pages = all_blocks();
    let (mut twin, mut kube, mut not_run) = (0, 0, vec![]);
    for (page, blocks) in &pages {
        for b in blocks {
            match &b.at {
                Where::Twin | Where::InRepo => twin += 1,
                Where::Kube => kube += 1,
                Where::NotRun(why) => not_run.push(format!("{page}:{}: {why}", b.line)),
            }
        }
    }
    let total: usize = pages.iter().map(|(_, b)| b.len()).sum();
    eprintln!(
        "command blocks: {total} in {} pages; {twin} run on the twin, {kube} on the test API server, {} not run:",
        pages.len(),
        not_run.len()
    );
    for n in &not_run {
        eprintln!("  {n}");
    }
    assert!(twin > 0 && kube > 0, "the quick starts' blocks are gone");

    for (page, blocks) in &pages {
        let runs: Vec<&Block> = blocks
            .iter()
            .filter(|b| matches!(b.at, Where::Twin | Where::InRepo))
            .collect();
        if runs.is_empty() {
            continue;
        }
        let dir = scratch("gpuplane-docs");
        run_page(page, &runs, dir.path(), &[], &[]);
    }
}

#[test]
fn the_kube_blocks_run_on_the_test_api_server() {
    let pages = all_blocks();
    let kubectl = KubeBinaries::require().kubectl;
    let c = Cluster::start("docs");
    // Stands in for the chart's DaemonSet pod (no kubelet here), on the cluster's twin host.
    let _agent = Agent::start(&c, "docs-agent", AgentOpts::default());
    let kubectl_dir = kubectl.parent().unwrap();
    for (page, blocks) in &pages {
        let runs: Vec<&Block> = blocks.iter().filter(|b| b.at == Where::Kube).collect();
        if runs.is_empty() {
            continue;
        }
        let dir = scratch("gpuplane-docs-kube");
        let env = [("KUBECONFIG", c.cp.kubeconfig().display().to_string())];
        run_page(page, &runs, dir.path(), &env, &[kubectl_dir]);
    }
}

/// A temporary directory removed on drop.
mod tempdir {
    use std::path::{Path, PathBuf};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new(prefix: &str) -> Dir {
            let out = std::process::Command::new("mktemp")
                .args(["-d", "-t", &format!("{prefix}.XXXXXX")])
                .output()
                .unwrap();
            assert!(out.status.success());
            Dir(PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()))
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
