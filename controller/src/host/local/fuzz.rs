//! Fuzzed parsers of host text (issue 13, item 4): every reader of the real host's text never
//! panics, whatever the file says.
//!
//! Each parser gets arbitrary text and text built from the tokens of its grammar (so that the
//! interesting branches are reached, not only the "no match" one): `/proc/cmdline`, kernel log
//! lines (IOMMU faults, default domain, SEV-SNP), `/proc/driver/nvidia/gpus/*/information`,
//! unit files read back,
//! `/proc/driver/nvidia/version`, `/proc/devices`, chunked HTTP bodies and whole HTTP answers
//! of SGLang's endpoints (over a loopback socket). Then whole fake host roots: random sysfs
//! values and links, `/proc/*/fd` targets, cgroups, DRM device numbers, Proxmox files and the
//! kernel log, observed by [`LocalHost`] end to end.
//!
//! Case counts are bounded for CI; `PROPTEST_CASES=N` runs each property N times (the long run
//! of `docs/RELIABILITY.md`).

use super::*;
use crate::testutil::noisy;
use proptest::prelude::*;

const CMDLINE: &[&str] = &[
    "iommu=",
    "intel_iommu=",
    "amd_iommu=",
    "amd_iommu=on",
    "iommu.",
    "pt",
    "on",
    "off",
    " ",
    "\t",
    "\n",
    "=",
    "BOOT_IMAGE=/vmlinuz",
    "quiet",
];

const KERNEL_LOG: &[&str] = &[
    "IO_PAGE_FAULT",
    "device=",
    "DMAR:",
    "Request device [",
    "]",
    "[",
    " ",
    "\n",
    "0000:",
    "01:00.0",
    "0000:81:00.0",
    "81:00.0:",
    "iommu: Default domain type: ",
    "Translated",
    "SEV-SNP",
    "enabled",
    "SNP: ",
    ":",
    ".",
    "é",
    "AMD-Vi: Event logged [",
    "vfio-pci ",
];

const NVIDIA_FILES: &[&str] = &[
    "Device Minor:",
    "Model:",
    " \t ",
    "0",
    "7",
    "4294967296",
    "-1",
    "\n",
    ":",
    "NVRM version:",
    "NVIDIA UNIX x86_64 Kernel Module",
    "Open Kernel Module for x86_64",
    " ",
    "580.159.04",
    "..",
    "Character devices:",
    "195 nvidia",
    "508 nvidia-uvm",
    "nvidia-uvm",
    "99999999999",
];

const UNIT_FILE: &[&str] = &[
    "[Unit]",
    "[Service]",
    "[Install]",
    "\n",
    "ExecStart=",
    "Environment=",
    "=",
    "\"",
    "'",
    "\\",
    "\\x",
    "\\x4",
    "\\u12",
    "\\U0010ffff",
    "\\n",
    "\\\n",
    "%",
    "%%",
    "$",
    "${",
    "}",
    " ",
    "\t",
    "#",
    ";",
    "-",
    "@",
    "+",
    "!",
    "/usr/bin/python3",
    "-m",
    "sglang.launch_server",
    "--tp-size",
    "4",
    "é",
    "\r",
];

const HTTP: &[&str] = &[
    "HTTP/1.1 ",
    "200",
    " OK",
    "503",
    "\r\n",
    "\r\n\r\n",
    "Transfer-Encoding: chunked",
    "Content-Type: application/json",
    "0",
    "1",
    "2",
    "a",
    "ff",
    "ffffffffffffffffffff",
    "é",
    "€",
    "{\"data\":[{\"id\":\"qwen\"}]}",
    "{\"tp_size\":4,\"speculative_algorithm\":null}",
    "x",
];

/// Chunked bodies: chunks of any text whose size line is the true byte count, or off by a few.
fn chunked() -> impl Strategy<Value = String> {
    let chunk = ("(?s).{0,12}", -2i64..=2, any::<bool>()).prop_map(|(data, off, exact)| {
        let n = if exact {
            data.len() as i64
        } else {
            (data.len() as i64 + off).max(0)
        };
        format!("{n:x}\r\n{data}\r\n")
    });
    prop::collection::vec(chunk, 0..6).prop_map(|c| c.concat() + "0\r\n\r\n")
}

/// A GET against a loopback server that answers `raw` and closes.
fn get_answer(raw: String) -> Result<(u16, String), String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            use std::io::{Read, Write};
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(raw.as_bytes());
        }
    });
    let r = crate::http::client::get("127.0.0.1", port, "/v1/models", Duration::from_secs(5))
        .map_err(|e| e.to_string());
    t.join().unwrap();
    r
}

