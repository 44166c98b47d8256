//! The .deb for Proxmox hosts without Kubernetes (`packaging/deb/`, built by cargo-deb from
//! the metadata in `controller/Cargo.toml`): what it installs, `lintian` without errors, and a
//! `gpuplane.service` that `systemd-analyze verify` accepts, ordered after pve-cluster and before
//! pve-guests. Built from the test binary (`--profile dev --no-build`) to keep CI short; the
//! release package is `cargo deb -p gpuplane`.
//!
//!     cargo test -p gpuplane-e2e --test deb

use gpuplane_e2e::packaging::build_deb;
use std::process::Command;

fn run(cmd: &mut Command) -> (bool, String) {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

#[test]
fn the_deb_installs_the_agent_and_a_service_that_starts_before_guests() {
    let dir = std::env::temp_dir().join(format!("gpuplane-deb-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let deb = build_deb(&dir);

    let (ok, list) = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    assert!(ok, "{list}");
    println!("dpkg-deb -c:\n{list}");
    for path in [
        "./usr/bin/gpuplane",
        "./usr/lib/systemd/system/gpuplane.service",
        "./etc/default/gpuplane",
        "./etc/gpuplane/manifests/README",
        "./usr/share/doc/gpuplane/copyright",
    ] {
        assert!(list.contains(path), "{path} is not in the package:\n{list}");
    }
    let (ok, conffiles) = run(Command::new("dpkg-deb")
        .arg("-I")
        .arg(&deb)
        .arg("conffiles"));
    assert!(
        ok && conffiles.contains("/etc/default/gpuplane"),
        "conffiles: {conffiles}"
    );

    let (_, lint) = run(Command::new("lintian").arg(&deb));
    println!("lintian:\n{lint}");
    let errors: Vec<&str> = lint.lines().filter(|l| l.starts_with("E:")).collect();
    assert!(errors.is_empty(), "lintian errors: {errors:?}");

    // The unit, with its ExecStart pointing at the packaged binary, as systemd would load it.
    let root = dir.join("root");
    let (ok, out) = run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));
    assert!(ok, "{out}");
    let unit =
        std::fs::read_to_string(root.join("usr/lib/systemd/system/gpuplane.service")).unwrap();
    for line in [
        "Type=notify",
        "Before=pve-guests.service",
        "After=network-online.target pve-cluster.service",
    ] {
        assert!(
            unit.contains(line),
            "gpuplane.service lacks {line:?}:\n{unit}"
        );
    }
    let bin = root.join("usr/bin/gpuplane");
    let local = dir.join("gpuplane.service");
    std::fs::write(
        &local,
        unit.replace("/usr/bin/gpuplane", &bin.display().to_string()),
    )
    .unwrap();
    let (ok, out) = run(Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&local));
    assert!(ok, "systemd-analyze verify: {out}");
    let (ok, version) = run(Command::new(&bin).arg("--version"));
    assert!(ok && version.starts_with("gpuplane "), "{version}");
    std::fs::remove_dir_all(&dir).ok();
}
