//! Benchmarks that print figures (never assert a time): `cargo bench -p gpuplane --bench figures`.
//!
//! - converge of the reference split on the simulated twin (`examples/hosts/kpro6.yaml`): the
//!   whole observe → plan → apply loop, from the hand-made state to converged and Ready. The
//!   twin's waits (a server loading, a container starting) advance its own clock and take no
//!   wall time, so the figure is gpuplane's own overhead;
//! - a reconcile of the converged twin (0 writes);
//! - `observe` of the twin and of the captured H200 host (`src/host/local/testdata/h200`, real
//!   sysfs/proc files read through the local backend);
//! - the health mark a waiting agent takes every second (captured H200 host), and the judgment
//!   of a GPU with a full kernel log of Xids (issue 40);
//! - the holder scan of this machine's `/proc` with 300 busy processes more, on one thread and
//!   split over the CPUs (it runs in every observation and right before every unbind);
//! - the planner on the reference host scaled to 8, 64 and 512 GPUs (each of the 8 GPUs
//!   repeated under new PCI domains, the slices and their consumers with them).
//!
//! Each figure: iterations, median, p99, min and max of one run. `GPUPLANE_BENCH_SCALE=N`
//! multiplies the iterations. docs/BENCHMARKS.md explains the method and the figures.

use gpuplane::converge::{converge, Options};
use gpuplane::desired::Desired;
use gpuplane::door::Door;
use gpuplane::host::local::LocalHost;
use gpuplane::host::model::HostState;
use gpuplane::host::sim::SimHost;
use gpuplane::host::Host;
use gpuplane::manifests::Manifests;
use std::time::{Duration, Instant};

