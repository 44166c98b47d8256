use super::parse;

#[test]
fn listen_ports_are_read_from_the_kernel_s_tables() {
    let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n   1: 0100007F:7530 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 4243 1\n  sl  local_address                         remote_address                        st\n   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 0\n garbage\n";
    assert_eq!(parse(t).into_iter().collect::<Vec<_>>(), vec![22, 30000]);
    assert!(parse("").is_empty());
}
