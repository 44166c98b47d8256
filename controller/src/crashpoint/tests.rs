use super::*;

#[test]
fn points_parse_and_bad_values_say_what_is_expected() {
    assert_eq!(parse("held:1"), Ok((LockPoint::Held, 1)));
    assert_eq!(parse("temp:3"), Ok((LockPoint::Temp, 3)));
    assert_eq!(parse("renamed:2"), Ok((LockPoint::Renamed, 2)));
    assert!(parse("temp").unwrap_err().contains("POINT:N"));
    assert!(parse("later:1")
        .unwrap_err()
        .contains("held, temp, renamed"));
    assert!(parse("held:0").unwrap_err().contains("from 1"));
}
