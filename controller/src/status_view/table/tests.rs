use super::*;

#[test]
fn ages_read_as_kubectl_prints_them() {
    for (s, want) in [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (45, "45s"),
        (119, "119s"),
        (150, "2m30s"),
        (180, "3m"),
        (25 * 60, "25m"),
        (4 * 3600 + 600, "4h10m"),
        (20 * 3600, "20h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (40 * 86400, "40d"),
        (740 * 86400, "2y10d"),
        (3650 * 86400, "10y"),
    ] {
        assert_eq!(human_age(s), want, "{s}s");
    }
}

#[test]
fn columns_align_and_colour_never_shifts_them() {
    let mut r = Row::new("a".into(), vec!["x".into(), "True".into(), "end".into()]);
    r.paint[1] = Paint::Good;
    let plain = format("T", &["A", "STATUS", "C"], &[&r], false);
    assert_eq!(plain, "T\nA   STATUS   C\nx   True     end\n");
    let coloured = format("T", &["A", "STATUS", "C"], &[&r], true);
    assert_eq!(
        coloured.replace("\x1b[32m", "").replace("\x1b[0m", ""),
        plain
    );
    assert!(coloured.contains("\x1b[32mTrue\x1b[0m"));
}

#[test]
fn a_row_is_the_same_whatever_its_age() {
    let mut a = Row::new("k".into(), vec!["Ready".into(), "3s".into()]);
    a.age = Some(1);
    let mut b = a.clone();
    b.cells[1] = "9s".into();
    assert!(a.same_as(&b));
    b.cells[0] = "Stalled".into();
    assert!(!a.same_as(&b));
}