/// Tokens of the health readers' texts (issue 40): the NVIDIA driver's Xid and fallen-off-the-bus
/// lines, `aer_dev_*` files, link speeds, `nvidia-smi`'s ECC answer.
const HEALTH_TEXT: &[&str] = &[
    "NVRM: Xid (PCI:",
    "0000:01:00",
    "0000:81:00.0",
    "00000000:81:00.0",
    " GPU-I:05",
    "): ",
    "79",
    "154",
    ", pid=1, ",
    "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
    "NVRM: The NVIDIA GPU ",
    "NVRM: GPU ",
    ": GPU has fallen off the bus.",
    "TOTAL_ERR_FATAL ",
    "Receiver Error ",
    "18446744073709551615",
    "99999999999999999999",
    " GT/s PCIe",
    "32.0",
    "2.5",
    ", ",
    "[N/A]",
    "Yes",
    "No",
    "\n",
    " ",
];

proptest! {
    #![proptest_config(crate::testutil::fuzz_config(2048))]

    /// The health readers take any text: no panic, every result bounded (issue 40).
    #[test]
    fn health_texts_never_panic(s in prop_oneof!["(?s).{0,300}", noisy(HEALTH_TEXT)]) {
        use crate::host::health::*;
        let ev = parse_gpu_events(&s);
        prop_assert!(ev.len() <= EVENTS_MAX && ev.iter().all(|e| e.line.len() <= LINE_MAX));
        prop_assert!(ev.iter().all(|e| e.address.len() == 12));
        if let Some(a) = aer_counts(Some(&s), Some(&s), Some(&s)) {
            prop_assert!(a.named.len() <= 3 * 32);
        }
        let _ = parse_link_speed(&s);
        let _ = link_state(Some(&s), Some(&s), Some(&s), Some(&s));
        prop_assert!(parse_ecc(&s).len() <= s.lines().count());
        let host = HostState { gpu_events: ev, ..Default::default() };
        let dev = crate::host::model::PciDevice { address: "0000:01:00.0".into(), ..Default::default() };
        let j = crate::health::judge(&dev, &host.gpu_events);
        prop_assert!(j.evidence.len() <= crate::health::EVIDENCE_MAX);
    }

    #[test]
    fn cmdline_never_panics(s in prop_oneof!["(?s).{0,200}", noisy(CMDLINE)]) {
        let o = iommu::cmdline_options(&s);
        iommu::cmdline_warnings(&o);
        prop_assert!(o.iter().all(|w| s.split_whitespace().any(|x| x == w)));
    }

    #[test]
    fn kernel_log_never_panics(s in prop_oneof!["(?s).{0,300}", noisy(KERNEL_LOG)]) {
        let mut st = crate::host::model::IommuState::default();
        iommu::parse_log(&s, &mut st);
        let faults: u32 = st.page_faults.values().sum();
        prop_assert!(faults as usize <= s.lines().count() * 2);
    }

    #[test]
    fn nvidia_proc_files_never_panic(s in prop_oneof!["(?s).{0,200}", noisy(NVIDIA_FILES)]) {
        pci::parse_minor(&s);
        module_version(&s);
        uvm_major(&s);
    }

    /// Unit files as read back from the host (`/etc/systemd/system/*.service`).
    #[test]
    fn unit_files_never_panic(s in prop_oneof!["(?s).{0,200}", noisy(UNIT_FILE)]) {
        let _ = crate::systemd::unit::parse(&s);
    }
}

