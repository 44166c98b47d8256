//! Tests of the editor and of `map` entries: the fixtures round-trip, PVE's view of them,
//! edits that touch only the requested node's lines and are idempotent (also as property
//! tests), and the checks of map entries.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::proxmox::lines::testing::{is_subsequence, lines};
use proptest::prelude::*;

const F101: &str = include_str!("testdata/pci-10-1b.cfg");
const F102: &str = include_str!("testdata/pci-10-2b.cfg");
const HAND: &str = include_str!("testdata/pci-hand-edited.cfg");

fn entry(node: &str, path: &str, group: u32) -> MapEntry {
    MapEntry {
        node: node.to_string(),
        id: "10de:2231".to_string(),
        paths: vec![path.to_string()],
        iommugroup: Some(group),
        subsystem_id: Some("10de:147e".to_string()),
        description: None,
    }
}

fn node_entries(cfg: &PciCfg, mapping: &str, node: &str) -> Vec<MapEntry> {
    cfg.mappings()
        .get(mapping)
        .map(|v| v.iter().filter(|e| e.node == node).cloned().collect())
        .unwrap_or_default()
}

#[test]
fn round_trip() {
    let crlf = F101.replace('\n', "\r\n");
    let no_nl = F102.trim_end_matches('\n');
    for t in [F101, F102, HAND, &crlf, no_nl, "", "\n", "x", " \t\n0\n#\n"] {
        assert_eq!(PciCfg::parse(t).render(), t);
    }
}

#[test]
fn mappings_of_examples() {
    let m = PciCfg::parse(F101).mappings();
    assert_eq!(m.len(), 2);
    assert_eq!(m["gpu-pool"].len(), 4);
    assert_eq!(m["gpu-pool"][1], entry("pve1", "0000:61:00.0", 15));
    assert_eq!(m["nic-vf"].len(), 3);

    let m = PciCfg::parse(F102).mappings();
    assert_eq!(m["rtx-full"][0].paths, vec!["0000:01:00"]);
    assert_eq!(
        m["dual-fpga"][0].paths,
        vec!["0000:c1:00.0", "0000:c2:00.0"]
    );
    assert_eq!(m["a16-vgpu"].len(), 2);

    // Hand-edited: comments anywhere, space indentation, any key order; invalid lines
    // (upper-case path, unknown key, map without value) are ignored like PVE does.
    let m = PciCfg::parse(HAND).mappings();
    assert_eq!(
        m["gpu-pool"],
        vec![
            entry("pve2", "0000:41:00.0", 22),
            entry("pve1", "0000:41:00.0", 14),
            entry("pve1", "0000:61:00.0", 15),
        ]
    );
    assert!(!m.contains_key("Bad!id"));
    assert!(!m.contains_key("empty-one"));
    assert_eq!(m["nic"].len(), 1);
}

#[test]
fn crlf_sections_merge_like_pve() {
    // In a CRLF file "\r" is not an empty line, so PVE never ends the first section.
    let crlf = F101.replace('\n', "\r\n");
    let mut cfg = PciCfg::parse(&crlf);
    let m = cfg.mappings();
    assert_eq!(m.keys().collect::<Vec<_>>(), ["gpu-pool"]);
    assert_eq!(m["gpu-pool"].len(), 7);
    // A new section is appended with LF and a real empty line, so PVE sees it separately.
    let e = entry("pve1", "0000:01:00.0", 1);
    assert!(cfg.set_node_entries("new-gpu", "pve1", std::slice::from_ref(&e)));
    assert!(cfg.render().starts_with(&crlf));
    assert_eq!(cfg.mappings()["new-gpu"], vec![e.clone()]);
    assert!(!cfg.set_node_entries("new-gpu", "pve1", &[e]));
    // Editing inside a CRLF section keeps CRLF.
    let mut cfg = PciCfg::parse(&crlf);
    cfg.set_node_entries(
        "gpu-pool",
        "pve1",
        &[
            entry("pve1", "0000:41:00.0", 14),
            entry("pve1", "0000:81:00.0", 16),
        ],
    );
    assert!(cfg.render().contains(
        "\tmap id=10de:2231,iommugroup=16,node=pve1,path=0000:81:00.0,subsystem-id=10de:147e\r\n"
    ));
}

