use super::*;
use crate::host::model::UnitRef;
use crate::modelfiles::safetensors::shard_bytes_header;

/// Writes a two-shard model under `root` at `dir` (absolute host path).
fn write_model(root: &Root, dir: &str) {
    let d = root.path(dir);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("config.json"), r#"{"num_attention_heads": 8}"#).unwrap();
    std::fs::write(
        d.join("model.safetensors.index.json"),
        r#"{"metadata": {"total_size": 300}, "weight_map": {"a": "a.safetensors", "b": "b.safetensors"}}"#,
    )
    .unwrap();
    for (name, n) in [("a", 100u64), ("b", 200)] {
        let mut bytes = shard_bytes_header(name, n);
        bytes.resize(bytes.len() + n as usize, 1);
        std::fs::write(d.join(format!("{name}.safetensors")), bytes).unwrap();
    }
}

fn req(dir: &str) -> PreflightRequest {
    PreflightRequest {
        server: "default/s".into(),
        location: Location::Host,
        python: "/bin/python3".into(),
        model_dir: Some(dir.into()),
        draft_dir: None,
        env_paths: vec![],
        gpus: vec![],
        roots: vec!["/srv/models".into()],
        unit: UnitRef {
            location: Location::Host,
            name: "gpuplane-s.service".into(),
        },
        served_name: "s".into(),
        smoke: None,
    }
}

fn facts(root: &Root, dir: &str) -> crate::modelfiles::DirFacts {
    let none = InterpreterFacts::default;
    preflight::Cache::default()
        .facts(&HostFiles(root), &req(dir), &none, &BTreeMap::new)
        .model
        .unwrap()
}

#[test]
fn real_files_are_checked_and_a_cut_shard_is_named() {
    let t = tempfile::tempdir().unwrap();
    let root = Root(t.path().to_path_buf());
    write_model(&root, "/srv/models/m");
    let f = facts(&root, "/srv/models/m");
    assert_eq!(
        (f.problems.len(), f.weight_bytes),
        (0, 300),
        "{:?}",
        f.problems
    );
    let b = root.path("/srv/models/m/b.safetensors");
    let len = std::fs::metadata(&b).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&b)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    let f = facts(&root, "/srv/models/m");
    assert!(
        f.problems[0].starts_with("/srv/models/m/b.safetensors: ")
            && f.problems[0].contains(&format!("{} bytes, but its header declares {len}", len - 7)),
        "{:?}",
        f.problems
    );
}

#[test]
fn a_symlink_out_of_the_model_roots_is_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let root = Root(t.path().to_path_buf());
    write_model(&root, "/secret/m");
    std::fs::create_dir_all(root.path("/srv/models")).unwrap();
    std::os::unix::fs::symlink(root.path("/secret/m"), root.path("/srv/models/m")).unwrap();
    let f = facts(&root, "/srv/models/m");
    assert_eq!(f.shards, 0);
    assert_eq!(
        f.problems,
        vec![
            "/srv/models/m: resolves to /secret/m, outside the slice's modelRoots; not read"
                .to_string()
        ]
    );
}
