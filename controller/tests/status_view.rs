//! `gpuplane status` as a person runs it: against a status directory made here (a partition
//! stalled on a GPU that left the bus, a ready server) its default, `-o wide` and `-o yaml`
//! output is compared with the goldens in `tests/golden/status/` (`GPUPLANE_BLESS=1` rewrites
//! them; review the diff); its watch mode prints a transition; and against the status
//! directory a real standalone agent wrote on the simulated reference host, its GPU rows.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

mod common;
use common::repo;

/// Ages are counted to this instant (`--now`), so the output never depends on the clock.
const NOW: &str = "2026-12-03T15:00:00Z";

/// The reference partition after the GPU in slot 8 (0000:f1:00.0) fell off the bus: the agent
/// froze the confidential-vm slice and stalled on `GpuMissing`.
const STALLED_PARTITION: &str = include_str!("golden/status/input/stalled-partition.yaml");

/// The same partition once the change was acknowledged: Ready again, no longer stalled.
const ACKNOWLEDGED_PARTITION_CONDITIONS: &str =
    include_str!("golden/status/input/acknowledged-partition-conditions.yaml");

const SERVER: &str = include_str!("golden/status/input/server.yaml");

/// A status directory (`status/`) and the manifests (`m/`, the reference split) under `d`.
fn fixture(d: &Path) {
    std::fs::create_dir_all(d.join("status")).unwrap();
    std::fs::create_dir_all(d.join("m")).unwrap();
    std::fs::write(d.join("status/GpuPartition-kpro6.yaml"), STALLED_PARTITION).unwrap();
    std::fs::write(
        d.join("status/InferenceServer-default_qwen35-122b.yaml"),
        SERVER,
    )
    .unwrap();
    std::fs::copy(
        repo().join("examples/kpro6/partition.yaml"),
        d.join("m/partition.yaml"),
    )
    .unwrap();
}

fn status(d: &Path, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_gpuplane"))
        .arg("status")
        .arg("--status-dir")
        .arg(d.join("status"))
        .args(["--now", NOW])
        .args(args)
        .output()
        .expect("gpuplane runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.is_empty(), "nothing to warn about: {err}");
    String::from_utf8(o.stdout).unwrap()
}

/// The GPU rows of `gpuplane status` output (a line per GPU, its words single-spaced).
fn gpu_rows(out: &str) -> String {
    out.lines()
        .filter(|l| l.starts_with("0000:"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") + "\n")
        .collect()
}

/// `got` equals the golden file `name`; with GPUPLANE_BLESS=1 the golden is rewritten instead.
fn golden(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/status")
        .join(name);
    if std::env::var_os("GPUPLANE_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (GPUPLANE_BLESS=1 writes it)", path.display()));
    assert_eq!(got, want, "output differs from {}", path.display());
}

#[test]
fn default_output_shows_the_gpus_consumers_and_conditions_with_ages() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let out = status(dir.path(), &["-f", dir.path().join("m").to_str().unwrap()]);
    golden("default.txt", &out);
    // What a person must see, whatever the golden says: the missing GPU, its owner and
    // consumer, the stall with its reason and age; no colour in a pipe.
    let row = |addr: &str| {
        out.lines()
            .find(|l| l.starts_with(addr))
            .unwrap_or_else(|| panic!("no row {addr}:\n{out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("0000:f1:00.0"),
        [
            "0000:f1:00.0",
            "8",
            "1",
            "(missing)",
            "Lost",
            "confidential-vm",
            "vm",
            "200",
            "(pro6000-vm)",
            "-"
        ]
    );
    assert_eq!(
        row("0000:01:00.0"),
        [
            "0000:01:00.0",
            "1",
            "0",
            "nvidia",
            "Healthy",
            "inference",
            "lxc",
            "129",
            "-"
        ]
    );
    assert!(
        out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()
            == [
                "GpuPartition/kpro6",
                "Stalled",
                "True",
                "GpuMissing",
                "2m30s"
            ]),
        "{out}"
    );
    assert!(
        out.contains("GpuPartition/kpro6 (node kpro6, layout 0b1c2d3e4f50)"),
        "{out}"
    );
    assert!(!out.contains('\x1b'));
}

#[test]
fn without_the_manifests_the_consumer_is_a_dash() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let out = status(dir.path(), &[]);
    let row = out.lines().find(|l| l.starts_with("0000:81:00.0")).unwrap();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [
            "0000:81:00.0",
            "5",
            "1",
            "vfio-pci",
            "Suspect",
            "confidential-vm",
            "-",
            "-"
        ]
    );
    assert!(
        out.starts_with("GpuPartition/kpro6 (layout 0b1c2d3e4f50)\n"),
        "{out}"
    );
}