#[test]
fn unchanged_when_equal_in_any_key_order() {
    let mut cfg = PciCfg::parse(HAND);
    let want = node_entries(&cfg, "gpu-pool", "pve1");
    assert!(!cfg.set_node_entries("gpu-pool", "pve1", &want));
    assert_eq!(cfg.render(), HAND);
    assert!(!cfg.set_node_entries("missing", "pve1", &[]));
    assert!(!cfg.set_node_entries("gpu-pool", "pve9", &[]));
    assert_eq!(cfg.render(), HAND);
}

#[test]
fn remove_one_entry_changes_only_that_line() {
    let mut cfg = PciCfg::parse(F101);
    assert!(cfg.set_node_entries("gpu-pool", "pve1", &[entry("pve1", "0000:41:00.0", 14)]));
    let expected = F101.replace(
        "\tmap id=10de:2231,iommugroup=15,node=pve1,path=0000:61:00.0,subsystem-id=10de:147e\n",
        "",
    );
    assert_eq!(cfg.render(), expected);
    assert!(!cfg.set_node_entries("gpu-pool", "pve1", &[entry("pve1", "0000:41:00.0", 14)]));
}

#[test]
fn add_and_reorder_entries() {
    let mut cfg = PciCfg::parse(F101);
    let a = entry("pve1", "0000:41:00.0", 14);
    let b = entry("pve1", "0000:61:00.0", 15);
    let c = entry("pve1", "0000:81:00.0", 16);
    assert!(cfg.set_node_entries("gpu-pool", "pve1", &[a.clone(), b.clone(), c.clone()]));
    let new_line =
        "\tmap id=10de:2231,iommugroup=16,node=pve1,path=0000:81:00.0,subsystem-id=10de:147e\n";
    let expected = F101.replace(
        "path=0000:61:00.0,subsystem-id=10de:147e\n",
        &format!("path=0000:61:00.0,subsystem-id=10de:147e\n{new_line}"),
    );
    assert_eq!(cfg.render(), expected);
    assert_eq!(
        node_entries(&cfg, "gpu-pool", "pve1"),
        [a.clone(), b.clone(), c.clone()]
    );

    // Order matters (alternatives are tried in order): c first.
    assert!(cfg.set_node_entries("gpu-pool", "pve1", &[c.clone(), a.clone(), b.clone()]));
    assert_eq!(
        node_entries(&cfg, "gpu-pool", "pve1"),
        [c.clone(), a.clone(), b.clone()]
    );
    assert!(!cfg.set_node_entries("gpu-pool", "pve1", &[c, a, b]));
    assert_eq!(node_entries(&cfg, "gpu-pool", "pve2").len(), 2);

    // Node with no lines yet: after the section's last map line, before description.
    let mut cfg = PciCfg::parse(F101);
    let d = entry("pve3", "0000:01:00.0", 3);
    assert!(cfg.set_node_entries("gpu-pool", "pve3", std::slice::from_ref(&d)));
    assert!(cfg.render().contains(
        "path=0000:c1:00.0,subsystem-id=10de:147e\n\tmap id=10de:2231,iommugroup=3,node=pve3,path=0000:01:00.0,subsystem-id=10de:147e\n\tdescription Compute GPUs"
    ));
}

#[test]
fn hand_edited_file_keeps_comments_and_spacing() {
    let mut cfg = PciCfg::parse(HAND);
    let want = [entry("pve1", "0000:61:00.0", 15)];
    assert!(cfg.set_node_entries("gpu-pool", "pve1", &want));
    let out = cfg.render();
    let removed: Vec<&str> = lines(HAND)
        .into_iter()
        .filter(|l| !lines(&out).contains(l))
        .collect();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert!(removed[0].contains("node=pve1") && removed[0].contains("0000:41:00.0"));
    assert_eq!(lines(&out).len(), lines(HAND).len() - 1);
    assert_eq!(node_entries(&cfg, "gpu-pool", "pve1"), want);
    assert_eq!(node_entries(&cfg, "gpu-pool", "pve2").len(), 1);
}

