//! The emulated GPU host (qemu, `e2e/vm/run.sh`): the set-up check, running a script and files on
//! the VM (a restore of the machine's snapshot, or with `VM_BOOT=fresh` a boot; run.sh bounds how
//! many run at once), the scenarios of `e2e/vm/scenarios/` with their shared shell helpers, the
//! SGLang stand-in tarball, and reading the `TAG name rest` lines scenarios print.

use crate::paths::{cache_dir, find_in_path, gpuplane_bin, repo_root};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// What to do when the VM set-up is missing.
pub const HINT: &str = "the VM test set-up is missing: run e2e/setup/install-vm-deps.sh and then \
                        e2e/vm/build-image.sh (as root)";

/// Fails (does not skip) when the VM set-up is missing.
pub fn preflight() {
    assert!(
        find_in_path("qemu-system-x86_64").is_some(),
        "qemu-system-x86_64 not found in PATH; {HINT}"
    );
    for f in ["base.img", "vmlinuz", "initrd.img", "stamp"] {
        let p = cache_dir().join(f);
        assert!(p.is_file(), "{} missing; {HINT}", p.display());
    }
}

/// What one run gave back.
pub struct VmRun {
    /// run.sh's exit code: the script's, 2 when the set-up is missing, 124/125 on a VM failure.
    pub code: Option<i32>,
    /// What the script printed.
    pub stdout: String,
    pub stderr: String,
    /// Wall time of the boot.
    pub secs: f64,
}

/// Runs `SCRIPT` on the VM once: `run.sh SCRIPT FILES...` with extra environment (`KARGS`,
/// `VM_ARGS`, `VM_BOOT=fresh`, ...): restored from the machine's snapshot unless `VM_BOOT=fresh`.
/// run.sh itself bounds how many VMs run at once over every test process (`VM_SLOTS`).
pub fn run(script: &Path, files: &[PathBuf], env: &[(&str, &str)]) -> VmRun {
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(repo_root().join("e2e/vm/run.sh"))
        .arg(script)
        .args(files)
        .envs(env.iter().copied())
        .output()
        .expect("e2e/vm/run.sh runs");
    VmRun {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        secs: started.elapsed().as_secs_f64(),
    }
}

/// Boots the VM with `e2e/vm/scenarios/SCRIPT`, `files` and `e2e/vm/scenario-lib.sh` (which the
/// scenarios source); returns what the script printed.
pub fn boot_scenario(script: &str, files: &[PathBuf], kargs: &str) -> String {
    boot_scenario_with(script, files, &[("KARGS", kargs)])
}

/// [`boot_scenario`] with more of run.sh's environment (`KARGS`, `VM_PCI_LAYOUT`, ...).
pub fn boot_scenario_with(script: &str, files: &[PathBuf], extra: &[(&str, &str)]) -> String {
    let mut all = files.to_vec();
    all.push(repo_root().join("e2e/vm/scenario-lib.sh"));
    let mut env = vec![("VM_TIMEOUT", "900")];
    env.extend_from_slice(extra);
    let r = run(
        &repo_root().join("e2e/vm/scenarios").join(script),
        &all,
        &env,
    );
    eprintln!("--- {script} ({env:?}): {:.0}s\n{}", r.secs, r.stdout);
    assert!(
        r.code != Some(2),
        "the VM is not set up: run e2e/setup/install-vm-deps.sh and e2e/vm/build-image.sh\n{}",
        r.stderr
    );
    assert!(
        r.stdout.contains("== ") || r.stdout.contains("IOMMU"),
        "no output from the VM: {}",
        r.stderr
    );
    r.stdout
}

