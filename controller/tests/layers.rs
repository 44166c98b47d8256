//! The layer rules of ARCHITECTURE.md, checked on the source: each top-level module of
//! `controller/src` uses (`crate::x`) only the modules its row there allows. A new dependency
//! that breaks a rule fails here, naming the file and the line; a new rule goes in both places.
//! Test code (`tests.rs`, `tests/`, modules declared under `#[cfg(test)]`) and comments are not
//! checked: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module → the modules it may use (its row's "may use" column).
const RULES: &[(&str, &[&str])] = &[
    // Leaves.
    ("systemd", &[]),
    ("proxmox", &[]),
    ("text", &[]),
    ("crashpoint", &[]),
    ("atomic_file", &["crashpoint"]),
    ("clock", &[]),
    ("resource_key", &[]),
    ("http", &[]),
    ("kubeapi", &[]),
    ("metrics", &["http"]),
    ("modelfiles", &["text"]),
    ("bootloader", &["text"]),
    ("sglang", &["systemd", "text"]),
    ("manifests", &["resource_key", "text"]),
    // The host and its model, steps.
    (
        "step",
        &["resource_key", "host", "proxmox", "text", "bootloader"],
    ),
    (
        "host",
        &[
            "bootloader",
            "resource_key",
            "step",
            "proxmox",
            "systemd",
            "sglang",
            "text",
            "modelfiles",
            "crashpoint",
            "atomic_file",
            "http",
        ],
    ),
    // Pure deciding.
    ("layout", &["host"]),
    (
        "desired",
        &[
            "bootloader",
            "resource_key",
            "layout",
            "host",
            "manifests",
            "modelfiles",
            "sglang",
            "systemd",
            "proxmox",
            "text",
        ],
    ),
    ("p2p", &["resource_key", "desired", "host"]),
    ("pool", &["text"]),
    (
        "discovery",
        &["resource_key", "desired", "host", "plan", "systemd", "text"],
    ),
    (
        "plan",
        &[
            "bootloader",
            "resource_key",
            "layout",
            "desired",
            "p2p",
            "step",
            "host",
            "sglang",
            "systemd",
            "proxmox",
            "text",
        ],
    ),
    // Doing.
    ("door", &["host", "step", "crashpoint"]),
    (
        "converge",
        &[
            "resource_key",
            "door",
            "plan",
            "desired",
            "host",
            "step",
            "sglang",
            "p2p",
            "text",
        ],
    ),
    (
        "status",
        &[
            "bootloader",
            "resource_key",
            "layout",
            "converge",
            "desired",
            "p2p",
            "host",
            "step",
            "plan",
            "text",
        ],
    ),
    // The front doors: never each other, except the CLI that starts them all.
    (
        "reconcile",
        &[
            "resource_key",
            "clock",
            "door",
            "converge",
            "desired",
            "host",
            "kubeapi",
            "metrics",
            "sglang",
            "status",
            "step",
            "systemd",
            "text",
            "plan",
            "p2p",
            "manifests",
            "discovery",
            "pool",
        ],
    ),
    (
        "webhook",
        &[
            "resource_key",
            "desired",
            "manifests",
            "http",
            "kubeapi",
            "text",
            "sglang",
        ],
    ),
    (
        "standalone",
        &[
            "resource_key",
            "clock",
            "door",
            "converge",
            "desired",
            "host",
            "manifests",
            "metrics",
            "status",
            "step",
            "text",
            "discovery",
            "atomic_file",
        ],
    ),
    // `gpuplane status`: reads what the agents published, never the host.
    ("status_view", &["text", "manifests", "kubeapi"]),
    (
        "cli",
        &[
            "bootloader",
            "status_view",
            "resource_key",
            "clock",
            "door",
            "converge",
            "crashpoint",
            "desired",
            "host",
            "manifests",
            "plan",
            "reconcile",
            "standalone",
            "status",
            "step",
            "systemd",
            "webhook",
            "sglang",
            "text",
            "p2p",
            "proxmox",
            "modelfiles",
            "http",
            "metrics",
            "kubeapi",
            "discovery",
            "atomic_file",
        ],
    ),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Names of modules declared right after `#[cfg(test)]` anywhere (`mod fuzz;`, `mod tests;`).
fn test_modules(files: &[PathBuf]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for w in lines.windows(2) {
            if w[0] == "#[cfg(test)]" {
                if let Some(m) = w[1].strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                    names.insert(m.to_string());
                }
            }
        }
    }
    names
}