#[test]
fn removing_all_entries_removes_only_the_section() {
    let mut cfg = PciCfg::parse(F101);
    assert!(cfg.set_node_entries("gpu-pool", "pve1", &[]));
    assert!(cfg.set_node_entries("gpu-pool", "pve2", &[]));
    let nic = &F101[F101.find("nic-vf").unwrap_or(0)..];
    assert_eq!(cfg.render(), nic);
    assert!(!cfg.set_node_entries("gpu-pool", "pve2", &[]));

    let mut cfg = PciCfg::parse(F102);
    assert!(cfg.set_node_entries("a16-vgpu", "pve3", &[]));
    let start = F102.find("a16-vgpu").unwrap_or(0);
    let end = F102.find("dual-fpga").unwrap_or(0);
    assert_eq!(cfg.render(), format!("{}{}", &F102[..start], &F102[end..]));

    // Last section without a terminating empty line and a comment above the header.
    let text = "a1\n\tmap id=10de:2231,node=pve1,path=0000:01:00.0\n\n# my gpus\nb1\n\tmap id=10de:2231,node=pve1,path=0000:02:00.0";
    let mut cfg = PciCfg::parse(text);
    assert!(cfg.set_node_entries("b1", "pve1", &[]));
    assert_eq!(
        cfg.render(),
        "a1\n\tmap id=10de:2231,node=pve1,path=0000:01:00.0\n\n# my gpus\n"
    );
}

#[test]
fn new_section_is_canonical() {
    let e = MapEntry {
        node: "pve1".into(),
        id: "10de:2bb5".into(),
        paths: vec!["0000:81:00.0".into()],
        iommugroup: Some(40),
        subsystem_id: Some("10de:204e".into()),
        description: Some("slot 3".into()),
    };
    let line = "\tmap description=slot 3,id=10de:2bb5,iommugroup=40,node=pve1,path=0000:81:00.0,subsystem-id=10de:204e\n";
    for (before, sep) in [
        (F101, ""),
        (F101.trim_end_matches('\n'), "\n\n"),
        ("", ""),
        ("# c", "\n\n"),
    ] {
        let mut cfg = PciCfg::parse(before);
        assert!(cfg.set_node_entries("gpuplane-h200", "pve1", std::slice::from_ref(&e)));
        assert_eq!(
            cfg.render(),
            format!("{before}{sep}gpuplane-h200\n{line}\n")
        );
        assert_eq!(cfg.mappings()["gpuplane-h200"], vec![e.clone()]);
        assert!(!cfg.set_node_entries("gpuplane-h200", "pve1", std::slice::from_ref(&e)));
    }
}

#[test]
fn map_entry_parse_and_print() {
    let s = "node=pve1,path=0000:01:00.0;0000:01:00.1,id=10DE:2231, ,description=a b=c";
    let e = MapEntry::parse(s).expect("valid");
    assert_eq!(e.paths.len(), 2);
    assert_eq!(e.id, "10DE:2231");
    assert_eq!(
        e.to_property_string(),
        "description=a b=c,id=10DE:2231,node=pve1,path=0000:01:00.0;0000:01:00.1"
    );
    assert_eq!(e.validate(), Ok(()));
    let cases: [(&str, PciCfgError); 8] = [
        ("node=a,id=10de:2231", PciCfgError::MissingKey("path")),
        (
            "id=10de:2231,path=0000:01:00",
            PciCfgError::MissingKey("node"),
        ),
        ("node=a,path=0000:01:00", PciCfgError::MissingKey("id")),
        ("node=a,node=b", PciCfgError::DuplicateKey("node".into())),
        ("node=a,mdev=1", PciCfgError::UnknownKey("mdev".into())),
        ("pve1", PciCfgError::ValueWithoutKey("pve1".into())),
        ("node=", PciCfgError::EmptyKeyOrValue("node=".into())),
        (" node=a", PciCfgError::UnknownKey(" node".into())),
    ];
    for (s, err) in cases {
        assert_eq!(MapEntry::parse(s), Err(err), "{s}");
    }
    for bad in [
        "node=a,id=10de:22311,path=0000:01:00",
        "node=-a,id=10de:2231,path=0000:01:00",
        "node=a,id=10de:2231,path=0000:0A:00",
        "node=a,id=10de:2231,path=01:00.0",
        "node=a,id=10de:2231,path=0000:01:00.0;",
        "node=a,id=10de:2231,path=0000:01:00.10",
        "node=a,id=10de:2231,path=0000:01:00,iommugroup=-1",
        "node=a,id=10de:2231,path=0000:01:00,subsystem-id=xyz",
    ] {
        let r = MapEntry::parse(bad);
        assert!(
            matches!(r, Err(PciCfgError::InvalidValue { .. })),
            "{bad}: {r:?}"
        );
        assert!(r
            .err()
            .is_some_and(|e| e.to_string().contains("invalid value")));
    }
    let mut bad = e.clone();
    bad.description = Some("a,b".into());
    assert!(bad.validate().is_err());
}

