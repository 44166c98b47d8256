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

/// Issue 23: only the model directory was resolved; its files were opened through their
/// links, as root. Now each file is resolved and opened only under the model roots (a link
/// inside them, as Hugging Face caches make, still works), and a file's size is never used
/// before that.
#[test]
fn a_file_that_links_out_of_the_model_roots_is_named_and_never_opened() {
    let t = tempfile::tempdir().unwrap();
    let root = Root(t.path().to_path_buf());
    write_model(&root, "/srv/models/m");
    let m = root.path("/srv/models/m");
    // A shard kept as a blob inside the roots, linked by name: followed.
    std::fs::create_dir_all(root.path("/srv/models/blobs")).unwrap();
    std::fs::rename(m.join("a.safetensors"), root.path("/srv/models/blobs/a1")).unwrap();
    std::os::unix::fs::symlink(root.path("/srv/models/blobs/a1"), m.join("a.safetensors")).unwrap();
    assert_eq!(facts(&root, "/srv/models/m").problems, Vec::<String>::new());
    // config.json and a shard linked to files outside: named, not read.
    std::fs::create_dir_all(root.path("/etc")).unwrap();
    std::fs::write(root.path("/etc/shadow"), "root:$6$secret:19000::::::\n").unwrap();
    for name in ["config.json", "b.safetensors"] {
        std::fs::remove_file(m.join(name)).unwrap();
        std::os::unix::fs::symlink(root.path("/etc/shadow"), m.join(name)).unwrap();
    }
    let f = facts(&root, "/srv/models/m");
    assert_eq!(
        f.problems,
        vec![
            "/srv/models/m/config.json: links to /etc/shadow, outside the slice's modelRoots; not read".to_string(),
            "/srv/models/m/b.safetensors: links to /etc/shadow, outside the slice's modelRoots; not read".to_string(),
        ]
    );
    assert!(!f
        .problems
        .iter()
        .any(|p| p.contains("bytes") || p.contains("secret")));
}

/// Issue 23: environment paths were looked up as root, an oracle for any path on the host. For
/// a unit with a user they are looked up as that user (`runuser -u USER -- test -e`).
#[test]
fn environment_paths_are_looked_up_as_the_units_user() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().display().to_string();
    let runuser = format!("{dir}/runuser");
    std::fs::write(
        &runuser,
        format!("#!/bin/sh\necho \"$@\" >> {dir}/runuser.args\nshift 3\nexec \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&runuser, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(format!("{dir}/cuda")).unwrap();
    let mut h = LocalHost::new(std::path::Path::new("/"), "10de");
    h.tools.runuser = runuser;
    let mut r = req("/nonexistent-gp/m");
    r.python = "/nonexistent-gp/python3".into();
    r.user = Some("nobody".into());
    r.env_paths = vec![
        ("CUDA_HOME".into(), format!("{dir}/cuda")),
        ("CUDA_PATH".into(), format!("{dir}/gone")),
    ];
    h.preflight = vec![r];
    let f = h.observe_preflight(&|_| true);
    let f = f.values().next().unwrap();
    assert_eq!(f.missing_paths, vec![format!("CUDA_PATH={dir}/gone")]);
    let args = std::fs::read_to_string(format!("{dir}/runuser.args")).unwrap();
    assert!(
        args.contains(&format!("-u nobody -- test -e {dir}/cuda")),
        "{args}"
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
