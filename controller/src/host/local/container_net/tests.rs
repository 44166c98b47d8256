use super::*;

fn ips(v: &[&str]) -> Vec<IpAddr> {
    v.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
fn static_addresses_come_from_the_main_sections_net_lines() {
    let conf = "arch: amd64\nnet0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=10.0.0.5/24,ip6=fd00::5/64,type=veth\nnet1: name=eth1,bridge=vmbr1,ip=dhcp\nnetwork: x=1,ip=192.0.2.9/24\n[snap]\nnet0: name=eth0,ip=10.9.9.9/24\n";
    assert_eq!(config_addresses(conf), ips(&["10.0.0.5", "fd00::5"]));
}

#[test]
fn the_namespaces_local_addresses_are_read_from_fib_trie() {
    let trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     +-- 10.0.0.0/24 2 0 2\n        +-- 10.0.0.0/30 2 0 2\n           |-- 10.0.0.0\n              /24 link UNICAST\n           |-- 10.0.0.5\n              /32 host LOCAL\n        |-- 10.0.0.255\n           /32 link BROADCAST\n     +-- 127.0.0.0/8 2 0 2\n        |-- 127.0.0.1\n           /32 host LOCAL\nLocal:\n  +-- 0.0.0.0/0 3 0 5\n           |-- 10.0.0.5\n              /32 host LOCAL\n";
    assert_eq!(fib_trie_local(trie), ips(&["10.0.0.5", "127.0.0.1"]));
}

/// A container's root must not aim the agent at the host's loopback, a metadata service or
/// anything but the container's own routable address.
#[test]
fn loopback_and_link_local_are_never_targets() {
    let own = ips(&["127.0.0.1", "169.254.169.254", "fe80::1", "10.0.0.5"]);
    assert_eq!(pick("0.0.0.0", &own).as_deref(), Some("10.0.0.5"));
    assert_eq!(pick("127.0.0.1", &own).as_deref(), Some("10.0.0.5"));
    assert_eq!(pick("10.0.0.5", &own).as_deref(), Some("10.0.0.5"));
    assert_eq!(pick("169.254.169.254", &own), None);
    assert_eq!(pick("10.0.0.6", &own), None);
    assert_eq!(pick("0.0.0.0", &ips(&["127.0.0.1"])), None);
    assert!(!routable("::ffff:127.0.0.1".parse().unwrap()));
    assert!(routable("fd00::5".parse().unwrap()));
}