#[test]
fn try_set_checks_preconditions() {
    let mut cfg = PciCfg::parse(F101);
    let e = entry("pve1", "0000:01:00.0", 1);
    assert_eq!(
        cfg.try_set_node_entries("9bad", "pve1", std::slice::from_ref(&e)),
        Err(PciCfgError::InvalidMappingId("9bad".into()))
    );
    assert!(matches!(
        cfg.try_set_node_entries("gpu-pool", "pve2", std::slice::from_ref(&e)),
        Err(PciCfgError::NodeMismatch { .. })
    ));
    assert_eq!(cfg.render(), F101);
    assert_eq!(cfg.try_set_node_entries("gpu-pool", "pve1", &[e]), Ok(true));
}

// ---- property tests ----

fn gen_entry(node: &'static str) -> impl Strategy<Value = MapEntry> {
    (
        0u8..6,
        0u32..4,
        any::<bool>(),
        prop::option::of("[a-z ]{1,8}"),
    )
        .prop_map(move |(bus, g, sub, d)| MapEntry {
            node: node.to_string(),
            id: "10de:2231".to_string(),
            paths: vec![format!("0000:{bus:02x}:00.0")],
            iommugroup: Some(g),
            subsystem_id: sub.then(|| "10de:147e".to_string()),
            description: d,
        })
}

fn any_node_entry() -> impl Strategy<Value = MapEntry> {
    prop_oneof![gen_entry("pve1"), gen_entry("pve2"), gen_entry("pve3")]
}

/// A map line with shuffled key order and varied indentation.
fn map_line(e: MapEntry) -> impl Strategy<Value = String> {
    let parts: Vec<String> = e
        .to_property_string()
        .split(',')
        .map(str::to_string)
        .collect();
    (
        Just(parts).prop_shuffle(),
        prop::sample::select(vec!["\t", " ", "  ", "\t "]),
        prop::sample::select(vec!["", " ", "\t"]),
    )
        .prop_map(|(p, ind, trail)| format!("{ind}map {}{trail}", p.join(",")))
}

fn body_line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any_node_entry().prop_flat_map(map_line),
        1 => prop::sample::select(vec![
            "\tdescription some GPUs",
            "\tmdev 1",
            "\tlive-migration-capable 0",
            "# comment in section",
            "   # indented comment",
            "\tmap node=pve1,id=10DE:xyz,path=0000:01:00.0",
            "\tmap",
            "\tbogus 1",
            " ",
        ]).prop_map(str::to_string),
    ]
}

fn gen_cfg() -> impl Strategy<Value = String> {
    let section = (
        prop::sample::select(vec!["gpu-pool", "nic-vf", "a16", "Bad!id"]),
        prop::collection::vec(body_line(), 0..6),
        prop::sample::select(vec!["", "# top comment\n", "\n"]),
    )
        .prop_map(|(id, body, pre)| {
            let mut s = format!("{pre}{id}\n");
            for l in body {
                s.push_str(&l);
                s.push('\n');
            }
            s.push('\n');
            s
        });
    (prop::collection::vec(section, 0..4), any::<bool>()).prop_map(|(secs, trim)| {
        let s = secs.concat();
        if trim {
            s.trim_end_matches('\n').to_string()
        } else {
            s
        }
    })
}

/// Words of `pci.cfg`, for fuzz input that reaches the section and entry branches.
const PCI_WORDS: &[&str] = &[
    "gpu-pool",
    "new-map",
    "\n",
    "\tmap ",
    " map ",
    "map",
    "id=10de:2bb5",
    "id=10de:2231",
    ",",
    "node=pve1",
    "node=pve2",
    "path=0000:01:00.0",
    "path=0000:01:00.0;0000:02:00.0",
    "iommugroup=10",
    "iommugroup=x",
    "subsystem-id=10de:204e",
    "description ",
    "mdev=1",
    "#",
    " ",
    "\t",
    "\r\n",
    "\r",
    "=",
    "é",
    ":",
];

