use super::*;

/// `aer_dev_fatal` as the kernel prints it (Documentation/ABI/testing/
/// sysfs-bus-pci-devices-aer_stats: `<Name> <count>` lines, the total last).
const FATAL: &str = "Undefined 0\nData Link Protocol 0\nSurprise Down Error 1\nPoisoned TLP 0\n\
Flow Control Protocol 0\nCompletion Timeout 0\nCompleter Abort 0\nUnexpected Completion 0\n\
Receiver Overflow 0\nMalformed TLP 0\nECRC 0\nUnsupported Request 0\nACS Violation 0\n\
Uncorrectable Internal Error 0\nMC Blocked TLP 0\nAtomicOp Egress Blocked 0\n\
TLP Prefix Blocked Error 0\nTOTAL_ERR_FATAL 1\n";
const CORRECTABLE: &str = "Receiver Error 2\nBad TLP 0\nBad DLLP 0\nRELAY_NUM Rollover 0\n\
Replay Timer Timeout 3\nAdvisory Non-Fatal 0\nCorrected Internal Error 0\n\
Header Log Overflow 0\nTOTAL_ERR_COR 5\n";

#[test]
fn aer_files_give_their_totals_and_the_counters_that_moved() {
    let a = aer_counts(
        Some(CORRECTABLE),
        Some("TOTAL_ERR_NONFATAL 0\n"),
        Some(FATAL),
    )
    .unwrap();
    assert_eq!((a.correctable, a.nonfatal, a.fatal), (5, 0, 1));
    let named: Vec<(&str, u64)> = a.named.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        named,
        [
            ("correctable: Receiver Error", 2),
            ("correctable: Replay Timer Timeout", 3),
            ("fatal: Surprise Down Error", 1)
        ]
    );
    // No file readable: no AER at all (not zeros); a file without its TOTAL line: the sum.
    assert_eq!(aer_counts(None, None, None), None);
    let sum = aer_counts(Some("Receiver Error 4\nBad TLP 1\n"), None, None).unwrap();
    assert_eq!(sum.correctable, 5);
    // Garbage and huge numbers neither panic nor count.
    let junk = aer_counts(
        Some("x\n\n 99999999999999999999999 \nBad TLP -1\n"),
        None,
        None,
    );
    assert_eq!(junk, None);
}

#[test]
fn link_speeds_in_every_spelling() {
    assert_eq!(parse_link_speed("32.0 GT/s PCIe\n"), Some(32000));
    assert_eq!(parse_link_speed("2.5 GT/s PCIe"), Some(2500));
    assert_eq!(parse_link_speed("8 GT/s"), Some(8000));
    assert_eq!(parse_link_speed("Unknown"), None);
    assert_eq!(parse_link_speed(""), None);
    let l = link_state(
        Some("2.5 GT/s PCIe"),
        Some("16.0 GT/s PCIe"),
        Some("8\n"),
        Some("16"),
    );
    assert_eq!(
        l,
        Some(LinkState {
            speed: 2500,
            max_speed: 16000,
            width: 8,
            max_width: 16
        })
    );
    assert_eq!(
        link_state(None, Some("16.0 GT/s PCIe"), Some("8"), Some("16")),
        None
    );
}

#[test]
fn xid_lines_name_the_gpu_function_zero() {
    let log = "\
[  123.456] NVRM: Xid (PCI:0000:C1:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
NVRM: GPU 0000:c1:00.0: GPU has fallen off the bus.
NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No
NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)
NVRM: The NVIDIA GPU 0000:03:00.0
NVRM: (PCI ID: 10de:2335) installed in this system has
NVRM: fallen off the bus and is not responding to commands.
NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04
NVRM: Xid (PCI:zz:01:00): 13, junk
NVRM: Xid (PCI:0000:01:00): , no number
";
    let ev = parse_gpu_events(log);
    let got: Vec<(&str, Option<u32>)> = ev.iter().map(|e| (e.address.as_str(), e.xid)).collect();
    assert_eq!(
        got,
        [
            ("0000:c1:00.0", Some(79)),
            ("0000:c1:00.0", None),
            ("0000:01:00.0", Some(94)),
            ("0000:02:00.0", Some(154)),
            ("0000:03:00.0", None),
        ]
    );
    assert!(
        ev[0].line.starts_with("[  123.456] NVRM: Xid"),
        "{:?}",
        ev[0].line
    );
}

