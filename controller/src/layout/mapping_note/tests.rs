use super::*;
use crate::proxmox::pci_cfg::MapEntry;

fn id(
    serial: Option<&str>,
    uuid: Option<&str>,
    dsn: Option<&str>,
    slot: Option<&str>,
) -> GpuIdentity {
    GpuIdentity {
        serial: serial.map(String::from),
        uuid: uuid.map(String::from),
        dsn: dsn.map(String::from),
        slot: slot.map(String::from),
        path: Some("pci0000:00/01.0/00.0".into()),
    }
}

#[test]
fn the_description_names_what_is_known_and_reads_back() {
    // The H200 of the device machine: no slot (a VM), UUID and serial from nvidia-smi.
    let h200 = id(
        Some("1653924120637"),
        Some("GPU-1bdd772b-3995-67fb-90f1-f2bac40700af"),
        Some("86b08cdcf52db048"),
        None,
    );
    let d = describe(&h200).unwrap();
    assert_eq!(
        d,
        "gpuplane serial=1653924120637 uuid=GPU-1bdd772b-3995-67fb-90f1-f2bac40700af dsn=86b08cdcf52db048"
    );
    let back = parse(&d).unwrap();
    assert_eq!(back.serial, h200.serial);
    assert_eq!(back.uuid, h200.uuid);
    assert_eq!(back.dsn, h200.dsn);
    assert_eq!(
        back.path, None,
        "the path is not written: it is where, not who"
    );
}

#[test]
fn the_description_survives_a_proxmox_property_string() {
    let d = describe(&id(
        Some("1654924066922"),
        None,
        Some("7800cf5c9c2db048"),
        Some("5"),
    ))
    .unwrap();
    let e = MapEntry {
        node: "kpro6".into(),
        id: "10de:2bb5".into(),
        paths: vec!["0000:81:00.0".into()],
        iommugroup: Some(40),
        subsystem_id: Some("10de:204e".into()),
        description: Some(d.clone()),
    };
    e.validate().expect("Proxmox's grammar keeps it as written");
    assert_eq!(parse(&d).unwrap().slot.as_deref(), Some("5"));
}

#[test]
fn host_text_that_is_no_plain_token_is_left_out() {
    // A slot name is the platform's text: a comma would end the property, a space a word.
    let d = describe(&id(
        None,
        None,
        Some("7800cf5c9c2db048"),
        Some("PCIe Slot 5,x16"),
    ))
    .unwrap();
    assert_eq!(d, "gpuplane dsn=7800cf5c9c2db048");
    assert_eq!(describe(&GpuIdentity::default()), None);
    let long = "a".repeat(65);
    assert_eq!(describe(&id(Some(&long), None, None, None)), None);
}

#[test]
fn a_persons_description_is_not_identity() {
    assert_eq!(parse("Compute GPUs, 2 per node"), None);
    assert_eq!(parse("slot 3"), None);
    assert_eq!(parse(""), None);
    // Ours, edited: unknown and malformed words are ignored, the rest still reads.
    let p = parse("gpuplane serial=1 colour=red dsn uuid=GPU-x,y slot=").unwrap();
    assert_eq!(p.serial.as_deref(), Some("1"));
    assert_eq!((p.uuid, p.dsn, p.slot), (None, None, None));
}

#[test]
fn a_contradiction_needs_a_fact_both_sides_know() {
    let named = id(
        Some("111"),
        Some("GPU-aaaa"),
        Some("00000000000000aa"),
        Some("5"),
    );
    // The same GPU on vfio-pci: no UUID or serial readable now, the DSN agrees.
    let same_on_vfio = id(None, None, Some("00000000000000AA"), Some("5"));
    assert_eq!(contradiction(&named, &same_on_vfio), None);
    // Another GPU in the same slot (replaced in place): its DSN differs.
    let replaced = id(None, None, Some("00000000000000bb"), Some("5"));
    assert_eq!(
        contradiction(&named, &replaced).as_deref(),
        Some("dsn 00000000000000aa → 00000000000000bb")
    );
    // Another GPU on nvidia: the serial tells first.
    let other = id(Some("222"), Some("GPU-bbbb"), None, None);
    assert_eq!(
        contradiction(&named, &other).as_deref(),
        Some("serial 111 → 222")
    );
    // Nothing of its identity readable now, in the same slot: no verdict.
    assert_eq!(
        contradiction(&named, &id(None, None, None, Some("5"))),
        None
    );
    // A different slot is a move, not another GPU, when an identity agrees.
    let moved = id(Some("111"), None, None, Some("9"));
    assert_eq!(contradiction(&named, &moved), None);
}

#[test]
fn with_no_identity_on_either_side_the_slot_decides() {
    // The qemu host's stand-in GPUs: no serial number capability, no NVML; slots only.
    let named = id(None, None, None, Some("111"));
    assert_eq!(
        contradiction(&named, &id(None, None, None, Some("111"))),
        None
    );
    assert_eq!(
        contradiction(&named, &id(None, None, None, Some("101"))).as_deref(),
        Some("slot 111 → 101")
    );
    assert_eq!(
        contradiction(&named, &id(None, None, None, None)).as_deref(),
        Some("slot 111 → none")
    );
    // Named without a slot (a VM host): nothing to judge by.
    assert_eq!(
        contradiction(
            &id(None, None, None, None),
            &id(None, None, None, Some("5"))
        ),
        None
    );
    // An identity on one side only is no comparison: the slot still decides.
    let named = id(None, None, Some("00000000000000aa"), Some("5"));
    assert_eq!(
        contradiction(&named, &id(None, None, None, Some("6"))).as_deref(),
        Some("slot 5 → 6")
    );
}