proptest! {
    #![proptest_config(crate::testutil::fuzz_config(2048))]

    #[test]
    fn prop_round_trip_any_string(s in "(?s).{0,200}") {
        prop_assert_eq!(PciCfg::parse(&s).render(), s);
    }

    /// Any text, also text made of the file's own words: it renders back byte for byte, reading
    /// its mappings and map entries never panics, an edit never panics, and an edit of the
    /// edited file changes nothing.
    #[test]
    fn prop_any_text_edits_without_panic_and_settles(
        s in prop_oneof!["(?s).{0,200}", crate::testutil::noisy(PCI_WORDS)],
        mapping in prop::sample::select(vec!["gpu-pool", "new-map"]),
        wanted in prop::collection::vec(gen_entry("pve1"), 0..3),
    ) {
        prop_assert_eq!(PciCfg::parse(&s).render(), s.clone());
        for l in s.lines() {
            let _ = MapEntry::parse(l.trim_start().trim_start_matches("map").trim());
        }
        let mut cfg = PciCfg::parse(&s);
        cfg.mappings();
        if cfg.try_set_node_entries(mapping, "pve1", &wanted).is_ok() {
            let out = cfg.render();
            prop_assert_eq!(PciCfg::parse(&out).render(), out.clone());
            let mut again = PciCfg::parse(&out);
            prop_assert_eq!(again.try_set_node_entries(mapping, "pve1", &wanted), Ok(false), "{:?}", out);
        }
    }

    #[test]
    fn prop_set_node_entries(
        text in gen_cfg(),
        mapping in prop::sample::select(vec!["gpu-pool", "nic-vf", "a16", "new-map"]),
        node in prop::sample::select(vec!["pve1", "pve2"]),
        wanted in prop::collection::vec(any_node_entry(), 0..4),
    ) {
        prop_assert_eq!(PciCfg::parse(&text).render(), text.clone());
        let wanted: Vec<MapEntry> = wanted.into_iter().map(|mut e| { e.node = node.to_string(); e }).collect();
        let mut cfg = PciCfg::parse(&text);
        let before = cfg.mappings();
        let spans = cfg.spans();
        let target = spans.iter().rev().find(|s| s.id == mapping).cloned();
        cfg.set_node_entries(mapping, node, &wanted);
        let out = cfg.render();
        let after = cfg.mappings();

        // The node's entries are exactly `wanted`; everything else PVE sees is unchanged.
        let got: Vec<MapEntry> = after.get(mapping).map(|v| v.iter().filter(|e| e.node == node).cloned().collect()).unwrap_or_default();
        prop_assert_eq!(&got, &wanted);
        let others = |m: &BTreeMap<String, Vec<MapEntry>>| -> BTreeMap<String, Vec<MapEntry>> {
            m.iter()
                .map(|(k, v)| (k.clone(), v.iter().filter(|e| k != mapping || e.node != node).cloned().collect::<Vec<_>>()))
                .filter(|(_, v)| !v.is_empty())
                .collect()
        };
        prop_assert_eq!(others(&before), others(&after));

        // Foreign lines are an identical subsequence (minus the section when it was removed).
        let old = PciCfg::parse(&text);
        let mut skip: BTreeSet<usize> = BTreeSet::new();
        if let Some(span) = &target {
            skip.extend(old.map_lines(span).into_iter().filter(|m| m.entry.node == node).map(|m| m.idx));
            if !after.contains_key(mapping) {
                for s in spans.iter().filter(|s| s.id == mapping) {
                    skip.extend(s.header..=s.end);
                }
            }
        }
        let old_lines = lines(&text);
        let foreign: Vec<&str> = old_lines.iter().enumerate().filter(|(i, _)| !skip.contains(i)).map(|(_, l)| *l).collect();
        prop_assert!(is_subsequence(&foreign, &lines(&out)), "{}\n---\n{}", text, out);

        // Idempotent.
        prop_assert!(!cfg.set_node_entries(mapping, node, &wanted));
        prop_assert_eq!(cfg.render(), out);
    }
}
