//! Tests of [`render`](fn@super::render) and [`parse`](fn@super::parse): expected renderings,
//! the round trip `parse(render(spec)) == spec` for hostile input (also as property tests),
//! systemd's syntax rules, and, where it is installed, `systemd-analyze verify`.

use super::quote::{cunescape_one, is_control, Unescaped};
use super::*;
use proptest::prelude::*;

const PY: &str = "/usr/bin/python3";

/// Spec text an attacker might put in a model path, served name, extra
/// argument or environment value.
const HOSTILE: &[&str] = &[
    "/models/qwen\nExecStartPre=/bin/rm -rf /",
    "; rm -rf /",
    ";",
    "\\;",
    "a;",
    "$HOME",
    "${HOME}",
    "$",
    "$$",
    "a$b",
    "%n",
    "%",
    "%%",
    "\"",
    "'",
    "\\",
    "a\\",
    "\\\\\\",
    "tab\there",
    "cr\rlf\n",
    "qwen-é-模型-🦀",
    "-",
    "--",
    "-rf",
    "@x",
    ":x",
    "+x",
    "!x",
    "|x",
    "",
    " ",
    "  lead and trail  ",
    "#comment",
    "[Service]",
    "x=y",
    "\x01\x1b[31m\x7f",
    "\\x41",
    "\u{feff}\u{2028}\u{85}",
    "\"; echo pwned; \"",
    "' \" ` $(id) `id`",
];

fn spec(argv: Vec<String>, env: Vec<(String, String)>) -> UnitSpec {
    UnitSpec {
        description: "SGLang server".to_string(),
        exec_start: argv,
        environment: env,
        ..UnitSpec::default()
    }
}

fn hostile_spec() -> UnitSpec {
    let mut argv = vec![PY.to_string(), "-m".into(), "sglang.launch_server".into()];
    argv.extend(HOSTILE.iter().map(|s| s.to_string()));
    let env = HOSTILE
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("GP_{i}"), v.to_string()))
        .collect();
    spec(argv, env)
}

fn roundtrip(s: &UnitSpec) -> ParsedUnit {
    let text = render(s).unwrap_or_else(|e| panic!("render failed: {e}"));
    let parsed = parse(&text).unwrap_or_else(|e| panic!("parse failed: {e}\n{text}"));
    assert_eq!(parsed.exec_start, s.exec_start, "\n{text}");
    assert_eq!(parsed.environment, s.environment, "\n{text}");
    parsed
}

fn exec_line(text: &str) -> &str {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("ExecStart="))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    lines[0]
}

fn render_arg(arg: &str) -> String {
    let text = render(&spec(vec![PY.into(), arg.into()], vec![])).unwrap();
    exec_line(&text)["ExecStart=/usr/bin/python3 ".len()..].to_string()
}

#[test]
fn hostile_arguments_and_env_round_trip() {
    roundtrip(&hostile_spec());
    for h in HOSTILE {
        roundtrip(&spec(
            vec![PY.into(), h.to_string()],
            vec![("V".into(), h.to_string())],
        ));
    }
}

#[test]
fn hostile_arguments_render_as_expected() {
    assert_eq!(render_arg("--model-path"), "--model-path");
    assert_eq!(render_arg("/models/a b"), "\"/models/a b\"");
    assert_eq!(render_arg("/m/x\ny"), "\"/m/x\\ny\"");
    assert_eq!(render_arg("; rm -rf /"), "\"; rm -rf /\"");
    assert_eq!(render_arg(";"), "\\;");
    assert_eq!(render_arg("$HOME"), "\"$$HOME\"");
    assert_eq!(render_arg("%n"), "\"%%n\"");
    assert_eq!(render_arg("\""), "\"\\\"\"");
    assert_eq!(render_arg("\\"), "\"\\\\\"");
    assert_eq!(render_arg("a\tb"), "\"a\\tb\"");
    assert_eq!(render_arg("\x01\x7f"), "\"\\x01\\x7f\"");
    assert_eq!(render_arg("é"), "\"é\"");
    assert_eq!(render_arg("-rf"), "-rf");
    assert_eq!(render_arg(""), "\"\"");
    assert_eq!(render_arg("'"), "\"'\"");
}

