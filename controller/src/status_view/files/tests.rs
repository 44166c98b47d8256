use super::*;

#[test]
fn reads_the_agents_files_only_and_survives_bad_ones() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("GpuPartition-a.yaml"), "resource: GpuPartition/a\n").unwrap();
    std::fs::write(p.join("InferenceServer-ns_b.yaml"), ": : [ not yaml").unwrap();
    std::fs::write(p.join(".GpuPartition-a.yaml.tmp"), "half written").unwrap();
    std::fs::write(p.join("notes.txt"), "x").unwrap();
    std::fs::write(
        p.join("GpuPartition-big.yaml"),
        vec![b'a'; status_dir::MAX_BYTES as usize + 10],
    )
    .unwrap();
    std::os::unix::fs::symlink("/dev/zero", p.join("GpuPartition-zero.yaml")).unwrap();
    let docs = read(p).unwrap();
    let names: Vec<&str> = docs.iter().map(|d| d.origin.as_str()).collect();
    assert_eq!(
        names,
        [
            "GpuPartition-a.yaml",
            "GpuPartition-big.yaml",
            "InferenceServer-ns_b.yaml"
        ]
    );
    assert!(docs[0].value.is_ok());
    assert!(docs[1].value.as_ref().unwrap_err().contains("larger than"));
    assert!(docs[2].value.as_ref().unwrap_err().contains("not YAML"));
    assert!(read(&p.join("absent"))
        .unwrap_err()
        .contains("--status-dir"));
}
