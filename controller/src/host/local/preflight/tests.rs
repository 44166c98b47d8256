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
        user: None,
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

/// Issue 23: the import check ran the slice's interpreter as root, with the agent's working
/// directory on `sys.path`, from a tree anyone could write. Now it runs as the unit's user
/// (`runuser -u`), isolated (`-I -s`), and not at all when someone else can write the tree.
#[test]
fn the_import_check_runs_as_the_units_user_isolated_and_only_from_a_trusted_tree() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().display().to_string();
    let script = |path: &str, text: &str| {
        std::fs::create_dir_all(std::path::Path::new(path).parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let python = format!("{dir}/venv/bin/python3");
    script(
        &python,
        &format!("#!/bin/sh\necho \"$@\" > {dir}/python.args\necho '{{\"sglang\": \"0.5.23\"}}'\n"),
    );
    // runuser's stand-in records its arguments and runs the command after `-u USER --`.
    let runuser = format!("{dir}/tools/runuser");
    script(
        &runuser,
        &format!("#!/bin/sh\necho \"$@\" > {dir}/runuser.args\nshift 3\nexec \"$@\"\n"),
    );
    // The interpreter is a real path here, so the host is the real root (only the import check
    // runs: nothing is observed or written).
    let mut h = LocalHost::new(std::path::Path::new("/"), "10de");
    h.tools.runuser = runuser;
    let mut r = req("/srv/models/m");
    r.python = python.clone();
    r.user = Some("nobody".into());

    let f = h.import_check(&r);
    assert_eq!(f.error, None);
    assert_eq!(f.sglang.as_deref(), Some("0.5.23"));
    let ru = std::fs::read_to_string(format!("{dir}/runuser.args")).unwrap();
    assert!(
        ru.starts_with(&format!("-u nobody -- {python} -I -s -c ")),
        "{ru}"
    );
    let args = std::fs::read_to_string(format!("{dir}/python.args")).unwrap();
    assert!(args.starts_with("-I -s -c import json"), "{args}");

    // A user that does not exist where the unit runs: said, nothing run.
    std::fs::remove_file(format!("{dir}/python.args")).unwrap();
    r.user = Some("no-such-user-gp".into());
    let e = h.import_check(&r).error.unwrap();
    assert!(
        e.contains("\"no-such-user-gp\" does not exist on host"),
        "{e}"
    );

    // Anyone may write the venv: refused before anything runs.
    r.user = Some("nobody".into());
    std::fs::set_permissions(
        format!("{dir}/venv"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    let e = h.import_check(&r).error.unwrap();
    assert!(e.contains(&format!("{dir}/venv is mode 0777")), "{e}");
    assert!(!std::path::Path::new(&format!("{dir}/python.args")).exists());
}
