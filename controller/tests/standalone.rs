//! `gpuplane run --manifests DIR`, the agent for hosts without Kubernetes, as a process on the
//! simulated reference host: it converges the manifests, writes each resource's status file,
//! keeps lastTransitionTime across rounds, and an invalid manifest changes nothing on the host
//! and says why in `_invalid.yaml`.

use std::path::Path;
use std::process::Command;

fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs the agent until settled (at most 40 rounds); returns stderr.
fn run(dir: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_gpuplane"))
        .args(["run", "--manifests"])
        .arg(dir.join("m"))
        .arg("--host")
        .arg(format!("sim-rw:{}", dir.join("host.yaml").display()))
        .arg("--status-dir")
        .arg(dir.join("status"))
        .args([
            "--sim-speed",
            "50",
            "--poll-interval",
            "1",
            "--max-rounds",
            "40",
        ])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .output()
        .expect("run gpuplane");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    err
}

fn status(dir: &Path, file: &str) -> serde_yaml::Value {
    let text = std::fs::read_to_string(dir.join("status").join(file))
        .unwrap_or_else(|e| panic!("status/{file}: {e}"));
    serde_yaml::from_str(&text).unwrap()
}

fn ready(v: &serde_yaml::Value) -> (String, String, String) {
    let c = v["conditions"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .expect("a Ready condition");
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("lastTransitionTime"))
}

#[test]
fn converges_from_files_writes_status_files_and_refuses_invalid_ones() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("m")).unwrap();
    for f in ["partition.yaml", "server.yaml"] {
        std::fs::copy(repo().join("examples/kpro6").join(f), d.join("m").join(f)).unwrap();
    }
    std::fs::copy(
        repo().join("examples/hosts/kpro6.yaml"),
        d.join("host.yaml"),
    )
    .unwrap();

    run(d);
    let (s, r, t0) = ready(&status(d, "GpuPartition-kpro6.yaml"));
    assert_eq!((s.as_str(), r.as_str()), ("True", "Converged"));
    let (s, r, _) = ready(&status(d, "InferenceServer-default_qwen35-122b.yaml"));
    assert_eq!((s.as_str(), r.as_str()), ("True", "ServerReady"));
    let host = std::fs::read(d.join("host.yaml")).unwrap();
    assert_ne!(
        host,
        std::fs::read(repo().join("examples/hosts/kpro6.yaml")).unwrap(),
        "the host file records the split"
    );

    // Converged: a second run changes nothing and keeps the transition times.
    run(d);
    assert_eq!(std::fs::read(d.join("host.yaml")).unwrap(), host);
    assert_eq!(ready(&status(d, "GpuPartition-kpro6.yaml")).2, t0);

    // An invalid manifest: nothing on the host changes; _invalid.yaml says what and where.
    let bad = std::fs::read_to_string(repo().join("examples/invalid/listen-host-with-port.yaml"))
        .unwrap();
    std::fs::remove_file(d.join("m/server.yaml")).unwrap();
    std::fs::write(d.join("m/partition.yaml"), bad).unwrap();
    run(d);
    assert_eq!(std::fs::read(d.join("host.yaml")).unwrap(), host);
    let inv = status(d, "_invalid.yaml");
    assert_eq!(inv["reason"], "InvalidSpec");
    assert!(
        inv["message"]
            .as_str()
            .unwrap()
            .contains("spec.listen.host"),
        "{inv:?}"
    );
    // Issue 22: the refused server's own status file says so; it kept `Ready=True` from the
    // last good pass before.
    let srv = status(d, "InferenceServer-default_qwen35-122b.yaml");
    let (s, r, _) = ready(&srv);
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "InvalidSpec"),
        "{srv:?}"
    );
    assert!(format!("{srv:?}").contains("spec.listen.host"), "{srv:?}");
}
