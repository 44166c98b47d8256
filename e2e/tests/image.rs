//! The OCI image (`packaging/image/build.sh`), built offline from the gpuplane binary: the same
//! inputs give the same archive, skopeo reads it as an image with OCI labels and a non-shell
//! entrypoint, and the programs in it (the agent, nsenter, the wrappers' /bin/sh) run from its own root
//! filesystem (chroot), libraries and certificates included.
//!
//!     cargo test -p gpuplane-e2e --test image

use gpuplane_e2e::paths::{gpuplane_bin, repo_root};
use std::path::Path;
use std::process::Command;

/// Builds the image from the test binary into `out`; returns the script's output line.
fn build(out: &Path) -> String {
    let o = Command::new(repo_root().join("packaging/image/build.sh"))
        .arg("--binary")
        .arg(gpuplane_bin())
        .arg(out)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .expect("run packaging/image/build.sh");
    assert!(
        o.status.success(),
        "build.sh: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn run(cmd: &mut Command) -> String {
    gpuplane_e2e::paths::run_ok(cmd)
}

#[test]
fn the_image_is_reproducible_labelled_and_runs_from_its_own_root() {
    let dir = tempfile_dir();
    let (a, b) = (dir.join("a.tar"), dir.join("b.tar"));
    let line = build(&a);
    build(&b);
    assert_eq!(
        std::fs::read(&a).unwrap(),
        std::fs::read(&b).unwrap(),
        "two builds of the same inputs differ"
    );
    assert!(line.contains("docker.io/gpuplane/gpuplane:"), "{line}");

    let cfg: serde_json::Value = serde_json::from_str(&run(Command::new("skopeo")
        .args(["inspect", "--config"])
        .arg(format!("oci-archive:{}", a.display()))))
    .expect("image config JSON");
    assert_eq!(
        cfg["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/gpuplane"])
    );
    let labels = &cfg["config"]["Labels"];
    for key in [
        "title", "version", "revision", "created", "licenses", "source",
    ] {
        assert!(
            labels[format!("org.opencontainers.image.{key}")].is_string(),
            "label {key} missing: {labels}"
        );
    }
    assert_eq!(cfg["created"], "2023-11-14T22:13:20Z");

    // Unpack the one layer and run the programs from it.
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    run(Command::new("skopeo")
        .args(["copy", "--quiet"])
        .arg(format!("oci-archive:{}", a.display()))
        .arg(format!("dir:{}", dir.join("dir").display())));
    let layer = std::fs::read_dir(dir.join("dir"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| std::fs::metadata(p).unwrap().len() > 1_000_000)
        .expect("the layer blob");
    run(Command::new("tar")
        .arg("xzf")
        .arg(&layer)
        .arg("-C")
        .arg(&root));
    let version = run(Command::new("chroot")
        .arg(&root)
        .args(["/usr/bin/gpuplane", "--version"]));
    assert!(version.starts_with("gpuplane "), "{version}");
    let nsenter = run(Command::new("chroot")
        .arg(&root)
        .args(["/usr/bin/nsenter", "--version"]));
    assert!(nsenter.contains("util-linux"), "{nsenter}");
    // The chart's host-tool wrappers are `#!/bin/sh` scripts.
    let sh =
        run(Command::new("chroot")
            .arg(&root)
            .args(["/bin/sh", "-c", "echo wrapper-shell-ok"]));
    assert_eq!(sh.trim(), "wrapper-shell-ok");
    assert!(root.join("etc/ssl/certs/ca-certificates.crt").is_file());
    std::fs::remove_dir_all(&dir).ok();
}

/// A fresh directory under the system's temp dir.
fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("gpuplane-image-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
