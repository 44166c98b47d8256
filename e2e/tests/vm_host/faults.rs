//! Faults of the real host for the real backend, in the qemu GPU host (issue 13, item 2): a
//! read-only `/etc/pve/mapping` (a read-only bind mount, as `/etc/pve` is when pmxcfs has no
//! quorum), a full disk under the mapping file (a 64 KiB tmpfs filled up) and a server unit that
//! fails while starting (the SGLang stand-in runs out of KV-cache memory and exits 1). Each
//! fault: the converge stops with `Ready=False` whose message carries the kernel's or the
//! server's own words, `pci.cfg` is whole (its foreign lines there, no temporary file left), and
//! once the fault is gone the next converge succeeds and the one after writes nothing.
//! The simulated host's 20 injected faults are `controller/tests/faults.rs`.
//!
//!     cargo build --bin gpuplane && cargo test -p gpuplane-e2e --test vm_host faults -- --nocapture

use gpuplane_e2e::vm::{ready, Report};

const FOREIGN: &str =
    "# mappings kept by hand\nnic\n\tmap id=8086:100e,node=vmhost,path=0000:44:02.0";
const P: &str = "GpuPartition/vmhost";

/// pci.cfg after `step` is whole: the foreign lines first, no temporary file anywhere.
fn whole(out: &str, m: &Report, step: &str) -> String {
    let cfg = m.get("PCICFG", step).join("\n");
    assert!(
        cfg.starts_with(FOREIGN),
        "{step}: foreign lines lost:\n{cfg}"
    );
    let left: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with(&format!("LEFT {step} ")))
        .collect();
    assert!(left.is_empty(), "{step}: temporary files left: {left:?}");
    cfg
}

/// A fault that stops the split at the mapping write (`step`), the same again while it lasts
/// (`still`, if any), then gone: `gone` converges, `again` writes nothing.
fn check_config_fault(
    out: &str,
    m: &Report,
    step: &str,
    still: Option<&str>,
    gone: &str,
    words: &str,
) {
    for s in [Some(step), still].into_iter().flatten() {
        let j = m.json(s);
        assert_eq!(m.rc(s), 1, "{s}: {j}");
        let (status, _, msg) = ready(&j, P);
        assert_eq!(status, "False", "{s}: {j}");
        assert!(msg.contains(words), "{s}: the fault's own words: {msg}");
        let cfg = whole(out, m, s);
        assert!(
            !cfg.contains("emu-vm"),
            "{s}: the mapping was written:\n{cfg}"
        );
        println!("  {s}: exit 1, Ready=False: {msg}");
    }
    if let Some(s) = still {
        // The GPUs moved before the mapping write failed; only that write is left to do.
        assert_eq!(m.json(s)["writes"], 0, "{s}: {}", m.json(s));
    }
    assert_eq!(m.rc(gone), 0, "{gone}: {}", m.json(gone));
    let cfg = whole(out, m, gone);
    assert!(
        cfg.contains("path=0000:81:00.0") && cfg.contains("path=0000:82:00.0"),
        "{gone}: {cfg}"
    );
    let d = m.drivers(gone);
    for a in ["0000:81:00.0", "0000:82:00.0"] {
        assert_eq!(d[a].0, "vfio-pci", "{gone}: {a}");
    }
    assert_eq!(m.rc(&format!("{step}-again")), 0);
    assert_eq!(m.json(&format!("{step}-again"))["writes"], 0);
}

#[test]
fn real_host_faults_are_reported_leave_files_whole_and_recover() {
    let out = crate::scenario("faults");
    let m = Report::parse(out);

    // Read-only /etc/pve/mapping.
    assert_eq!(m.get("MOUNT", "ro")[0], "ro");
    check_config_fault(
        out,
        &m,
        "ro",
        Some("ro-still"),
        "ro-gone",
        "Read-only file system",
    );
    assert_eq!(m.rc("ro-reset"), 0);

    // A full disk.
    assert_eq!(m.get("MOUNT", "full")[0], "0", "the tmpfs is full");
    check_config_fault(
        out,
        &m,
        "full",
        None,
        "full-gone",
        "No space left on device",
    );
    assert_eq!(m.rc("full-reset"), 0);

    // A server that fails while starting: said with the server's words; fixed, it starts.
    let fail = m.json("fail");
    assert_eq!(m.rc("fail"), 1, "{fail}");
    let (status, reason, msg) = ready(&fail, "InferenceServer/default/e2e");
    println!("  fail: exit 1, Ready={status} {reason}: {msg}");
    assert_eq!(status, "False", "{fail}");
    assert!(msg.contains("Not enough memory"), "{msg}");
    assert_ne!(m.get("ACTIVE", "fail")[0], "active");
    assert_eq!(m.rc("fixed"), 0, "{}", m.json("fixed"));
    assert_eq!(m.get("ACTIVE", "fixed")[0], "active");
    assert_eq!(m.json("fixed-again")["writes"], 0);
}