/// The agent's own allocator (`src/main.rs`), so that the figures are the agent's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn scale() -> usize {
    std::env::var("GPUPLANE_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// `GPUPLANE_BENCH_ONLY=TEXT`: only the figures whose name contains TEXT (for a profile of one).
fn wanted(name: &str) -> bool {
    std::env::var("GPUPLANE_BENCH_ONLY").map_or(true, |only| name.contains(&only))
}

/// Runs `f` `n` times (after 3 warm-up runs); prints and returns the durations' summary.
fn bench(name: &str, n: usize, mut f: impl FnMut() -> String) {
    if !wanted(name) {
        return;
    }
    for _ in 0..3 {
        f();
    }
    let mut t: Vec<Duration> = Vec::with_capacity(n);
    let mut note = String::new();
    for _ in 0..n {
        let s = Instant::now();
        note = f();
        t.push(s.elapsed());
    }
    t.sort();
    let q = |p: f64| t[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    println!(
        "| {name} | {n} | {} | {} | {} | {} | {note} |",
        fmt(q(0.5)),
        fmt(q(0.99)),
        fmt(t[0]),
        fmt(t[n - 1])
    );
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

/// The twin and the reference desired state for it.
fn twin_and_desired() -> (SimHost, Desired) {
    let mut host = SimHost::from_yaml(gpuplane::EMBEDDED_HOST, "examples/hosts/kpro6.yaml")
        .expect("the twin loads");
    let mut m = Manifests::default();
    for (name, text) in gpuplane::EMBEDDED_MANIFESTS {
        m.add_text(text, name).expect("the examples parse");
    }
    let observed = host.observe().expect("the twin observes");
    let desired = gpuplane::desired::select::for_host(&m, &observed, "10de", "nvidia")
        .expect("the examples are valid for the twin");
    (host, desired)
}

/// The host writes of the reference split from the hand-made state (docs/BENCHMARKS.md; the CLI
/// test `a_sim_host_file_is_read_only_unless_asked...` holds the same number). A twin that
/// needs fewer is not the start state (say, an example file that was converged in place), and
/// timing it would name work that was not done.
const REFERENCE_SPLIT_WRITES: u64 = 28;

fn converge_once(host: &mut SimHost, desired: &Desired) -> (u64, bool) {
    let mut door = Door::new(host);
    let r = converge(desired, &mut door, &Options::default());
    (r.writes, r.converged())
}

/// The reference host with every GPU repeated `k` times under PCI domains 1..k, and the
/// desired state's slices, containers and mappings scaled with it.
fn scaled(host: &HostState, desired: &Desired, k: usize) -> (HostState, Desired) {
    let mut h = host.clone();
    let mut d = desired.clone();
    let gpus: Vec<_> = host.gpus("10de").cloned().collect();
    let rename = |addr: &str, i: usize| format!("{i:04x}{}", &addr[4..]);
    for i in 1..k {
        for g in &gpus {
            let mut c = g.clone();
            c.address = rename(&g.address, i);
            c.iommu_group = g.iommu_group.map(|x| x + 1000 * i as u32);
            c.nvidia_minor = g.nvidia_minor.map(|x| x + 8 * i as u32);
            if let Some(grp) = g.iommu_group {
                if let Some(t) = host.iommu.group_types.get(&grp).cloned() {
                    h.iommu.group_types.insert(grp + 1000 * i as u32, t);
                }
            }
            h.pci_devices.insert(c.address.clone(), c);
        }
        for s in d.partition.slices.iter_mut() {
            let extra: Vec<String> = s
                .gpus
                .iter()
                .filter(|a| a.starts_with("0000:"))
                .map(|a| rename(a, i))
                .collect();
            s.gpus.extend(extra);
        }
    }
    (h, d)
}

fn main() {
    let n = scale();
    println!("| figure | iterations | median | p99 | min | max | note |");
    println!("|---|---|---|---|---|---|---|");

    let (twin, desired) = twin_and_desired();
    let (w, ok) = converge_once(&mut twin.clone(), &desired);
    assert!(
        ok && w == REFERENCE_SPLIT_WRITES,
        "the embedded twin is not the reference start state: its split took {w} writes (want {REFERENCE_SPLIT_WRITES}, converged: {ok}); no figure is printed"
    );
    bench(
        "converge the reference split (twin, waits excluded)",
        200 * n,
        || {
            let mut h = twin.clone();
            let (w, ok) = converge_once(&mut h, &desired);
            assert!(
                ok && w == REFERENCE_SPLIT_WRITES,
                "the reference split converges with its writes"
            );
            format!("{w} host writes")
        },
    );

    let mut converged = twin.clone();
    converge_once(&mut converged, &desired);
    bench("reconcile of the converged twin", 1000 * n, || {
        let (w, ok) = converge_once(&mut converged, &desired);
        assert!(ok && w == 0, "a converged host needs no write");
        "0 host writes".into()
    });

    let mut t = twin.clone();
    bench("observe the twin", 1000 * n, || {
        let s = t.observe().expect("observe");
        format!("{} PCI devices", s.pci_devices.len())
    });

    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/host/local/testdata/h200/root");
    let mut h200 = LocalHost::new(&root, "10de");
    h200.tools.nvidia_smi = "/nonexistent/nvidia-smi".into();
    bench(
        "observe the captured H200 host (local backend)",
        500 * n,
        || {
            let s = h200.observe().expect("observe");
            format!("{} GPUs", s.gpus("10de").count())
        },
    );

    // Issue 40: what a waiting agent pays every second to notice a GPU fault at once, and the
    // judgment of a GPU whose kernel log is full of Xids.
    let followed = h200.observe().expect("observe").gpus("10de").count();
    let first = h200.health_mark().expect("a mark");
    bench(
        "health mark of the captured H200 host (local backend)",
        1000 * n,
        || {
            let m = h200.health_mark().expect("a mark");
            assert_eq!(m, first, "nothing changed on a capture");
            format!("{followed} GPUs followed, the mark unchanged")
        },
    );
    let events: Vec<gpuplane::host::health::GpuEvent> = (0..gpuplane::host::health::EVENTS_MAX)
        .map(|i| gpuplane::host::health::GpuEvent {
            address: "0000:81:00.0".into(),
            xid: Some([13, 31, 48, 79, 94, 119][i % 6]),
            line: format!(
                "NVRM: Xid (PCI:0000:81:00): {}, pid={i}, name=python3, {}",
                [13, 31, 48, 79, 94, 119][i % 6],
                "x".repeat(180)
            ),
        })
        .collect();
    let sick = gpuplane::host::model::PciDevice {
        address: "0000:81:00.0".into(),
        ..Default::default()
    };
    let j = gpuplane::health::judge(&sick, &events);
    assert!(
        j.state == gpuplane_crds::GpuHealthState::Lost && j.evidence.len() == 6,
        "the judgment of {} events: {j:?}; no figure is printed",
        events.len()
    );
    bench(
        "judge a GPU with a full kernel log of Xids",
        10_000 * n,
        || {
            let j = gpuplane::health::judge(&sick, &events);
            format!(
                "{} events, {:?}, {} evidence lines",
                events.len(),
                j.state,
                j.evidence.len()
            )
        },
    );

    holder_scan(n);

    let observed = twin.clone().observe().expect("observe");
    for gpus in [8usize, 64, 512] {
        let (h, d) = scaled(&observed, &desired, gpus / 8);
        let steps = gpuplane::plan::plan(&d, &h).steps.len();
        assert!(
            h.gpus("10de").count() == gpus && steps > 0,
            "plan at {gpus} GPUs: {} GPUs seen and {steps} steps; the start state is not the hand-made one, no figure is printed",
            h.gpus("10de").count()
        );
        let iters = (4096 / gpus).max(20) * n;
        bench(&format!("plan at {gpus} GPUs"), iters, || {
            let p = gpuplane::plan::plan(&d, &h);
            format!(
                "{} GPUs seen, {} steps, {} blockers",
                h.gpus("10de").count(),
                p.steps.len(),
                p.blockers.len()
            )
        });
    }

    if !wanted("parse a") {
        return;
    }
    // A safetensors header near the format's limit (about 100 MB of JSON), parsed one entry at a time.
    // VmHWM (the peak resident set) is read before and after; the header's own bytes are
    // allocated before the first reading, so the growth is what parsing costs.
    let tensors = 880_000u64;
    let mut json = String::with_capacity(100_000_000);
    json.push('{');
    for i in 0..tensors {
        if i > 0 {
            json.push(',');
        }
        json.push_str(&format!(
            r#""model.layers.{i}.mlp.experts.weight":{{"dtype":"BF16","shape":[4096,1024],"data_offsets":[{},{}]}}"#,
            i * 8,
            i * 8 + 8
        ));
    }
    json.push('}');
    let hwm = || {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let before = hwm();
    let h = gpuplane::modelfiles::safetensors::parse_header(json.as_bytes()).unwrap();
    let grew = hwm().saturating_sub(before);
    assert!(
        h.tensors as u64 == tensors && h.data_end == tensors * 8,
        "the header parse counted {} tensors (want {tensors}); no figure is printed",
        h.tensors
    );
    bench(
        &format!("parse a {} MB safetensors header", json.len() / 1_000_000),
        3 * n,
        || {
            let h = gpuplane::modelfiles::safetensors::parse_header(json.as_bytes()).unwrap();
            format!(
                "{} tensors; peak memory grew {} MiB over the header's own bytes",
                h.tensors,
                grew / 1024
            )
        },
    );
}

/// Busy-host processes for the holder scan's figure: each a `sleep` holding `/dev/null` on
/// 67 descriptors (a serving host's processes hold hundreds: sockets, shared memory, the GPU's
/// nodes). Killed when dropped.
struct Busy(Vec<std::process::Child>);

const BUSY_PROCESSES: usize = 300;
const BUSY_FDS: usize = 67;

impl Busy {
    fn start() -> Busy {
        let children = (0..BUSY_PROCESSES)
            .map(|_| {
                std::process::Command::new("bash")
                    .args([
                        "-c",
                        "for i in {3..66}; do eval \"exec $i</dev/null\"; done; exec sleep 600",
                    ])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .expect("bash")
            })
            .collect();
        let busy = Busy(children);
        let ready = |c: &std::process::Child| {
            std::fs::read_dir(format!("/proc/{}/fd", c.id())).map_or(0, |d| d.count()) >= BUSY_FDS
                && std::fs::read_to_string(format!("/proc/{}/comm", c.id()))
                    .is_ok_and(|s| s.trim() == "sleep")
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !busy.0.iter().all(ready) {
            assert!(
                Instant::now() < deadline,
                "the busy processes did not start within 60 s; no figure is printed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        busy
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The holder scan (`/proc/*/fd` of every process, run in every observation and right before
/// every unbind) of this machine with [`BUSY_PROCESSES`] more processes, on one thread and split
/// over the CPUs; each checks that it found every busy process holding "the device".
fn holder_scan(n: usize) {
    use gpuplane::host::local::holders::{scan_nodes_using, Nodes};
    use gpuplane::host::local::Root;
    if !wanted("holder scan") {
        return;
    }
    let busy = Busy::start();
    let mut nodes = Nodes::default();
    nodes.paths.insert("/dev/null".into());
    let nodes = vec![("0000:01:00.0".to_string(), nodes)];
    let root = Root("/".into());
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
    for threads in [1, 8] {
        let name = format!(
            "holder scan of /proc, {BUSY_PROCESSES} busy processes × {BUSY_FDS} descriptors, {}",
            if threads == 1 {
                "1 thread".to_string()
            } else {
                format!("up to {threads} threads ({cpus} CPUs)")
            }
        );
        bench(&name, 20 * n, || {
            let found = scan_nodes_using(&root, &nodes, threads);
            let pids: std::collections::BTreeSet<u32> =
                found.values().flatten().map(|h| h.pid).collect();
            assert!(
                busy.0.iter().all(|c| pids.contains(&c.id())),
                "every busy process is found holding the node"
            );
            let procs = std::fs::read_dir("/proc").map_or(0, |d| d.count());
            format!("{} holders found, ~{procs} /proc entries", pids.len())
        });
    }
}
