use super::*;

fn run(args: &[&str]) -> Vec<(usize, String)> {
    let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    check(&v, &["--tp-size"])
}

#[test]
fn well_formed_extra_args_pass() {
    assert_eq!(
        run(&[
            "--max-running-requests",
            "64",
            "--chunked-prefill-size=8192",
            "--disable-cuda-graph",
            "--attention-backend",
            "flashinfer",
        ]),
        vec![]
    );
}

#[test]
fn each_kind_of_mistake_names_its_word() {
    // A stray word, a value for a switch, a missing value, a bad choice, a bad integer, a
    // repeated flag and a flag the agent sets: each reported at its own index.
    let got = run(&[
        "64",                        // 0: stray
        "--disable-cuda-graph",      // 1
        "yes",                       // 2: value for a switch
        "--max-running-requests",    // 3: no value
        "--attention-backend",       // 4
        "flashinfr",                 // 5: not a choice
        "--chunked-prefill-size=8k", // 6: not an int
        "--disable-cuda-graph",      // 7: twice
        "--tp-size",                 // 8: managed
        "4",
    ]);
    let at: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
    assert!(at.contains(&0), "{got:?}");
    assert!(
        got.iter()
            .any(|(i, m)| *i == 2 && m.contains("--disable-cuda-graph, a switch")),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|(i, m)| *i == 3 && m.contains("exactly one value")),
        "{got:?}"
    );
    assert!(
        got.iter().any(|(i, m)| *i == 5 && m.contains("flashinfr")),
        "{got:?}"
    );
    assert!(
        got.iter().any(|(i, m)| *i == 6 && m.contains("integer")),
        "{got:?}"
    );
    assert!(!at.contains(&1), "{got:?}");
    assert!(
        got.iter().any(|(i, m)| *i == 7 && m.contains("twice")),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|(i, m)| *i == 8 && m.contains("set by the agent")),
        "{got:?}"
    );
}

#[test]
fn list_flags_take_several_values() {
    assert_eq!(run(&["--numa-node", "0", "1"]), vec![]);
    assert!(!run(&["--numa-node"]).is_empty());
    assert!(!run(&["--numa-node", "x"]).is_empty());
}
