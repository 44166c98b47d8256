use super::*;
use std::collections::BTreeMap;

/// Files in memory, under one directory.
#[derive(Default)]
struct Mem(BTreeMap<String, Vec<u8>>);

impl Mem {
    fn put(&mut self, name: &str, bytes: Vec<u8>) {
        self.0.insert(format!("/m/{name}"), bytes);
    }
    fn entries(&self) -> Vec<Entry> {
        self.0
            .iter()
            .map(|(p, b)| Entry {
                name: p.trim_start_matches("/m/").to_string(),
                size: b.len() as u64,
                mtime: "0".into(),
                is_file: true,
            })
            .collect()
    }
}

impl Target for Mem {
    fn list(&self, _: &str) -> Result<Vec<Entry>, String> {
        Ok(self.entries())
    }
    fn read(&self, path: &str, offset: u64, max: u64) -> Result<Vec<u8>, String> {
        let b = self.0.get(path).ok_or("missing")?;
        let s = (offset as usize).min(b.len());
        let e = (s + max as usize).min(b.len());
        Ok(b[s..e].to_vec())
    }
    fn exists(&self, path: &str) -> bool {
        self.0.contains_key(path)
    }
    fn resolve(&self, path: &str) -> Result<String, String> {
        Ok(path.to_string())
    }
}

fn shard(data: u64) -> Vec<u8> {
    let mut b = safetensors::shard_bytes_header("w", data);
    b.resize(b.len() + data as usize, 7);
    b
}

/// A complete two-shard model of 100 + 50 bytes of tensors.
fn model() -> Mem {
    let mut m = Mem::default();
    m.put(
        "config.json",
        br#"{"architectures":["Qwen3_5MoeForConditionalGeneration"],"text_config":{"num_attention_heads":32,"num_key_value_heads":2,"mtp_num_hidden_layers":1}}"#.to_vec(),
    );
    m.put(
        "model.safetensors.index.json",
        br#"{"metadata":{"total_size":150},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors","c":"s1.safetensors"}}"#.to_vec(),
    );
    m.put("s1.safetensors", shard(100));
    m.put("s2.safetensors", shard(50));
    m
}

fn check(m: &Mem) -> DirFacts {
    inspect(m, "/m", &m.entries())
}

#[test]
fn a_complete_model_has_no_problems_and_its_weights_counted() {
    let f = check(&model());
    assert_eq!(f.problems, Vec::<String>::new());
    assert_eq!((f.weight_bytes, f.shards), (150, 2));
    assert_eq!(f.config.num_attention_heads, Some(32));
    assert_eq!(f.config.num_key_value_heads, Some(2));
    assert_eq!(f.config.mtp.as_deref(), Some("mtp_num_hidden_layers=1"));
}

#[test]
fn a_truncated_shard_is_named_with_its_numbers() {
    let mut m = model();
    let s = m.0.get_mut("/m/s2.safetensors").unwrap();
    let full = s.len();
    s.truncate(full - 10);
    let f = check(&m);
    assert_eq!(f.problems.len(), 1, "{:?}", f.problems);
    let p = &f.problems[0];
    assert!(p.starts_with("/m/s2.safetensors: "), "{p}");
    assert!(
        p.contains(&format!("{} bytes", full - 10)) && p.contains(&format!("declares {full}")),
        "{p}"
    );
    assert!(p.contains("truncated"), "{p}");
}

#[test]
fn a_shard_cut_inside_its_header_is_caught() {
    let mut m = model();
    m.0.get_mut("/m/s1.safetensors").unwrap().truncate(20);
    let f = check(&m);
    assert!(
        f.problems[0].contains("header alone declares"),
        "{:?}",
        f.problems
    );
}

#[test]
fn a_missing_shard_and_a_missing_config_are_named() {
    let mut m = model();
    m.0.remove("/m/s1.safetensors");
    m.0.remove("/m/config.json");
    let f = check(&m);
    assert!(
        f.problems
            .iter()
            .any(|p| p.starts_with("/m/config.json: missing")),
        "{:?}",
        f.problems
    );
    assert!(
        f.problems
            .iter()
            .any(|p| p == "/m/s1.safetensors: missing (named in weight_map)"),
        "{:?}",
        f.problems
    );
}

#[test]
fn total_size_must_match_the_shards() {
    let mut m = model();
    m.put(
        "model.safetensors.index.json",
        br#"{"metadata":{"total_size":151},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}"#.to_vec(),
    );
    let f = check(&m);
    assert!(
        f.problems[0].contains("total_size 151, but the shards hold 150"),
        "{:?}",
        f.problems
    );
}