#[test]
fn wide_output_adds_path_uuid_serial_and_messages() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let out = status(
        dir.path(),
        &["-f", dir.path().join("m").to_str().unwrap(), "-o", "wide"],
    );
    golden("wide.txt", &out);
    assert!(out.lines().next().is_some());
    let header = out.lines().nth(1).unwrap();
    assert!(
        header
            .ends_with("PATH                   UUID                                       SERIAL          EVIDENCE"),
        "{header}"
    );
    assert!(
        out.contains(
            "pci0000:e0/03.1/00.0   GPU-6f2c1e07-5a3b-4c1d-9e8f-0a1b2c3d4e07   1654924066927"
        ),
        "{out}"
    );
    assert!(
        out.contains("acknowledge with gpuplane.dev/accept-layout=0b1c2d3e4f50"),
        "{out}"
    );
}

#[test]
fn yaml_output_is_the_status_documents() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let out = status(dir.path(), &["-o", "yaml"]);
    golden("status.yaml", &out);
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&out)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let want: Vec<serde_yaml::Value> = [STALLED_PARTITION, SERVER]
        .iter()
        .map(|t| serde_yaml::from_str(t).unwrap())
        .collect();
    assert_eq!(docs, want, "the documents as the agent wrote them");
}

#[test]
fn watch_prints_the_transition_and_only_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fixture(d);
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuplane"))
        .arg("status")
        .arg("--status-dir")
        .arg(d.join("status"))
        .args(["--now", NOW, "-w", "--interval", "1", "--count", "4"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    // The first frame ends with the server's last condition; then the partition recovers.
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&out).contains("InferenceServer/default/qwen35-122b   Stalled") {
        let n = stdout.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "ended before the first frame: {}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&buf[..n]);
    }
    let first_len = out.len();
    let acknowledged = STALLED_PARTITION.replace(
        &STALLED_PARTITION[..STALLED_PARTITION.find("gpus:").unwrap()],
        ACKNOWLEDGED_PARTITION_CONDITIONS,
    );
    let tmp = d.join("status/.GpuPartition-kpro6.yaml.tmp");
    std::fs::write(&tmp, acknowledged).unwrap();
    std::fs::rename(&tmp, d.join("status/GpuPartition-kpro6.yaml")).unwrap();
    stdout.read_to_end(&mut out).unwrap();
    assert!(child.wait().unwrap().success());
    let later = String::from_utf8_lossy(&out[first_len..]).into_owned();
    let rows: Vec<Vec<&str>> = later
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["RESOURCE", "TYPE", "STATUS", "REASON", "AGE"],
            vec!["GpuPartition/kpro6", "Ready", "True", "Converged", "10s"],
            vec!["GpuPartition/kpro6", "Stalled", "False", "Converged", "10s"],
        ],
        "only the transition, once:\n{later}"
    );
}

