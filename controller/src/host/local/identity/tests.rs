use super::*;

/// A config space with two extended capabilities before the DSN (AER at 0x100, then a
/// vendor-specific one at 0x148), as a real GPU has them.
fn config_with_dsn(serial: u64) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    let put = |c: &mut Vec<u8>, at: usize, v: u32| c[at..at + 4].copy_from_slice(&v.to_le_bytes());
    put(&mut c, 0x100, 0x0001 | (1 << 16) | (0x148 << 20));
    put(&mut c, 0x148, 0x000b | (1 << 16) | (0x200 << 20));
    put(&mut c, 0x200, 0x0003 | (1 << 16));
    put(&mut c, 0x204, serial as u32);
    put(&mut c, 0x208, (serial >> 32) as u32);
    c
}

/// The H200 of the device machine: DSN 78-00-cf-5c-9c-2d-b0-48 as `lspci -vv` prints it.
#[test]
fn the_device_serial_number_is_found_down_the_capability_list() {
    let c = config_with_dsn(0x7800_cf5c_9c2d_b048);
    assert_eq!(
        device_serial_number(&c).as_deref(),
        Some("7800cf5c9c2db048")
    );
    assert_eq!(
        device_serial_number(&c[..256]),
        None,
        "only 256 bytes: not root"
    );
    let mut looped = config_with_dsn(1);
    looped[0x14a..0x14c].copy_from_slice(&((0x100u16) << 4).to_le_bytes());
    let _ = device_serial_number(&looped); // a loop ends, whatever it returns
    assert_eq!(device_serial_number(&[0u8; 4096]), None);
}

#[test]
fn slot_and_path_survive_renumbering() {
    let slots = vec![
        ("1".to_string(), "0000:01:00\n".to_string()),
        ("7".to_string(), "0000:81:00\n".to_string()),
    ];
    assert_eq!(slot_of("0000:81:00.0", &slots).as_deref(), Some("7"));
    assert_eq!(slot_of("0000:82:00.0", &slots), None);
    let before = topology_path("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0");
    let after = topology_path("../../../devices/pci0000:00/0000:00:01.0/0000:05:00.0");
    assert_eq!(before.as_deref(), Some("pci0000:00/01.0/00.0"));
    assert_eq!(before, after, "bus numbers are not part of the path");
}

#[test]
fn nvidia_smi_names_uuid_and_serial_by_sysfs_address() {
    let out = "00000000:C1:00.0, GPU-624a3d49-1111-2222-3333-444455556666, 1654924066922\n00000000:01:00.0, GPU-aaaa, [N/A]\ngarbage\n00000000:02:00.0, not-a-uuid, 1\n";
    let m = nvidia_smi_ids(out);
    assert_eq!(
        m["0000:c1:00.0"],
        (
            "GPU-624a3d49-1111-2222-3333-444455556666".to_string(),
            Some("1654924066922".to_string())
        )
    );
    assert_eq!(m["0000:01:00.0"].1, None);
    assert_eq!(m.len(), 2);
}

/// A bus id whose 8-byte domain would be cut mid-character is skipped, no panic (it panicked
/// before; found by the health readers' fuzz, whose parser of the same spelling had it too).
#[test]
fn a_bus_id_cut_mid_character_is_skipped() {
    let ids = nvidia_smi_ids("aaa\u{e9}aaa:01:00.0, GPU-6f2c1e00-5a3b-4c1d-9e8f-0a1b2c3d4e00, 1\n");
    assert!(ids.is_empty(), "{ids:?}");
}
