use super::*;

#[test]
fn only_addresses_of_this_machine_count_as_assigned() {
    assert!(assigned_here("127.0.0.1".parse().unwrap()));
    assert!(!assigned_here("0.0.0.0".parse().unwrap()));
    // TEST-NET-1 (RFC 5737) and a link-local metadata address are never ours here.
    assert!(!assigned_here("192.0.2.1".parse().unwrap()));
    assert!(!assigned_here("169.254.169.254".parse().unwrap()));
}

#[test]
fn a_tenants_listen_host_never_aims_the_agent_at_another_machine() {
    let t = tempfile::tempdir().unwrap();
    let h = LocalHost::new(t.path(), "10de");
    for wildcard in ["0.0.0.0", "::", "127.0.0.1", "localhost"] {
        assert_eq!(
            h.server_address(Location::Host, wildcard).as_deref(),
            Some("127.0.0.1"),
            "{wildcard}"
        );
    }
    for elsewhere in ["169.254.169.254", "192.0.2.1", "example.com", "10.0.0.1:80"] {
        assert_eq!(
            h.server_address(Location::Host, elsewhere),
            None,
            "{elsewhere}"
        );
    }
}