/// A real status directory: the standalone agent converges the reference split on the
/// simulated host (`--max-rounds` ends it once settled), then `gpuplane status` reads it.
#[test]
fn the_simulated_hosts_status_shows_its_eight_gpus() {
    let dir = common::reference_dir();
    let d = dir.path();
    let o = common::standalone_agent(d)
        .args(["--max-rounds", "40"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let o = Command::new(env!("CARGO_BIN_EXE_gpuplane"))
        .arg("status")
        .arg("--status-dir")
        .arg(d.join("status"))
        .arg("-f")
        .arg(d.join("m"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    // The GPU rows of the reference split, the same through the API server
    // (`e2e/tests/kube_status.rs` compares with this golden too).
    golden("reference-gpus.txt", &gpu_rows(&out));
    let gpus: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.starts_with("0000:"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        gpus.iter()
            .filter(|r| r[3] == "nvidia" && r[4] == "Healthy" && r[6] == "lxc")
            .count(),
        4,
        "{out}"
    );
    let ready = |res: &str| {
        out.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|r| r.len() >= 4 && r[0] == res && r[1] == "Ready")
            .map(|r| (r[2].to_string(), r[3].to_string()))
    };
    assert_eq!(
        ready("GpuPartition/kpro6"),
        Some(("True".into(), "Converged".into())),
        "{out}"
    );
    assert_eq!(
        ready("InferenceServer/default/qwen35-122b"),
        Some(("True".into(), "ServerReady".into())),
        "{out}"
    );
    println!("{out}");
}

/// A status file is untrusted text: escapes, line breaks, bidirectional overrides and a file
/// that is no YAML at all print as safe, bounded text and a warning, never a panic.
#[test]
fn hostile_status_files_print_safely() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("status")).unwrap();
    std::fs::write(
        d.join("status/GpuPartition-x.yaml"),
        "resource: \"GpuPartition/x\\e]0;owned\\a\\nforged\"\n\
         conditions:\n- type: Ready\n  status: \"False\"\n  reason: \"\\e[2J\\u202eBad\"\n  \
         message: \"m\\e[31m\"\n  lastTransitionTime: yesterday\n\
         gpus:\n- address: \"\\e[1A0000:01:00.0\"\n  numa: [1]\n  missing: true\n",
    )
    .unwrap();
    std::fs::write(d.join("status/InferenceServer-a_b.yaml"), "{{{{ not yaml").unwrap();
    for format in [&[][..], &["-o", "wide"], &["-o", "yaml"]] {
        let o = Command::new(env!("CARGO_BIN_EXE_gpuplane"))
            .arg("status")
            .arg("--status-dir")
            .arg(d.join("status"))
            .args(format)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8(o.stdout).unwrap();
        assert!(
            !out.contains('\x1b') && !out.contains('\x07'),
            "{format:?}: {out:?}"
        );
        assert!(!out.contains('\u{202e}'), "{format:?}: {out:?}");
        assert!(
            !out.lines().any(|l| l.starts_with("forged")),
            "{format:?}: {out}"
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("InferenceServer-a_b.yaml: not YAML"), "{err}");
        if format.is_empty() {
            assert!(
                out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["InferenceServer-a_b", "-", "Unknown", "Unreadable", "-"]),
                "{out}"
            );
        }
    }
}

/// Colour only on a terminal: under a pseudo-terminal (util-linux `script`) the statuses are
/// coloured, with `NO_COLOR` set they are not (in a pipe they never are: the tests above).
#[test]
fn colour_only_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to make a terminal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let cmd = format!(
        "{} status --status-dir {} --now {NOW}",
        env!("CARGO_BIN_EXE_gpuplane"),
        dir.path().join("status").display()
    );
    let run = |no_colour: bool| {
        let mut c = Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"]).env_remove("NO_COLOR");
        if no_colour {
            c.env("NO_COLOR", "1");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let tty = run(false);
    assert!(
        tty.contains("\x1b[31mTrue\x1b[0m"),
        "Stalled=True in red: {tty:?}"
    );
    assert!(tty.contains("\x1b[31m(missing)\x1b[0m"), "{tty:?}");
    assert!(
        tty.contains("\x1b[32mTrue\x1b[0m"),
        "the server's Ready=True in green"
    );
    assert!(!run(true).contains('\x1b'));
}
