use super::removed_servers;

/// A FIFO or a device under a server's status-file name is skipped, not opened (opening a
/// FIFO blocks until a writer comes: the agent's pass would never end).
#[test]
fn only_regular_files_are_read() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("InferenceServer-default_a.yaml");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(ok.success());
    std::os::unix::fs::symlink("/dev/zero", d.path().join("InferenceServer-default_b.yaml"))
        .unwrap();
    std::fs::write(
        d.path().join("InferenceServer-default_c.yaml"),
        "resource: InferenceServer/default/c\nunit: host/sglang-c.service\n",
    )
    .unwrap();
    let removed = removed_servers(d.path(), &Default::default());
    let files: Vec<&str> = removed.iter().map(|r| r.file.as_str()).collect();
    assert_eq!(files, ["InferenceServer-default_c.yaml"]);
}