#[test]
fn each_setting_is_one_physical_line() {
    let text = render(&hostile_spec()).unwrap();
    exec_line(&text);
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("Environment="))
            .count(),
        HOSTILE.len()
    );
    for l in text.lines() {
        // Only ASCII control characters matter to systemd's line reader.
        assert!(!l.chars().any(is_control), "control char in {l:?}");
        let trailing = l.len() - l.trim_end_matches('\\').len();
        assert_eq!(trailing % 2, 0, "continuation in {l:?}");
        assert!(
            l.is_empty()
                || l == HEADER
                || l.starts_with('[')
                || l.starts_with("Description=")
                || l.starts_with("ExecStart=")
                || l.starts_with("Environment="),
            "unexpected line {l:?}"
        );
    }
    // The hostile strings cannot have introduced another section or key.
    let parsed = parse(&text).unwrap();
    assert_eq!(parsed.description.as_deref(), Some("SGLang server"));
    assert_eq!(parsed.working_directory, None);
    assert_eq!(parsed.user, None);
}

#[test]
fn full_render_is_deterministic() {
    let s = UnitSpec {
        description: "SGLang qwen 100%".into(),
        exec_start: vec![
            PY.into(),
            "-m".into(),
            "sglang.launch_server".into(),
            "--model-path".into(),
            "/models/Qwen 7B".into(),
        ],
        environment: vec![
            ("CUDA_VISIBLE_DEVICES".into(), "0,1".into()),
            ("HF_HOME".into(), "/var/cache/hf $x".into()),
        ],
        working_directory: Some("/var/lib/gpuplane".into()),
        user: Some("sglang".into()),
        restart: Some("on-failure".into()),
        timeout_start_sec: Some(600),
        after: vec!["network-online.target".into()],
        wanted_by: vec!["multi-user.target".into()],
        sandbox: vec![("NoNewPrivileges".into(), "yes".into())],
    };
    let expected = "\
# Managed by gpuplane; local edits are overwritten.
[Unit]
Description=SGLang qwen 100%%
After=network-online.target

[Service]
User=sglang
WorkingDirectory=/var/lib/gpuplane
Environment=CUDA_VISIBLE_DEVICES=0,1
Environment=\"HF_HOME=/var/cache/hf $x\"
ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path \"/models/Qwen 7B\"
Restart=on-failure
TimeoutStartSec=600
NoNewPrivileges=yes

[Install]
WantedBy=multi-user.target
";
    assert_eq!(render(&s).unwrap(), expected);
    assert_eq!(render(&s).unwrap(), render(&s.clone()).unwrap());
    let p = roundtrip(&s);
    assert_eq!(p.description.as_deref(), Some("SGLang qwen 100%"));
    assert_eq!(p.working_directory.as_deref(), Some("/var/lib/gpuplane"));
    assert_eq!(p.user.as_deref(), Some("sglang"));

    let minimal = render(&spec(vec!["/bin/true".into()], vec![])).unwrap();
    assert!(minimal.starts_with(&format!("{HEADER}\n")));
    assert!(!minimal.contains("[Install]"));
}

#[test]
fn executable_rules() {
    let exe = |p: &str| render(&spec(vec![p.into(), "x".into()], vec![]));
    for p in [
        "python3", "-/bin/x", "@/bin/x", ":/bin/x", "+/bin/x", "!/bin/x", "", "./x", "~/x",
    ] {
        assert_eq!(
            exe(p),
            Err(UnitError::RelativeExecutable { path: p.into() }),
            "{p:?}"
        );
    }
    for p in [
        "/bin/$x",
        "/bin/a\"b",
        "/bin/a'b",
        "/bin/a\\b",
        "/bin/a\nb",
        "/bin/a\tb",
        "/bin/",
    ] {
        assert!(
            matches!(exe(p), Err(UnitError::UnsafeExecutable { .. })),
            "{p:?}"
        );
    }
    assert!(matches!(exe("/bin/a\0b"), Err(UnitError::Nul { .. })));
    assert_eq!(
        render(&spec(vec![], vec![])),
        Err(UnitError::EmptyExecStart)
    );
    for p in [
        "/opt/my app/bin/sglang",
        "/opt/100%/x",
        "/opt/;/x",
        "/opt/é/-x",
    ] {
        let s = spec(vec![p.into(), "-x".into()], vec![]);
        assert_eq!(roundtrip(&s).exec_start[0], p);
    }
}

