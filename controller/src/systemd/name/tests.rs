use super::*;

#[test]
fn good_names() {
    for n in [
        "sglang-qwen.service",
        "foo@bar.service",
        "foo@.service",
        "multi-user.target",
        "network-online.target",
        "dev-disk-by\\x2duuid-1.device",
        "a:b_c.d.service",
        "foo@bar@baz.service",
    ] {
        assert_eq!(validate_unit_name(n), Ok(()), "{n}");
    }
    let max = format!("{}.service", "a".repeat(255 - ".service".len()));
    assert_eq!(max.len(), 255);
    assert_eq!(validate_unit_name(&max), Ok(()));
}

fn err(name: &str) -> String {
    match validate_unit_name(name) {
        Ok(()) => panic!("{name:?} unexpectedly valid"),
        Err(e) => e,
    }
}

#[test]
fn bad_names_with_messages() {
    assert!(err("").contains("empty"));
    assert!(err("a/b.service").contains("'/'"));
    assert!(err("a b.service").contains("' '"));
    assert!(err("../x").contains("'/'"));
    assert!(err("a%n.service").contains("'%'"));
    assert!(err("a\nb.service").contains("'\\n'"));
    assert!(err("qwen").contains("no unit type suffix"));
    assert!(err("x.unknownsuffix").contains("unknown unit type suffix"));
    assert!(err(".service").contains("nothing before"));
    assert!(err("@foo.service").contains("starts with '@'"));
    assert!(err("é.service").contains("'é'"));
    let long = format!("{}.service", "a".repeat(256 - ".service".len()));
    assert_eq!(long.len(), 256);
    assert!(err(&long).contains("at most 255"));
}

#[test]
fn service_names() {
    assert_eq!(
        service_unit_name("sglang-qwen"),
        Ok("sglang-qwen.service".to_string())
    );
    assert_eq!(
        service_unit_name("sglang-qwen.service"),
        Ok("sglang-qwen.service".to_string())
    );
    assert_eq!(
        service_unit_name("foo@bar.service"),
        Ok("foo@bar.service".to_string())
    );
    assert_eq!(
        service_unit_name("qwen2.5"),
        Ok("qwen2.5.service".to_string())
    );
    assert_eq!(
        service_unit_name("x.unknownsuffix"),
        Ok("x.unknownsuffix.service".to_string())
    );
    assert!(service_unit_name("").is_err());
    assert!(service_unit_name("a/b").is_err());
    assert!(service_unit_name("a b").is_err());
    assert!(service_unit_name("../x").is_err());
    assert!(service_unit_name(&"a".repeat(250)).is_err());
    let e = service_unit_name("foo.target").unwrap_err();
    assert!(e.contains("target unit"), "{e}");
}
