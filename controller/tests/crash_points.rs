//! A crash after every host write, on the simulated host (issue 13, item 1).
//!
//! For each transition — the reference split (`examples/kpro6/` on `examples/hosts/kpro6.yaml`,
//! 8/0 → 4/4) and its reverse (`examples/kpro6-all-lxc/`, 4/4 → 8/0) — an uninterrupted run
//! counts the host writes N. Then, for every k in 1..=N, the real `gpuplane converge --host
//! sim-rw:FILE` runs with `GPUPLANE_KILL_AFTER_WRITE=k` and kills itself with SIGKILL right after
//! write k. The simulated host writes every step to FILE as it happens (as a real host keeps its
//! state), so the file left behind is the host at the crash. Checked:
//!
//! - the killed run died of SIGKILL; the file it left differs from that of every other k (each
//!   write changed the host, and the kill came right after it); it parses, no temporary file is left over
//!   (nothing half-written), every foreign line and comment of the container config and of
//!   `pci.cfg` is still there, in order, and no running container mounts a GPU that is not
//!   bound to nvidia;
//! - a fresh `converge` then ends converged (exit 0, every server Ready), and one more run makes
//!   zero writes;
//! - the host it leaves equals the host of the uninterrupted run (clocks aside): every GPU bound
//!   to its slice's driver and owned by exactly one consumer.
//!
//! Each transition prints `N` and its pass count (`cargo test --test crash_points --
//! --nocapture`).

mod common;

use common::*;
use gpuplane::host::sim::SimHostFile;
use std::os::unix::process::ExitStatusExt;

/// Runs one transition from `start`, crashing after every write; returns (N, passed).
fn crash_every_write(name: &str, manifests: &str, start: &SimHostFile) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host.yaml");
    let start_text = serde_yaml::to_string(start).unwrap();
    std::fs::write(&host, &start_text).unwrap();
    let n = writes_of_converged(&converge(manifests, &host, None), name);
    let want = read_host(&host);
    check_ownership(&want, name);
    check_host_file(&host, start, name);
    assert!(n > 0, "{name}: the transition writes nothing");
    let mut passed = 0;
    let mut crash_states = std::collections::BTreeSet::new();
    for k in 1..=n {
        let what = format!("{name}, killed after write {k} of {n}");
        std::fs::write(&host, &start_text).unwrap();
        let o = converge(manifests, &host, Some(k));
        assert_eq!(o.status.signal(), Some(9), "{what}: {:?}", o.status);
        check_host_file(&host, start, &what);
        // Each k leaves a different host: the kill came right after write k, not before or later.
        assert!(
            crash_states.insert(timeless(read_host(&host))),
            "{what}: same as before"
        );
        writes_of_converged(&converge(manifests, &host, None), &what);
        let again = writes_of_converged(&converge(manifests, &host, None), &what);
        assert_eq!(again, 0, "{what}: the run after recovery wrote");
        let got = read_host(&host);
        check_ownership(&got, &what);
        assert_eq!(timeless(got), timeless(want.clone()), "{what}");
        passed += 1;
    }
    println!("crash points, {name}: N = {n}, passed {passed}/{n}");
    (n, passed)
}

#[test]
fn a_crash_after_every_write_of_the_split_and_its_reverse_recovers() {
    let start = reference_host_with_foreign_lines();
    let (n, passed) = crash_every_write("split 8/0 -> 4/4", "examples/kpro6", &start);
    assert_eq!(passed, n);
    // The reverse starts from the split's result.
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host.yaml");
    std::fs::write(&host, serde_yaml::to_string(&start).unwrap()).unwrap();
    writes_of_converged(&converge("examples/kpro6", &host, None), "split");
    let split = read_host(&host);
    let (n, passed) = crash_every_write("reverse 4/4 -> 8/0", "examples/kpro6-all-lxc", &split);
    assert_eq!(passed, n);
}