#[test]
fn field_validation_errors() {
    let base = || spec(vec![PY.into()], vec![]);
    let with = |f: &dyn Fn(&mut UnitSpec)| {
        let mut s = base();
        f(&mut s);
        render(&s)
    };
    assert!(matches!(
        with(&|s| s.exec_start.push("a\0b".into())),
        Err(UnitError::Nul { .. })
    ));
    assert!(matches!(
        with(&|s| s.environment.push(("A".into(), "\0".into()))),
        Err(UnitError::Nul { .. })
    ));
    for bad in ["", "1A", "A-B", "A B", "A=B", "É", "A\n"] {
        assert_eq!(
            with(&|s| s.environment.push((bad.into(), "v".into()))),
            Err(UnitError::InvalidEnvName { name: bad.into() }),
            "{bad:?}"
        );
    }
    assert_eq!(
        with(&|s| {
            s.environment.push(("A".into(), "1".into()));
            s.environment.push(("A".into(), "2".into()));
        }),
        Err(UnitError::DuplicateEnvName { name: "A".into() })
    );
    for bad in ["a\nb", " a", "a ", "a\\", "a\tb"] {
        assert!(
            matches!(
                with(&|s| s.description = bad.into()),
                Err(UnitError::InvalidValue { .. })
            ),
            "{bad:?}"
        );
    }
    for bad in [
        "srv",
        "/srv/",
        "/srv//x",
        "/srv/./x",
        "/srv/../x",
        "-/srv",
        "/srv\n",
        "/srv ",
    ] {
        assert!(
            matches!(
                with(&|s| s.working_directory = Some(bad.into())),
                Err(UnitError::InvalidValue { .. })
            ),
            "{bad:?}"
        );
    }
    for good in ["/", "/srv/my models/100%", "/srv/a\\b"] {
        let mut s = base();
        s.working_directory = Some(good.into());
        assert_eq!(roundtrip(&s).working_directory.as_deref(), Some(good));
    }
    for bad in [
        "",
        "root:x",
        "a b",
        "-x",
        "1a$",
        "65535",
        "4294967295",
        &"a".repeat(32),
    ] {
        assert_eq!(
            with(&|s| s.user = Some(bad.into())),
            Err(UnitError::InvalidUser(bad.into())),
            "{bad:?}"
        );
    }
    for good in ["root", "_svc", "sglang-1", "1000", "0"] {
        assert!(with(&|s| s.user = Some(good.into())).is_ok(), "{good:?}");
    }
    assert_eq!(
        with(&|s| s.restart = Some("sometimes".into())),
        Err(UnitError::InvalidRestart("sometimes".into()))
    );
    for r in RESTART_VALUES {
        assert!(with(&|s| s.restart = Some(r.into())).is_ok());
    }
    assert_eq!(
        with(&|s| s.timeout_start_sec = Some(u64::MAX)),
        Err(UnitError::TimeoutTooLarge(u64::MAX))
    );
    assert!(with(&|s| s.timeout_start_sec = Some(MAX_TIMEOUT_START_SEC)).is_ok());
    let e = with(&|s| s.after.push("net work.target".into())).unwrap_err();
    assert!(
        matches!(&e, UnitError::InvalidUnitName { field, .. } if field == "after[0]"),
        "{e}"
    );
    let e = with(&|s| s.wanted_by.push("multi-user".into())).unwrap_err();
    assert!(e.to_string().contains("wanted_by[0]"), "{e}");
    assert!(matches!(
        with(&|s| s.exec_start.push("x".repeat(LONG_LINE_MAX))),
        Err(UnitError::LineTooLong { .. })
    ));
}

#[test]
fn error_messages_are_readable() {
    let e = render(&spec(vec!["sglang".into()], vec![])).unwrap_err();
    assert!(e.to_string().contains("not an absolute path"), "{e}");
    let e = render(&spec(vec![PY.into(), "a\0".into()], vec![])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "exec_start[1] contains a NUL byte, which cannot be represented in a unit file"
    );
}

