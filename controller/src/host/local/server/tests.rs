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

/// Issue 23: a container's address came from its own `hostname -I`, so its root could aim the
/// agent's GETs and smoke POSTs at the host's loopback. Now it comes from the host side: the
/// config's static address, else the namespace's addresses through the container's init PID.
#[test]
fn a_containers_address_comes_from_the_host_side() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let w = |p: &str, s: &str| {
        let p = t.path().join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, s).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    // The container would say it is the host's loopback.
    w("bin/pct", "#!/bin/sh\necho 127.0.0.1\n");
    w("bin/lxc-info", "#!/bin/sh\n[ \"$2\" = 130 ] && echo 4242\n");
    w(
        "etc/pve/lxc/129.conf",
        "arch: amd64\nnet0: name=eth0,bridge=vmbr0,ip=10.0.0.5/24,type=veth\n",
    );
    w(
        "etc/pve/lxc/130.conf",
        "arch: amd64\nnet0: name=eth0,bridge=vmbr0,ip=dhcp,type=veth\n",
    );
    w(
        "proc/4242/net/fib_trie",
        "Main:\n  +-- 0.0.0.0/0 3 0 5\n     +-- 10.0.1.0/24 2 0 2\n        |-- 10.0.1.7\n           /32 host LOCAL\n     +-- 127.0.0.0/8 2 0 2\n        |-- 127.0.0.1\n           /32 host LOCAL\n",
    );
    w("etc/pve/lxc/131.conf", "arch: amd64\n");
    let mut h = LocalHost::new(t.path(), "10de");
    h.tools.pct = t.path().join("bin/pct").display().to_string();
    h.tools.lxc_info = t.path().join("bin/lxc-info").display().to_string();
    let at = |vmid, listen| h.server_address(Location::Container(vmid), listen);
    assert_eq!(at(129, "0.0.0.0").as_deref(), Some("10.0.0.5"));
    assert_eq!(at(129, "127.0.0.1").as_deref(), Some("10.0.0.5"));
    assert_eq!(at(130, "0.0.0.0").as_deref(), Some("10.0.1.7"));
    assert_eq!(at(130, "10.0.1.7").as_deref(), Some("10.0.1.7"));
    assert_eq!(at(130, "169.254.169.254"), None);
    assert_eq!(
        at(131, "0.0.0.0"),
        None,
        "nothing known from the host side: not asked"
    );
}