#[test]
fn weight_map_names_outside_the_directory_are_never_opened() {
    let mut m = model();
    m.put(
        "model.safetensors.index.json",
        br#"{"weight_map":{"a":"../etc/shadow","b":"s2.safetensors"}}"#.to_vec(),
    );
    m.0.insert("/etc/shadow".into(), shard(1));
    let f = check(&m);
    assert!(
        f.problems
            .iter()
            .any(|p| p.contains("not a file of the model directory")),
        "{:?}",
        f.problems
    );
    assert_eq!(f.shards, 1);
}

#[test]
fn hostile_headers_are_refused_without_panicking() {
    for bytes in [
        vec![],
        vec![1, 2, 3],
        u64::MAX.to_le_bytes().to_vec(),
        [&10u64.to_le_bytes()[..], b"not json!!"].concat(),
        [&2u64.to_le_bytes()[..], b"[]"].concat(),
        [
            &40u64.to_le_bytes()[..],
            br#"{"t":{"data_offsets":[9,3]}}         "#,
        ]
        .concat(),
    ] {
        let mut m = model();
        m.put("s1.safetensors", bytes);
        let f = check(&m);
        assert!(
            f.problems
                .iter()
                .any(|p| p.starts_with("/m/s1.safetensors")),
            "{:?}",
            f.problems
        );
    }
}

#[test]
fn mtp_is_absent_when_the_config_declares_none_or_zero() {
    for cfg in [
        r#"{"num_attention_heads": 8}"#,
        r#"{"num_nextn_predict_layers": 0}"#,
        r#"{"text_config": {"mtp_num_hidden_layers": 0}}"#,
    ] {
        let v: serde_json::Value = serde_json::from_str(cfg).unwrap();
        assert_eq!(ConfigFacts::from_json(&v).mtp, None, "{cfg}");
    }
    let v: serde_json::Value = serde_json::from_str(r#"{"num_nextn_predict_layers": 1}"#).unwrap();
    assert_eq!(
        ConfigFacts::from_json(&v).mtp.as_deref(),
        Some("num_nextn_predict_layers=1")
    );
}

proptest::proptest! {
    #[test]
    fn any_shard_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        let mut m = model();
        m.put("s1.safetensors", bytes);
        let _ = check(&m);
    }
}

/// Issue 23: a shard may be anything a link points at; its first bytes never come back in a
/// message (they were echoed as the "header length").
#[test]
fn a_files_first_bytes_are_never_echoed() {
    for first in [
        *b"root:$y$",
        *b"\xff\xff\xff\xff\xff\xff\xff\x7f",
        [1, 0, 0, 0, 0, 0, 0, 0],
    ] {
        let e = crate::modelfiles::safetensors::header_len(&first).unwrap_err();
        let n = u64::from_le_bytes(first).to_string();
        assert!(!e.contains(&n), "{e} echoes {n}");
        assert!(!e.contains("root"), "{e}");
    }
}

/// The header is read one entry at a time: every tensor is counted and checked as before,
/// skipped fields (`dtype`, `shape`, `__metadata__`) of any shape are not kept, and the first
/// problem is named.
#[test]
fn a_streamed_header_counts_and_checks_every_tensor() {
    use crate::modelfiles::safetensors::parse_header;
    let mut json =
        String::from(r#"{"__metadata__":{"format":"pt","nested":{"a":[1,2,{"b":null}]}}"#);
    for i in 0..20_000u64 {
        json.push_str(&format!(
            r#","t{i}":{{"dtype":"BF16","shape":[4096,{i}],"data_offsets":[{},{}]}}"#,
            i * 10,
            i * 10 + 10
        ));
    }
    json.push('}');
    let h = parse_header(json.as_bytes()).unwrap();
    assert_eq!((h.tensors, h.data_end), (20_000, 200_000));
    for (bad, says) in [
        (
            r#"{"a":{"data_offsets":[5,1]}}"#,
            "tensor a: data_offsets [5, 1] end before they begin",
        ),
        (r#"{"a":{"dtype":"F32"}}"#, "tensor a: no data_offsets"),
        (
            r#"{"a":{"data_offsets":[-1,2]}}"#,
            "tensor a: data_offsets are not numbers",
        ),
        (r#"[1,2]"#, "not a JSON object"),
        (r#"{"a":"#, "not valid JSON"),
    ] {
        let e = parse_header(bad.as_bytes()).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}