fn parse_exec_value(v: &str) -> Result<Vec<String>, UnitError> {
    parse(&format!("[Service]\nExecStart={v}\n")).map(|p| p.exec_start)
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

#[test]
fn parse_follows_systemd_command_line_rules() {
    let ok = |v: &str, w: &[&str]| assert_eq!(parse_exec_value(v), Ok(words(w)), "{v}");
    ok("/bin/a b   c", &["/bin/a", "b", "c"]);
    ok("/bin/a x\"y z\"'w'", &["/bin/a", "xy zw"]);
    ok("/bin/a \"\" ''", &["/bin/a", "", ""]);
    ok("/bin/a \\; \";\" x\\;", &["/bin/a", ";", ";", "x\\;"]);
    ok(
        "/bin/a \\s \\x41\\101\\u00e9\\U0001F980",
        &["/bin/a", " ", "AAé🦀"],
    );
    ok("/bin/a \\n\\t\\\\\\\"\\'", &["/bin/a", "\n\t\\\"'"]);
    // Unknown escapes and a trailing backslash are kept (EXTRACT_CUNESCAPE_RELAX).
    // (A backslash at the very end of the line would be a continuation, so
    // the trailing one is followed by a space that systemd strips.)
    ok(
        "/bin/a \\q \\x00 end\\ ",
        &["/bin/a", "\\q", "\\x00", "end\\"],
    );
    ok("/bin/a %% 100%", &["/bin/a", "%", "100%"]);
    ok(
        "/bin/a $$HOME a$$b x$-y \"a $\"",
        &["/bin/a", "$HOME", "a$b", "x$-y", "a $"],
    );
    ok("/bin/a ;", &["/bin/a"]);
    ok("; /bin/a", &["/bin/a"]);
    let err = |v: &str| parse_exec_value(v).unwrap_err();
    assert!(matches!(
        err("/bin/a ; /bin/b"),
        UnitError::MultipleCommands { .. }
    ));
    assert_eq!(
        err("/bin/a %n"),
        UnitError::Specifier {
            line: 2,
            specifier: 'n'
        }
    );
    assert_eq!(
        err("/bin/%H"),
        UnitError::Specifier {
            line: 2,
            specifier: 'H'
        }
    );
    for (v, p) in [
        ("-/bin/a", '-'),
        ("@/bin/a a", '@'),
        ("\"+/bin/a\"", '+'),
        ("!/bin/a", '!'),
        (":/bin/a", ':'),
    ] {
        assert_eq!(err(v), UnitError::Prefix { line: 2, prefix: p }, "{v}");
    }
    for v in [
        "/bin/a $HOME",
        "/bin/a ${HOME}",
        "/bin/a x${HOME}",
        "/bin/a $",
        "/bin/a x$HOME",
        "/bin/$$a",
    ] {
        assert!(matches!(err(v), UnitError::EnvSubstitution { .. }), "{v}");
    }
    for v in [
        "/bin/a \"x",
        "/bin/a 'x",
        "/bin/a \"x\\",
        "bin/a",
        "/bin/",
        "/bin/a\\\\b",
        "/bin/a \\xff",
    ] {
        assert!(matches!(err(v), UnitError::Syntax { .. }), "{v}");
    }
}

#[test]
fn parse_follows_systemd_file_syntax() {
    let text = "\u{feff}# c\n; c\n[Unit]\n  Description = a %%b\\\\  \n[Service]\r\n\
                ExecStart=/bin/a \\\n# comment inside continuation\n; another\n   b \\\n\tc\r\
                Environment=A=1 \"B=2 3\" \\\n C='4\\n'\nEnvironment=A=5\n\
                WorkingDirectory=/srv//x/./y/\nUser=%%u\n[X-Other]\nExecStart=/bin/other\n";
    let p = parse(text).unwrap();
    assert_eq!(p.description.as_deref(), Some("a %b\\\\"));
    assert_eq!(p.exec_start, words(&["/bin/a", "b", "c"]));
    assert_eq!(
        p.environment,
        vec![
            ("A".to_string(), "5".to_string()),
            ("B".to_string(), "2 3".to_string()),
            ("C".to_string(), "4\n".to_string()),
        ]
    );
    assert_eq!(p.working_directory.as_deref(), Some("/srv/x/y"));
    assert_eq!(p.user.as_deref(), Some("%u"));

    // Empty assignments reset, like systemd.
    let p = parse("[Service]\nEnvironment=A=1\nEnvironment=\nExecStart=/bin/a\nExecStart=\nExecStart=/bin/b\nUser=x\nUser=\n").unwrap();
    assert!(p.environment.is_empty());
    assert_eq!(p.exec_start, words(&["/bin/b"]));
    assert_eq!(p.user, None);

    assert!(matches!(
        parse("[Service]\nExecStart=/bin/a\nExecStart=/bin/b\n"),
        Err(UnitError::MultipleCommands { line: 3 })
    ));
    for bad in [
        "[Service\n",
        "[Service]\nExecStart\n",
        "[Service]\nEnvironment=1A=x\n",
        "[Service]\nEnvironment=noequals\n",
        "[Service]\nEnvironment=\"A=\\q\"\n",
        "[Service]\nEnvironment=\"A=x\n",
        "[Service]\nWorkingDirectory=rel\n",
        "[Service]\nWorkingDirectory=/a/../b\n",
        "[Service]\nExecStart=/bin/a\0\n",
    ] {
        assert!(
            matches!(parse(bad), Err(UnitError::Syntax { .. })),
            "{bad:?}"
        );
    }
    assert!(matches!(
        parse("[Service]\nEnvironment=A=%n\n"),
        Err(UnitError::Specifier { specifier: 'n', .. })
    ));
    assert!(matches!(
        parse("[Service]\nWorkingDirectory=-/srv\n"),
        Err(UnitError::Prefix { prefix: '-', .. })
    ));
    // Keys outside the sections gpuplane renders into are ignored.
    assert_eq!(
        parse("ExecStart=/bin/x\n[Install]\nUser=y\n"),
        Ok(ParsedUnit::default())
    );
}

fn hostile_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => prop::sample::select(vec![
            '\n', '\r', '\t', ' ', '"', '\'', '\\', '$', '%', ';', '{', '}', '-', '@', ':',
            '+', '!', '|', '#', '=', '[', ']', '`', '\x01', '\x0b', '\x1b', '\x7f', 'x',
            'n', 's', '0', 'é', '\u{feff}', '\u{85}', '🦀',
        ]),
        1 => any::<char>().prop_filter("no NUL", |c| *c != '\0'),
    ]
}

