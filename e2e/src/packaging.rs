//! The .deb as the tests build it: cargo-deb from the metadata in `controller/Cargo.toml`, over
//! the debug binary the tests already built (`--profile dev --no-build`), to keep CI short.

use crate::paths::repo_root;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds `gpuplane.deb` into `dir`; its path.
pub fn build_deb(dir: &Path) -> PathBuf {
    let deb = dir.join("gpuplane.deb");
    let o = Command::new("cargo")
        .args([
            "deb",
            "-p",
            "gpuplane",
            "--no-build",
            "--profile",
            "dev",
            "-o",
        ])
        .arg(&deb)
        .current_dir(repo_root())
        .output()
        .expect("run cargo deb (e2e/setup/packaging-tools.sh installs it)");
    assert!(
        o.status.success(),
        "cargo deb: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    deb
}
