//! Where things are: the repository root, the gpuplane binary under test (`GPUPLANE_BIN`), the
//! cache of installed test components (`GPUPLANE_E2E_CACHE`) and programs on `PATH`.

use std::path::{Path, PathBuf};

/// Default of `GPUPLANE_E2E_CACHE`, where the scripts in `e2e/setup/` install what the tests need.
pub const DEFAULT_CACHE: &str = "/var/cache/gpuplane-e2e";

/// Root of the repository (the parent of the `e2e` crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e has a parent")
        .to_path_buf()
}

/// `rel` under the repository root, as a string (for command lines).
pub fn repo_path(rel: &str) -> String {
    path_str(&repo_root().join(rel))
}

/// A path as a string (lossy).
pub fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `$GPUPLANE_E2E_CACHE`, default `/var/cache/gpuplane-e2e`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("GPUPLANE_E2E_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE))
}

/// The gpuplane binary under test: `$GPUPLANE_BIN`, else `debug/gpuplane` in `$CARGO_TARGET_DIR`
/// or the repository's `target/`. Panics, saying how to build it, when it is missing.
pub fn gpuplane_bin() -> PathBuf {
    let bin = std::env::var_os("GPUPLANE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo_root().join("target"))
                .join("debug/gpuplane")
        });
    assert!(
        bin.is_file(),
        "the agent binary {} is missing: build it first with `cargo build --bin gpuplane` \
         (or point GPUPLANE_BIN at it)",
        bin.display()
    );
    bin
}

/// `prog` as found in a directory of `$PATH`.
pub fn find_in_path(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|f| f.is_file())
}

/// Runs `cmd` and returns its stdout, panicking with its output when it fails.
pub fn run_ok(cmd: &mut std::process::Command) -> String {
    let o = cmd.output().expect("run");
    assert!(
        o.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}