fn hostile_string() -> impl Strategy<Value = String> {
    prop::collection::vec(hostile_char(), 0..16).prop_map(|v| v.into_iter().collect())
}

fn executable() -> impl Strategy<Value = String> {
    "(/[a-zA-Z0-9 ._%;@+:!é-]{1,8}){1,3}"
}

fn environment() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::btree_map("[A-Za-z_][A-Za-z0-9_]{0,6}", hostile_string(), 0..6)
        .prop_map(|m| m.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn prop_render_parse_round_trip(
        exe in executable(),
        args in prop::collection::vec(hostile_string(), 0..8),
        env in environment(),
    ) {
        let mut argv = vec![exe];
        argv.extend(args);
        let s = spec(argv, env);
        let text = render(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let p = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(p.exec_start, s.exec_start);
        prop_assert_eq!(p.environment, s.environment);
        prop_assert_eq!(text.lines().filter(|l| l.starts_with("ExecStart=")).count(), 1);
        prop_assert!(!text.chars().any(|c| is_control(c) && c != '\n'));
    }

    #[test]
    fn prop_any_string_is_one_argument(arg in any::<String>()) {
        let arg: String = arg.chars().filter(|c| *c != '\0').collect();
        let s = spec(vec![PY.into(), arg, "tail".into()], vec![]);
        let text = render(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(parse(&text).map(|p| p.exec_start), Ok(s.exec_start));
    }

    #[test]
    fn prop_parse_never_panics(text in "[\\[\\]A-Za-z=\"'\\\\$%; \n\r\t#é-]{0,80}") {
        let _ = parse(&text);
        let _ = parse(&format!("[Service]\nExecStart={text}"));
        let _ = parse(&format!("[Service]\nEnvironment={text}"));
    }
}

/// Decodes the `Command Line:` dump of systemd-analyze (systemd's
/// `quote_command_line()`): bare words, or double-quoted words with `\"`,
/// `\\`, `` \` ``, `\$` and C escapes.
fn decode_dump_command_line(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b' ' {
            i += 1;
            continue;
        }
        let mut w = Vec::new();
        if b[i] == b'"' {
            i += 1;
            while b[i] != b'"' {
                if b[i] == b'\\' {
                    if matches!(b[i + 1], b'$' | b'`' | b'"' | b'\\') {
                        w.push(b[i + 1]);
                        i += 2;
                    } else {
                        let (n, u) = cunescape_one(&b[i + 1..]).expect("dump escape");
                        match u {
                            Unescaped::Byte(x) => w.push(x),
                            Unescaped::Code(c) => {
                                let mut buf = [0u8; 4];
                                let ch = char::from_u32(c).expect("char");
                                w.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                            }
                        }
                        i += 1 + n;
                    }
                } else {
                    w.push(b[i]);
                    i += 1;
                }
            }
            i += 1;
        } else {
            while i < b.len() && b[i] != b' ' {
                w.push(b[i]);
                i += 1;
            }
        }
        out.push(String::from_utf8(w).expect("utf8"));
    }
    out
}

/// Cross-checks the renderer against the real systemd parser. Skips (with
/// a note) where `systemd-analyze` is not installed.
#[test]
fn systemd_analyze_verify_hostile_unit() {
    use std::process::Command;
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("note: systemd-analyze not found; skipping verification against systemd");
        return;
    }
    let dir = std::env::temp_dir().join(format!("gpuplane-sd-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut s = hostile_spec();
    s.exec_start[0] = "/bin/echo".into();
    s.working_directory = Some("/tmp".into());
    s.restart = Some("on-failure".into());
    s.timeout_start_sec = Some(900);
    s.after = vec!["network-online.target".into()];
    s.wanted_by = vec!["multi-user.target".into()];
    let path = dir.join("gpuplane-hostile.service");
    std::fs::write(&path, render(&s).unwrap()).unwrap();
    let out = Command::new("systemd-analyze")
        .env("SYSTEMD_LOG_LEVEL", "debug")
        .env("SYSTEMD_LOG_COLOR", "0")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    // Syntax warnings look like "<path>:<line>: ...".
    let needle = format!("{}:", path.display());
    assert!(!all.contains(&needle), "systemd complained:\n{all}");
    let cmd: Vec<&str> = all
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("Command Line: "))
        .collect();
    assert_eq!(cmd.len(), 1, "{all}");
    // The dump shows argv before exec-time variable substitution, which
    // turns each "$$" into "$" (systemd.service(5) "COMMAND LINES").
    let mut expected = s.exec_start.clone();
    for a in &mut expected[1..] {
        *a = a.replace('$', "$$");
    }
    assert_eq!(decode_dump_command_line(cmd[0]), expected);
    // Environment is dumped raw, one "Environment: K=V" per variable.
    for (k, v) in &s.environment {
        assert!(
            all.contains(&format!("Environment: {k}={v}\n")),
            "{k}: {all}"
        );
    }
}

/// Sandboxing keys are letters only and values plain: no spec text can add a line.
#[test]
fn sandbox_settings_cannot_smuggle_lines() {
    let mut s = UnitSpec {
        exec_start: vec![PY.into()],
        ..UnitSpec::default()
    };
    s.sandbox = vec![("ProtectSystem\nExecStartPre".into(), "x".into())];
    assert!(render(&s).is_err());
    s.sandbox = vec![("ProtectSystem".into(), "full\nExecStartPre=/bin/sh".into())];
    assert!(render(&s).is_err());
    s.sandbox = vec![("ProtectSystem".into(), "full".into())];
    assert!(render(&s).unwrap().contains("\nProtectSystem=full\n"));
}