/// The top-level modules `line` names through `crate::` (also `crate::{a, b::c}`).
fn uses(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let t: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !t.is_empty() {
                    out.push(t);
                }
            }
        } else {
            let t: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push(t);
        }
    }
    out
}

/// The modules of the pure middle (ARCHITECTURE.md, "Pure in the middle").
const PURE: &[&str] = &["desired", "p2p", "plan", "status", "pool"];

/// What the pure middle never names outside its tests: a clock, the file system, the
/// environment, processes, threads, an async runtime, Kubernetes.
const IMPURE: &[&str] = &[
    "Timestamp::now",
    "SystemTime::now",
    "Instant::now",
    "clock::now",
    "std::fs",
    "std::env",
    "std::process",
    "std::thread",
    "tokio::",
    "kube::",
];

/// The non-test source files of `controller/src`, with their path relative to it and their
/// top-level module.
fn sources() -> Vec<(PathBuf, String, String)> {
    let root = src();
    let mut files = Vec::new();
    rs_files(&root, &mut files);
    files.sort();
    let tests = test_modules(&files);
    let mut out = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let top = rel
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string();
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        if rel.contains("/tests/") || tests.contains(&stem) {
            continue;
        }
        out.push((f, rel, top));
    }
    out
}

/// The lines of `f` that are code (comments dropped), numbered from 1.
fn code_lines(f: &Path) -> Vec<(usize, String)> {
    std::fs::read_to_string(f)
        .unwrap()
        .lines()
        .enumerate()
        .filter_map(|(n, line)| {
            let code = line.trim_start();
            if code.starts_with("//") {
                return None;
            }
            Some((n + 1, code.split(" //").next().unwrap_or(code).to_string()))
        })
        .collect()
}

#[test]
fn the_pure_middle_reads_no_clock_file_environment_or_kubernetes() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for (f, rel, top) in sources() {
        if !PURE.contains(&top.as_str()) {
            continue;
        }
        checked += 1;
        for (n, code) in code_lines(&f) {
            for bad in IMPURE.iter().filter(|b| code.contains(*b)) {
                broken.push(format!("controller/src/{rel}:{n}: {top} names {bad}"));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} files of the pure middle checked"
    );
    assert!(
        broken.is_empty(),
        "the pure middle takes the time, files and environment as arguments (ARCHITECTURE.md):\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_module_uses_only_what_its_layer_allows() {
    let rules: BTreeMap<&str, BTreeSet<&str>> = RULES
        .iter()
        .map(|(m, a)| (*m, a.iter().copied().collect()))
        .collect();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (f, rel, top) in sources() {
        if ["main", "lib", "testutil"].contains(&top.as_str()) {
            continue;
        }
        let allowed = rules.get(top.as_str()).unwrap_or_else(|| {
            panic!("{top} (controller/src/{rel}) has no row in RULES (and ARCHITECTURE.md)")
        });
        checked += 1;
        for (n, code) in code_lines(&f) {
            // Upper-case names are items of the crate root (`EMBEDDED_HOST`), not modules.
            for u in uses(&code)
                .into_iter()
                .filter(|u| u.starts_with(|c: char| c.is_ascii_lowercase()))
            {
                if u != top && !allowed.contains(u.as_str()) {
                    broken.push(format!("controller/src/{rel}:{n}: {top} uses {u}"));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} files checked");
    assert!(
        broken.is_empty(),
        "layer rules broken (see ARCHITECTURE.md):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_rule_reader_sees_grouped_and_plain_uses() {
    assert_eq!(
        uses("use crate::{host::model, step::Step};"),
        ["host", "step"]
    );
    assert_eq!(uses("let m = crate::metrics::Metrics::new();"), ["metrics"]);
    assert!(uses("no use here").is_empty());
}