#[test]
fn the_kernel_log_is_read_bounded() {
    let line = |i: u32| format!("NVRM: Xid (PCI:0000:01:00): {i}, {}\n", "x".repeat(10_000));
    let log: String = (0..EVENTS_MAX as u32 + 44).map(line).collect();
    let ev = parse_gpu_events(&log);
    assert_eq!(ev.len(), EVENTS_MAX);
    assert_eq!(ev[0].xid, Some(44), "the newest are kept");
    assert!(ev.iter().all(|e| e.line.len() <= LINE_MAX));
    // Control characters in a line do not reach the evidence.
    let ev = parse_gpu_events("NVRM: Xid (PCI:0000:01:00): 48, \u{1b}[31mred\u{7}\n");
    assert!(
        !ev[0].line.chars().any(|c| c.is_control()),
        "{:?}",
        ev[0].line
    );
}

#[test]
fn config_space_of_a_device_that_does_not_answer() {
    assert!(config_all_ones(&[0xff; 64]));
    assert!(!config_all_ones(&[0xde, 0x10, 0x35, 0x23]));
    assert!(!config_all_ones(&[0xff, 0xff]));
}

/// The H100 of the device machine, captured read-only (`testdata/h100/2026-12-05`): its link
/// files parse as the kernel wrote them, it has no AER files there (a Firecracker VM exposes
/// no AER capability), and the driver's lines of that boot hold no GPU event.
#[test]
fn the_captured_h100_reads_as_on_the_machine() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/host/local/testdata/h100/2026-12-05"
    );
    let dev = format!("{dir}/root/sys/devices/pci0000:00/0000:00:06.0");
    let r = |f: &str| std::fs::read_to_string(format!("{dev}/{f}")).ok();
    let link = link_state(
        r("current_link_speed").as_deref(),
        r("max_link_speed").as_deref(),
        r("current_link_width").as_deref(),
        r("max_link_width").as_deref(),
    );
    assert_eq!(
        link,
        Some(LinkState {
            speed: 32000,
            max_speed: 32000,
            width: 16,
            max_width: 16
        })
    );
    assert_eq!(
        aer_counts(r("aer_dev_correctable").as_deref(), None, None),
        None
    );
    let log = std::fs::read_to_string(format!("{dir}/cmd/kmsg-health.txt")).unwrap();
    assert!(log.contains("NVRM: loading NVIDIA UNIX Open Kernel Module"));
    assert_eq!(parse_gpu_events(&log), vec![]);
    let config = std::fs::read(format!("{dev}/config")).unwrap();
    assert!(!config_all_ones(&config));
}

/// `nvidia-smi --query-gpu=` [`ECC_QUERY`] as driver 580 answered it on the H100 (the capture's
/// first seven columns), and as boards without ECC or row remapping answer (`[N/A]`).
#[test]
fn ecc_counters_as_nvidia_smi_answers() {
    let got = parse_ecc("00000000:00:06.0, 0, 0, 0, 0, No, No\n");
    assert_eq!(
        got["0000:00:06.0"],
        EccCounters {
            uncorrected: Some(0),
            corrected: Some(0),
            remapped_correctable: Some(0),
            remapped_uncorrectable: Some(0),
            remap_pending: false,
            remap_failure: false,
        }
    );
    let got = parse_ecc(
        "00000000:81:00.0, 2, 17, 1, 1, Yes, No\n\
         00000000:82:00.0, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]\n\
         garbage\n00000000:zz:00.0, 1, 1, 1, 1, Yes, Yes\n",
    );
    assert_eq!(got.len(), 2, "{got:?}");
    let a = got["0000:81:00.0"];
    assert_eq!(
        (a.uncorrected, a.remap_pending, a.remap_failure),
        (Some(2), true, false)
    );
    assert_eq!(got["0000:82:00.0"], EccCounters::default());
}

/// Found by the fuzz (`host/local/fuzz.rs`): a domain cut mid-character, counters that would
/// overflow a sum.
#[test]
fn hostile_counts_and_ids_neither_panic_nor_wrap() {
    assert!(parse_ecc("aaa\u{e9}aaa:01:00.0, 1, 1, 1, 1, No, No\n").is_empty());
    let big = format!("Receiver Error {}\nBad TLP {}\n", u64::MAX, u64::MAX);
    assert_eq!(
        aer_counts(Some(&big), None, None).unwrap().correctable,
        u64::MAX
    );
}
