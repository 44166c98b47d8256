//! `gpuplane run --manifests DIR`, the agent for hosts without Kubernetes, as a process on the
//! simulated reference host: it converges the manifests, writes each resource's status file,
//! keeps lastTransitionTime across rounds, and an invalid manifest changes nothing on the host
//! and says why in `_invalid.yaml`.

use std::path::Path;

mod common;
use common::repo;

/// Runs the agent until settled (at most 40 rounds); returns stderr.
fn run(dir: &Path) -> String {
    let o = common::standalone_agent(dir)
        .args(["--max-rounds", "40"])
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
    let dir = common::reference_dir();
    let d = dir.path();

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

/// The units of the simulated host file: key → (has a file, active).
fn units(d: &Path) -> Vec<(String, bool, bool)> {
    let h: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(d.join("host.yaml")).unwrap()).unwrap();
    h["units"]
        .as_mapping()
        .map(|m| {
            m.iter()
                .map(|(k, u)| {
                    (
                        k.as_str().unwrap_or_default().to_string(),
                        !u["file"].is_null(),
                        !u["startedAt"].is_null() || !u["running"].is_null(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_server_removed_from_the_manifests_has_its_unit_stopped_and_removed() {
    let dir = common::reference_dir();
    let d = dir.path();
    run(d);
    let file = "InferenceServer-default_qwen35-122b.yaml";
    let srv = status(d, file);
    assert_eq!(srv["unit"], "lxc-129/sglang-qwen.service", "{srv:?}");
    let before = units(d);
    assert!(
        before
            .iter()
            .any(|(k, file, _)| k.contains("sglang-qwen") && *file),
        "{before:?}"
    );

    // The server's manifest removed (a GitOps commit deleting it): the agent stops and removes
    // the unit it wrote, then forgets the server's status file.
    std::fs::remove_file(d.join("m/server.yaml")).unwrap();
    let err = run(d);
    let after = units(d);
    assert!(
        !after
            .iter()
            .any(|(k, file, active)| k.contains("sglang-qwen") && (*file || *active)),
        "{after:?}\n{err}"
    );
    assert!(!d.join("status").join(file).exists(), "{err}");
    assert_eq!(ready(&status(d, "GpuPartition-kpro6.yaml")).0, "True");
    // Nothing left to do: another run changes nothing.
    let host = std::fs::read(d.join("host.yaml")).unwrap();
    run(d);
    assert_eq!(std::fs::read(d.join("host.yaml")).unwrap(), host);
}

/// The agent as systemd runs it (no `--max-rounds`), stopped with SIGTERM as `systemctl stop`
/// (or the shutdown of a `reboot: Auto`) stops it: it ends its pass and exits 0, saying so.
/// With the signal's default action it would die by the signal, in whatever pass it was in.
#[test]
fn sigterm_stops_the_agent_between_passes_with_exit_0() {
    let dir = common::reference_dir();
    let d = dir.path();
    let mut child = common::standalone_agent(d)
        .env("GPUPLANE_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run gpuplane");
    let mut stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut err = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
        err
    });
    let partition = d.join("status").join("GpuPartition-kpro6.yaml");
    let t = std::time::Instant::now();
    while !partition.exists() && t.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(partition.exists(), "no status after 120 s");
    // SAFETY: kill(2) on the child we spawned and have not waited for (its pid is not reused).
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let t = std::time::Instant::now();
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed().as_secs() > 120 {
            let _ = child.kill();
            panic!("the agent did not stop within 120 s of SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let err = log.join().unwrap();
    assert!(exit.success(), "{exit:?}\n{err}");
    assert!(
        err.contains("SIGTERM: stopping once the pass in progress is done"),
        "{err}"
    );
    assert!(err.contains("stopped after a whole pass"), "{err}");
    assert_eq!(
        ready(&status(d, "GpuPartition-kpro6.yaml")).0,
        "True",
        "{err}"
    );
}

/// Issue 37: whoever can write the status or file_sd directory planted links where the agent
/// writes (`.NAME.tmp` was written through with `std::fs::write`, so the root agent overwrote
/// any file with JSON carrying tenant text). Every file now goes through the one atomic writer
/// (exclusive create, no link followed, rename), and a directory others can write is refused.
#[test]
fn links_planted_where_the_agent_writes_are_never_followed_and_an_open_directory_is_refused() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let dir = common::reference_dir();
    let d = dir.path();
    let victim = d.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let (status, sd) = (d.join("status"), d.join("prometheus"));
    std::fs::create_dir_all(&status).unwrap();
    std::fs::create_dir_all(&sd).unwrap();
    for link in [
        status.join("GpuPartition-kpro6.yaml"),
        status.join(".GpuPartition-kpro6.yaml.tmp"),
        sd.join("servers.json"),
        sd.join(".servers.json.tmp"),
    ] {
        symlink(&victim, &link).unwrap();
    }
    run(d);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    for f in [
        status.join("GpuPartition-kpro6.yaml"),
        sd.join("servers.json"),
    ] {
        let m = std::fs::symlink_metadata(&f).unwrap();
        assert!(m.is_file(), "{} is the agent's own file now", f.display());
    }
    assert_eq!(ready(&status_of(d)).0, "True");

    // A status directory anyone can write: the agent refuses to start, saying how to fix it.
    std::fs::set_permissions(&status, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = common::standalone_agent(d)
        .args(["--max-rounds", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("--status-dir") && err.contains("chmod 0755"),
        "{err}"
    );
}

fn status_of(d: &Path) -> serde_yaml::Value {
    status(d, "GpuPartition-kpro6.yaml")
}

/// Issue 37: the agent on manifest files refused a whole directory that held a `GpuNodePool`
/// beside its members (an unknown kind). It reads the pool and checks it: invalid, nothing on
/// the host changes and `_invalid.yaml` names the pool's field and the fix (the pool gets no
/// status file of its own, which nothing would remove once fixed); valid, the host converges.
#[test]
fn a_pool_beside_its_members_is_checked_by_the_agent_on_files() {
    let dir = common::reference_dir();
    let d = dir.path();
    let part = std::fs::read_to_string(d.join("m/partition.yaml"))
        .unwrap()
        .replace(
            "    gpuplane.dev/node: kpro6",
            "    gpuplane.dev/pool: inference-fleet\n    gpuplane.dev/node: kpro6",
        );
    std::fs::write(d.join("m/partition.yaml"), part).unwrap();
    let pool = |max: &str| {
        format!("apiVersion: gpuplane.dev/v1alpha1\nkind: GpuNodePool\nmetadata:\n  name: inference-fleet\nspec:\n  maxUnavailable: {max}\n")
    };
    std::fs::write(d.join("m/pool.yaml"), pool(r#""150%""#)).unwrap();
    let start = std::fs::read(d.join("host.yaml")).unwrap();
    run(d);
    assert_eq!(
        std::fs::read(d.join("host.yaml")).unwrap(),
        start,
        "nothing is written for an invalid pool"
    );
    let inv = status(d, "_invalid.yaml");
    let msg = inv["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains(r#"GpuNodePool/inference-fleet: spec.maxUnavailable: "150%" is not a count ≥ 0 or a percentage 0%–100%; write e.g. 1 or "25%""#),
        "{inv:?}"
    );
    assert!(!d.join("status/GpuNodePool-inference-fleet.yaml").exists());
    std::fs::write(d.join("m/pool.yaml"), pool(r#""25%""#)).unwrap();
    run(d);
    let (s, r, _) = ready(&status_of(d));
    assert_eq!((s.as_str(), r.as_str()), ("True", "Converged"));
    assert!(!d.join("status/_invalid.yaml").exists());
}

/// Issue 40: the running agent judges a GPU fault as soon as the kernel reports it, not at its
/// next drift pass. Settled on the twin with a drift interval of an hour, the host then logs the
/// NVIDIA driver's Xid 79 for one GPU (the twin's kernel log, written as a person or the kernel
/// would: the host file replaced whole); the partition's status names that GPU Lost and
/// quarantined (escalated: a reset cannot help a GPU off the bus) within the test's minute — only the agent's health watch can have woken it. The time it took is
/// printed (a figure, not an assertion).
#[test]
fn a_gpu_fault_is_judged_without_waiting_for_the_drift_pass() {
    let dir = common::reference_dir();
    let d = dir.path();
    let mut child = common::standalone_agent(d)
        .args(["--drift-interval", "3600"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run gpuplane");
    let partition = d.join("status").join("GpuPartition-kpro6.yaml");
    let healthy = |want: &str| {
        std::fs::read_to_string(&partition)
            .ok()
            .and_then(|t| serde_yaml::from_str::<serde_yaml::Value>(&t).ok())
            .and_then(|v| {
                v["conditions"]
                    .as_sequence()?
                    .iter()
                    .find(|c| c["type"] == "GpusHealthy")
                    .map(|c| c["reason"] == want)
            })
            .unwrap_or(false)
    };
    let wait = |what: &dyn Fn() -> bool, secs: u64| {
        let t = std::time::Instant::now();
        while !what() && t.elapsed().as_secs() < secs {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        what().then(|| t.elapsed())
    };
    let settled = wait(&|| ready_in(&partition) && healthy("GpusHealthy"), 120);
    assert!(settled.is_some(), "the agent did not settle within 120 s");
    std::thread::sleep(std::time::Duration::from_secs(2));

    let host = d.join("host.yaml");
    let mut doc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&host).unwrap()).unwrap();
    doc["kernelLog"] = serde_yaml::from_str(
        r#"["NVRM: Xid (PCI:0000:e1:00): 79, pid=4242, name=python3, GPU has fallen off the bus."]"#,
    )
    .unwrap();
    let tmp = d.join(".host.yaml.new");
    std::fs::write(&tmp, serde_yaml::to_string(&doc).unwrap()).unwrap();
    std::fs::rename(&tmp, &host).unwrap();
    let judged = wait(&|| healthy("GpusQuarantined"), 60);
    let _ = child.kill();
    let _ = child.wait();
    let took =
        judged.expect("the fault was not judged within 60 s (the drift pass is an hour away)");
    let status = std::fs::read_to_string(&partition).unwrap();
    assert!(
        status.contains("0000:e1:00.0 (slice confidential-vm) Lost, quarantined since ")
            && status.contains("(Escalated; accept with gpuplane.dev/accept-health="),
        "{status}"
    );
    println!(
        "a GPU fault judged {} ms after the kernel logged it",
        took.as_millis()
    );
}

fn ready_in(partition: &Path) -> bool {
    std::fs::read_to_string(partition)
        .ok()
        .and_then(|t| serde_yaml::from_str::<serde_yaml::Value>(&t).ok())
        .is_some_and(|v| ready(&v).0 == "True")
}

/// Issue 41: a finished write is acted on at once. The agent on the settled twin (drift an hour
/// away); the server's manifest is then changed five times, each written whole and closed
/// (`std::fs::write`), and the time from the close to the agent's first host write is read from
/// the agent's own log (tracing's UTC timestamps). Printed, with the median (a figure, not an
/// assertion; the target is ≤ 50 ms on this machine); the test asserts that each change was
/// acted on, and read whole (the unit carries the served name written).
#[test]
fn a_finished_write_is_acted_on_at_once() {
    let dir = common::reference_dir();
    let d = dir.path();
    let (mut child, log) = logging_agent(d);
    let settle = |what: &str| settled(d, what);
    settle("the first converge");
    let server = d.join("m").join("server.yaml");
    let original = std::fs::read_to_string(&server).unwrap();
    let mut took = vec![];
    for i in 0..5 {
        let writes_before = host_write_times(&log).len();
        let text = original.replace("qwen3.5-122b", &format!("qwen3.5-122b-v{i}"));
        assert_ne!(
            text, original,
            "the reference server changed its served name"
        );
        std::fs::write(&server, &text).unwrap();
        let closed = epoch_now();
        let t = std::time::Instant::now();
        let first = loop {
            if let Some(w) = host_write_times(&log).get(writes_before) {
                break *w;
            }
            assert!(t.elapsed().as_secs() < 60, "change {i} not acted on");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        took.push(first - closed);
        settle(&format!("change {i}"));
    }
    let _ = child.kill();
    let _ = child.wait();
    if std::env::var("GPUPLANE_SHOW_LOG").is_ok() {
        println!("{}", std::fs::read_to_string(&log).unwrap_or_default());
    }
    let mut ms: Vec<f64> = took.iter().map(|s| s * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    println!(
        "a finished write → the agent's first host write: {:?} ms, median {:.0} ms",
        ms.iter().map(|m| m.round() as i64).collect::<Vec<_>>(),
        ms[ms.len() / 2]
    );
}

/// The agent on manifest files over `d` (drift an hour away), logging at `info` to
/// `d/agent.log`; the child and its log.
fn logging_agent(d: &Path) -> (std::process::Child, std::path::PathBuf) {
    let log = d.join("agent.log");
    let child = common::standalone_agent(d)
        .args(["--drift-interval", "3600"])
        .env("GPUPLANE_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run gpuplane");
    (child, log)
}

/// Waits (at most 120 s) until the partition's status over `d` says Ready, then 300 ms more.
fn settled(d: &Path, what: &str) {
    let partition = d.join("status").join("GpuPartition-kpro6.yaml");
    let t = std::time::Instant::now();
    while !ready_in(&partition) && t.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(ready_in(&partition), "{what}: not settled within 120 s");
    std::thread::sleep(std::time::Duration::from_millis(300));
}

/// Seconds since the epoch, now.
fn epoch_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The times (seconds since the epoch) of the `host write:` lines of an agent's log, in order.
fn host_write_times(log: &Path) -> Vec<f64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("host write: "))
        .filter_map(|l| {
            let ts = l.split_whitespace().next()?;
            let t: jiff::Timestamp = ts.parse().ok()?;
            Some(t.as_nanosecond() as f64 / 1e9)
        })
        .collect()
}

/// Issue 41: writers that torture the manifests directory never get a half-written file read.
/// The agent on the settled twin while, for 8 s, three writers rewrite the server's manifest
/// with a new served name each time, each as its tool does: `cat >` (one open that truncates,
/// a random pause of up to 300 ms with the file empty, the text, the close), a rename of a
/// finished file into place, and `git checkout` (the file removed, created again up to 50 ms
/// later). A half-written read shows in the agent's log as manifests "not applied" (a cut
/// text) or as the server's unit removed (an empty or missing file read as a deleted server);
/// there must be none. The count of reads the agent made and acted on is printed (it did the
/// work: it rewrote the unit for the changes it read).
#[test]
fn writers_that_torture_the_manifests_never_get_a_half_written_file_read() {
    use std::io::Write as _;
    let dir = common::reference_dir();
    let d = dir.path();
    // The manifests directory is a symlink, as git-sync keeps it: the fourth writer swaps it.
    std::fs::rename(d.join("m"), d.join("rev-0")).unwrap();
    std::os::unix::fs::symlink("rev-0", d.join("m")).unwrap();
    let (mut child, log) = logging_agent(d);
    settled(d, "the first converge");
    let server = d.join("m").join("server.yaml");
    let original = std::fs::read_to_string(&server).unwrap();
    let n = std::sync::atomic::AtomicU64::new(0);
    let text = |n: u64| original.replace("qwen3.5-122b", &format!("qwen3.5-122b-t{n}"));
    let end = std::time::Instant::now() + std::time::Duration::from_secs(8);
    let ms = |x: u64| std::time::Duration::from_millis(x);
    std::thread::scope(|s| {
        for writer in 0..4u64 {
            let (server, n, text) = (&server, &n, &text);
            s.spawn(move || {
                // A small linear congruential generator: pauses differ per writer and run.
                let mut seed = writer * 7919 + 17;
                let mut rand = |max: u64| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (seed >> 33) % max
                };
                while std::time::Instant::now() < end {
                    let body = text(n.fetch_add(1, std::sync::atomic::Ordering::SeqCst));
                    match writer {
                        0 => {
                            let mut f = std::fs::File::create(server).unwrap();
                            std::thread::sleep(ms(rand(300)));
                            f.write_all(body.as_bytes()).unwrap();
                        }
                        1 => {
                            // A rename within one directory, as a tool holding it does: the
                            // link resolved once (the fourth writer may swap it in between;
                            // through the link, the rename's source would then be gone).
                            let dir = std::fs::canonicalize(server.parent().unwrap()).unwrap();
                            let tmp = dir.join(format!(".server.yaml.{}", rand(1 << 20)));
                            std::fs::write(&tmp, &body).unwrap();
                            std::fs::rename(&tmp, dir.join("server.yaml")).unwrap();
                        }
                        2 => {
                            let _ = std::fs::remove_file(server);
                            std::thread::sleep(ms(rand(50)));
                            std::fs::write(server, &body).unwrap();
                        }
                        _ => {
                            // git-sync: a new revision written whole, then the link swapped
                            // in one rename.
                            let m = server.parent().unwrap();
                            let root = m.parent().unwrap();
                            let rev = format!("rev-{}", rand(1 << 30));
                            std::fs::create_dir(root.join(&rev)).unwrap();
                            let partition = std::fs::read(m.join("partition.yaml")).unwrap();
                            std::fs::write(root.join(&rev).join("partition.yaml"), partition)
                                .unwrap();
                            std::fs::write(root.join(&rev).join("server.yaml"), &body).unwrap();
                            let next = root.join(format!(".m-{rev}"));
                            std::os::unix::fs::symlink(&rev, &next).unwrap();
                            std::fs::rename(&next, m).unwrap();
                        }
                    }
                    std::thread::sleep(ms(rand(400)));
                }
            });
        }
    });
    // The last write settles.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let half: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("are not applied") || l.contains("kind=\"removeUnit\""))
        .collect();
    let units = text
        .lines()
        .filter(|l| l.contains("kind=\"writeUnit\""))
        .count();
    println!(
        "torture: {} writes by 4 writers (cat >, rename, remove-then-create, symlink swap) in 8 s; the agent rewrote the unit {units} times; half-written reads: {}",
        n.load(std::sync::atomic::Ordering::SeqCst),
        half.len()
    );
    assert!(units > 0, "the agent acted on none of the writes");
    assert!(half.is_empty(), "half-written reads:\n{}", half.join("\n"));
}