proptest! {
    #![proptest_config(crate::testutil::fuzz_config(256))]

    #[test]
    fn http_answers_never_panic(raw in prop_oneof![
        "(?s).{0,200}",
        noisy(HTTP),
        chunked().prop_map(|b| format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{b}")),
    ]) {
        let _ = get_answer(raw);
    }
}

/// The files of one random fake host.
#[derive(Debug, Clone)]
struct RandomRoot {
    /// (absolute path, content) of regular files.
    files: Vec<(&'static str, String)>,
    /// (absolute path, target) of symbolic links.
    links: Vec<(&'static str, String)>,
}

/// Paths whose content is random, each with the grammar it is drawn from.
const FILES: &[(&str, &[&str])] = &[
    ("/proc/cmdline", CMDLINE),
    ("/dev/kmsg", KERNEL_LOG),
    ("/proc/devices", NVIDIA_FILES),
    ("/proc/driver/nvidia/version", NVIDIA_FILES),
    (
        "/proc/driver/nvidia/gpus/0000:01:00.0/information",
        NVIDIA_FILES,
    ),
    ("/sys/module/nvidia/version", NVIDIA_FILES),
    (
        "/sys/bus/pci/devices/0000:01:00.0/vendor",
        &["0x10de", "\n", "0x", "10DE", "zz"],
    ),
    (
        "/sys/bus/pci/devices/0000:01:00.0/class",
        &["0x030200", "0x", "03", "\n", "é"],
    ),
    (
        "/sys/bus/pci/devices/0000:01:00.0/device",
        &["0x2bb5", "\n", ""],
    ),
    (
        "/sys/bus/pci/devices/0000:01:00.0/subsystem_vendor",
        &["0x10de", "0x0000", "\n"],
    ),
    (
        "/sys/bus/pci/devices/0000:01:00.0/subsystem_device",
        &["0x204e", "0x0000", "\n"],
    ),
    (
        "/sys/bus/pci/devices/0000:01:00.0/numa_node",
        &["-1", "0", "1", "\n", "99999999999"],
    ),
    (
        "/sys/bus/pci/devices/0000:01:00.0/driver_override",
        &["(null)", "vfio-pci", "\n", ""],
    ),
    (
        "/sys/bus/pci/devices/0000:01:00.0/drm/card0/dev",
        &["226", ":", "0", "\n", "-1", "x"],
    ),
    (
        "/sys/kernel/iommu_groups/10/type",
        &["DMA-FQ", "identity", "DMA", "\n", "é"],
    ),
    ("/proc/4242/comm", &["python3", "\n", "é", "kvm"]),
    (
        "/proc/4242/cgroup",
        &[
            "0::/",
            "lxc/",
            "129",
            "/ns/",
            "lxc.payload.",
            "qemu.slice/",
            "200.scope",
            "system.slice/",
            "sglang.service",
            "\n",
            ":",
            "/",
            "x",
        ],
    ),
    (
        "/etc/pve/mapping/pci.cfg",
        &[
            "gpu\n",
            "\tmap ",
            "id=10de:2bb5,",
            "node=n,",
            "path=0000:01:00.0",
            ",iommugroup=10",
            "\n",
            "description x",
            "#",
            ";",
            "=",
        ],
    ),
    (
        "/etc/pve/qemu-server/200.conf",
        &[
            "hostpci0: ",
            "mapping=gpu",
            ",pcie=1",
            "\n",
            "[snap]",
            ":",
            ",",
        ],
    ),
];

/// Links whose target is random.
const LINKS: &[&str] = &[
    "/sys/bus/pci/devices/0000:01:00.0/iommu_group",
    "/sys/bus/pci/devices/0000:01:00.0/driver",
    "/proc/4242/fd/7",
    "/proc/4242/fd/8",
];

fn random_root() -> impl Strategy<Value = RandomRoot> {
    let files: Vec<_> = FILES
        .iter()
        .map(|(p, g)| prop_oneof![1 => "(?s).{0,60}", 3 => noisy(g)].prop_map(move |s| (*p, s)))
        .collect();
    let target = prop_oneof![
        "[^\u{0}]{1,40}",
        noisy(&[
            "../",
            "kernel/iommu_groups/",
            "10",
            "drivers/",
            "nvidia",
            "vfio-pci",
            "/dev/",
            "nvidia0",
            "dri/card0",
            "vfio/10",
            "é"
        ]),
    ]
    .prop_filter("a link needs a target", |t| {
        !t.is_empty() && !t.contains('\0')
    });
    let links = prop::collection::vec(target, LINKS.len())
        .prop_map(|ts| LINKS.iter().copied().zip(ts).collect::<Vec<_>>());
    (files, links).prop_map(|(files, links)| RandomRoot { files, links })
}

/// Writes `r` under a new temporary directory.
fn build(r: &RandomRoot) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for (p, s) in &r.files {
        let p = t.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    }
    for (p, target) in &r.links {
        let p = t.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }
    t
}

proptest! {
    #![proptest_config(crate::testutil::fuzz_config(128))]

    #[test]
    fn observing_a_random_host_never_panics(r in random_root()) {
        let t = build(&r);
        let mut h = LocalHost::new(t.path(), "10de");
        h.node_name = Some("n".into());
        h.tools.qm = "/nonexistent/qm".into();
        h.tools.pct = "/nonexistent/pct".into();
        h.tools.nvidia_smi = "/nonexistent/nvidia-smi".into();
        let _ = h.observe();
    }
}
