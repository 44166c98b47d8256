#[test]
fn the_list_is_replaced_whole_and_no_temp_file_is_left() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("prometheus/servers.json");
    super::write(&p, "[{\"targets\":[\"10.0.0.5:30000\"],\"labels\":{}}]");
    super::write(&p, "[]");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "[]");
    let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["servers.json"]);
}