/// [`boot_scenario`] with the gpuplane binary and the SGLang stand-in tarball (made in a temporary
/// directory named after `name`, removed after the boot).
pub fn boot_scenario_with_standin(script: &str, name: &str) -> String {
    let (dir, tar) = standin_tar(name);
    let out = boot_scenario(script, &[gpuplane_for_vm(), tar], "");
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// One run of `e2e/vm/shared-boot.sh`: scenarios of one machine, run one after another with
/// `reset_host` (scenario-lib.sh) after each.
pub struct SharedBoot {
    /// What each scenario printed and its exit status, by scenario name (`story`, not `story.sh`).
    pub scenarios: BTreeMap<String, (String, Option<i32>)>,
    /// `host_digest` lines in order: `pristine` (before the first scenario), then one per
    /// scenario after the reset that follows it.
    pub digests: Vec<(String, Vec<String>)>,
    /// The boot's stderr and wall time, for messages.
    pub stderr: String,
    pub secs: f64,
}

impl SharedBoot {
    /// What scenario `name` printed; panics (naming the boot's end) when it did not run to the end.
    pub fn output(&self, name: &str) -> &str {
        match self.scenarios.get(name) {
            Some((out, Some(_))) => out,
            Some((out, None)) => panic!("scenario {name} did not finish:\n{out}\n{}", self.stderr),
            None => panic!(
                "scenario {name} did not run in shared-boot.sh\n{}",
                self.stderr
            ),
        }
    }
}

/// What shared-boot.sh printed, split into its scenarios and digests (`stderr` empty, `secs` 0).
pub fn parse_shared(out: &str) -> SharedBoot {
    let mut b = SharedBoot {
        scenarios: BTreeMap::new(),
        digests: Vec::new(),
        stderr: String::new(),
        secs: 0.0,
    };
    let mut current: Option<String> = None;
    for l in out.lines() {
        if let Some(name) = l.strip_prefix("@@SCENARIO@@ ") {
            current = Some(name.to_string());
            b.scenarios.insert(name.to_string(), (String::new(), None));
        } else if let Some(rest) = l.strip_prefix("@@SCENARIO-END@@ ") {
            let (name, rc) = rest.split_once(' ').unwrap_or((rest, ""));
            if let Some(s) = b.scenarios.get_mut(name) {
                s.1 = rc.parse().ok();
            }
            current = None;
        } else if let (None, Some(rest)) = (&current, l.strip_prefix("DIGEST ")) {
            let (name, json) = rest.split_once(' ').unwrap_or((rest, "[]"));
            let lines: Vec<String> = serde_json::from_str(json)
                .unwrap_or_else(|e| vec![format!("unreadable digest ({e}): {json}")]);
            b.digests.push((name.to_string(), lines));
        } else if let Some(name) = &current {
            let s = &mut b.scenarios.get_mut(name).expect("inserted").0;
            s.push_str(l);
            s.push('\n');
        }
    }
    b
}

/// Runs `scenarios` (names under `e2e/vm/scenarios/`, without `.sh`) on one VM in that order with
/// the gpuplane binary, the SGLang stand-in and scenario-lib.sh, the host reset after each and
/// described before the first and after each reset. Does not assert on the scenarios: each test
/// judges its own.
pub fn boot_shared(scenarios: &[&str]) -> SharedBoot {
    // A directory of its own: runs of one test process go side by side, and each removes its own.
    let (dir, tar) = standin_tar(&format!("gpuplane-vm-shared-{}", scenarios.join("-")));
    let mut files = vec![
        gpuplane_for_vm(),
        tar,
        repo_root().join("e2e/vm/scenario-lib.sh"),
    ];
    for s in scenarios {
        files.push(repo_root().join("e2e/vm/scenarios").join(format!("{s}.sh")));
    }
    let args = format!("gpuplane.scenarios={}", scenarios.join(","));
    let r = run(
        &repo_root().join("e2e/vm/shared-boot.sh"),
        &files,
        &[("VM_ARGS", &args), ("VM_TIMEOUT", "1800")],
    );
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("--- shared-boot.sh ({args}): {:.0}s\n{}", r.secs, r.stdout);
    assert!(
        r.code != Some(2),
        "the VM is not set up: run e2e/setup/install-vm-deps.sh and e2e/vm/build-image.sh\n{}",
        r.stderr
    );
    SharedBoot {
        stderr: r.stderr,
        secs: r.secs,
        ..parse_shared(&r.stdout)
    }
}

/// The gpuplane binary under test ([`gpuplane_bin`]) as a file named `gpuplane`, which is what
/// the scenarios run (run.sh installs files under their own names): `GPUPLANE_BIN` under another
/// name is linked as `gpuplane` in a temporary directory.
pub fn gpuplane_for_vm() -> PathBuf {
    let bin = gpuplane_bin();
    if bin.file_name().is_some_and(|n| n == "gpuplane") {
        return bin;
    }
    let dir = std::env::temp_dir().join(format!("gpuplane-vm-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("gpuplane");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(std::path::absolute(&bin).unwrap(), &link).unwrap();
    link
}

/// A temp dir and, in it, a tarball of the SGLang stand-in (`e2e/standin`) for the VM.
pub fn standin_tar(name: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tar = dir.join("standin.tar");
    let ok = Command::new("tar")
        .arg("cf")
        .arg(&tar)
        .arg("-C")
        .arg(repo_root().join("e2e"))
        .arg("standin")
        .status()
        .unwrap();
    assert!(ok.success(), "tar of e2e/standin failed");
    (dir, tar)
}

/// The lines of `out` that start with `tag ` (the tag taken off), in order.
pub fn tagged<'a>(out: &'a str, tag: &str) -> Vec<&'a str> {
    out.lines()
        .filter_map(|l| l.strip_prefix(tag).and_then(|r| r.strip_prefix(' ')))
        .collect()
}

/// The `TAG name rest...` lines a scenario printed, by (tag, name).
pub struct Report(BTreeMap<(String, String), Vec<String>>);

impl Report {
    /// Groups the lines of `out` by their first two words.
    pub fn parse(out: &str) -> Report {
        let mut m: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for l in out.lines() {
            let mut it = l.splitn(3, ' ');
            if let (Some(tag), Some(name)) = (it.next(), it.next()) {
                m.entry((tag.into(), name.into()))
                    .or_default()
                    .push(it.next().unwrap_or("").to_string());
            }
        }
        Report(m)
    }

    /// The rests of the `TAG name` lines; panics when there are none.
    pub fn get(&self, tag: &str, name: &str) -> &Vec<String> {
        self.0
            .get(&(tag.to_string(), name.to_string()))
            .unwrap_or_else(|| panic!("no {tag} {name} line"))
    }

    /// The rests of the `TAG name` lines; none when there are none.
    pub fn lines(&self, tag: &str, name: &str) -> &[String] {
        self.0
            .get(&(tag.to_string(), name.to_string()))
            .map_or(&[][..], Vec::as_slice)
    }

    /// The `JSON name` line (the converge's `--output json`), parsed.
    pub fn json(&self, name: &str) -> Value {
        serde_json::from_str(&self.get("JSON", name)[0])
            .unwrap_or_else(|e| panic!("JSON {name}: {e}"))
    }

    /// The `RC name` line: the converge's exit code.
    pub fn rc(&self, name: &str) -> i32 {
        self.get("RC", name)[0].parse().unwrap()
    }

    /// Driver and driver_override per address after a scenario (the `DRV name` lines).
    pub fn drivers(&self, name: &str) -> BTreeMap<String, (String, String)> {
        self.get("DRV", name)
            .iter()
            .map(|l| {
                let v: Vec<&str> = l.split(' ').collect();
                (
                    v[0].to_string(),
                    (v[1].to_string(), v.get(2).unwrap_or(&"").to_string()),
                )
            })
            .collect()
    }
}

/// The step kinds of a `gpuplane converge --output json`.
pub fn step_kinds(j: &Value) -> Vec<String> {
    j["steps"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s["kind"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// (status, reason, message) of `resource`'s Ready condition in a `gpuplane converge --output
/// json`, "" when absent.
pub fn ready(j: &Value, resource: &str) -> (String, String, String) {
    let c = j["status"][resource]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    (
        c["status"].as_str().unwrap_or("").into(),
        c["reason"].as_str().unwrap_or("").into(),
        c["message"].as_str().unwrap_or("").into(),
    )
}

#[cfg(test)]
mod tests {
    use super::parse_shared;

    #[test]
    fn a_shared_boot_s_output_is_split_by_scenario() {
        let out = "DIGEST pristine [\"file /srv\"]\n@@SCENARIO@@ a\nRC x 0\nDIGEST inside a\n\
                   @@SCENARIO-END@@ a 3\nDIGEST a [\"file /srv\"]\n@@SCENARIO@@ b\nRC x 1\n";
        let b = parse_shared(out);
        assert_eq!(
            b.output("a"),
            "RC x 0\nDIGEST inside a\n",
            "a scenario's own lines stay its own"
        );
        assert_eq!(b.scenarios["a"].1, Some(3));
        assert_eq!(
            b.scenarios["b"],
            ("RC x 1\n".to_string(), None),
            "b never ended"
        );
        let names: Vec<&str> = b.digests.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["pristine", "a"]);
        assert_eq!(b.digests[1].1, ["file /srv"]);
    }

    #[test]
    #[should_panic(expected = "scenario b did not finish")]
    fn a_scenario_that_did_not_finish_is_said() {
        parse_shared("@@SCENARIO@@ b\nRC x 1\n").output("b");
    }
}
