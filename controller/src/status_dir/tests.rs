use super::*;

fn key(s: &str) -> ResourceKey {
    let p: Vec<&str> = s.split('/').collect();
    match p[..] {
        ["GpuPartition", n] => ResourceKey::Partition { name: n.into() },
        [_, ns, n] => ResourceKey::Server {
            namespace: ns.into(),
            name: n.into(),
        },
        _ => unreachable!(),
    }
}

#[test]
fn each_resource_has_its_own_file_and_the_reader_knows_it() {
    assert_eq!(
        file_name(&key("GpuPartition/kpro6")),
        "GpuPartition-kpro6.yaml"
    );
    let s = file_name(&key("InferenceServer/default/qwen35-122b"));
    assert_eq!(s, "InferenceServer-default_qwen35-122b.yaml");
    assert_eq!(kind_of(&s), Some(FileKind::Server));
    assert_eq!(
        kind_of("GpuPartition-kpro6.yaml"),
        Some(FileKind::Partition)
    );
    assert_eq!(kind_of(INVALID), Some(FileKind::Invalid));
    assert_eq!(kind_of(".GpuPartition-kpro6.yaml.tmp"), None);
    // Two names that once met in one file, and a name that would climb out.
    assert_ne!(
        file_name(&key("InferenceServer/a-b/c")),
        file_name(&key("InferenceServer/a/b-c"))
    );
    let climbing = ResourceKey::Server {
        namespace: "default".into(),
        name: "../../etc/x".into(),
    };
    assert_eq!(
        file_name(&climbing),
        "InferenceServer-default_.._.._etc_x.yaml"
    );
    let dots = ResourceKey::Partition { name: "..".into() };
    assert!(!file_name(&dots).contains('/'));
}

#[test]
fn only_a_regular_file_is_read_and_only_so_much_of_it() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("a.yaml"), "x: 1\n").unwrap();
    assert_eq!(read_file(&p.join("a.yaml")).unwrap(), "x: 1\n");
    std::os::unix::fs::symlink("/dev/zero", p.join("zero.yaml")).unwrap();
    assert!(read_file(&p.join("zero.yaml")).is_err());
    let made = std::process::Command::new("mkfifo")
        .arg(p.join("fifo.yaml"))
        .status()
        .unwrap();
    assert!(made.success());
    assert!(read_file(&p.join("fifo.yaml"))
        .unwrap_err()
        .contains("not a regular file"));
    std::fs::write(p.join("big.yaml"), vec![b'a'; MAX_BYTES as usize + 1]).unwrap();
    assert!(read_file(&p.join("big.yaml"))
        .unwrap_err()
        .contains("larger than"));
}
