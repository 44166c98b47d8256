use super::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn a_named_user_runs_through_runuser_root_runs_as_itself() {
    let py = s(&["/venv/bin/python3", "-I", "-s", "-"]);
    assert_eq!(argv(None, "runuser", py.clone()), py);
    assert_eq!(argv(Some("root"), "runuser", py.clone()), py);
    assert_eq!(
        argv(Some("sglang"), "runuser", py.clone())[..4],
        s(&["runuser", "-u", "sglang", "--"])
    );
    let n = argv(Some("1000"), "runuser", py.clone());
    assert_eq!(
        n[..5],
        s(&[
            "setpriv",
            "--reuid=1000",
            "--regid=1000",
            "--clear-groups",
            "--"
        ])
    );
    assert_eq!(n[5..], py[..]);
}

#[test]
fn every_directory_to_the_interpreter_and_its_target_is_checked() {
    let p = paths_to_check(
        "/root/ml-env/bin/python3",
        Some("/usr/bin/python3.12"),
        &s(&["/root/ml-env/lib/python3.12/site-packages"]),
    );
    for want in [
        "/",
        "/root",
        "/root/ml-env",
        "/root/ml-env/bin",
        "/root/ml-env/bin/python3",
        "/usr/bin/python3.12",
        "/root/ml-env/lib/python3.12/site-packages",
    ] {
        assert!(p.contains(&want.to_string()), "{want} in {p:?}");
    }
    assert_eq!(p.iter().filter(|x| *x == "/").count(), 1);
}

#[test]
fn a_tree_another_user_can_write_is_refused() {
    let st = parse_stat("0 755 /\n0 700 /root\n1000 755 /root/ml-env\n0 755 /x\n");
    assert_eq!(st.len(), 4);
    let m = tree_problem("/root/ml-env/bin/python3", &st, &[]).unwrap();
    assert!(m.contains("/root/ml-env is owned by UID 1000"), "{m}");
    // The unit's own user may own it: the code runs as that user anyway.
    assert_eq!(tree_problem("/p", &st, &[1000]), None);
    let st = parse_stat("0 755 /\n0 775 /opt/venv\n");
    let m = tree_problem("/opt/venv/bin/python3", &st, &[]).unwrap();
    assert!(m.contains("/opt/venv is mode 0775"), "{m}");
    // /tmp-like sticky directories do not count as writable by others.
    let st = parse_stat("0 1777 /tmp\n0 755 /tmp/venv\n");
    assert_eq!(tree_problem("/tmp/venv/bin/python3", &st, &[]), None);
    assert_eq!(tree_problem("/p", &parse_stat("garbage\n"), &[]), None);
}
