use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMITS: Limits = Limits {
    max_connections: 8,
    max_per_peer: 2,
    max_per_prefix: 8,
    reserved: 0,
    header_read: Duration::from_secs(30),
    connection: Duration::from_secs(60),
};

/// A listener on 127.0.0.1 answering "ok" under `LIMITS`.
async fn ok_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(accept_loop(listener, LIMITS, vec![], |tcp, _| async move {
        serve_connection(
            tcp,
            |_req| async {
                Ok::<_, std::convert::Infallible>(reply(hyper::StatusCode::OK, "text/plain", "ok"))
            },
            LIMITS,
        )
        .await
    }));
    addr
}

/// A connection to `addr` from the loopback address `from` (all of 127/8 is loopback on Linux,
/// so one machine can play several peers).
async fn connect_from(from: &str, addr: SocketAddr) -> TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    s.connect(addr).await.unwrap()
}

/// One GET on `tcp`; the answer's text, or "" when the server closed the connection.
async fn get(mut tcp: TcpStream) -> String {
    let _ = tcp
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_holding_its_share_leaves_the_others_served() {
    let addr = ok_server().await;
    // Peer 127.0.0.2 opens many idle connections: it gets its 2 slots, the rest are closed at
    // once (not left in the backlog, not holding a slot).
    let mut idle = Vec::new();
    for _ in 0..50 {
        idle.push(connect_from("127.0.0.2", addr).await);
    }
    let t = std::time::Instant::now();
    let over = get(connect_from("127.0.0.2", addr).await).await;
    assert_eq!(over, "", "a connection over the peer's cap was served");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // Another peer is served at once, while the first still holds its share.
    let t = std::time::Instant::now();
    let answer = get(connect_from("127.0.0.1", addr).await).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert!(answer.ends_with("ok"), "{answer:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // When the first peer lets go, its slots come back.
    drop(idle);
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let a = get(connect_from("127.0.0.2", addr).await).await;
            if !a.is_empty() {
                return a;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the peer's slots came back");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_cap_holds_across_peers() {
    let addr = ok_server().await;
    // Four peers of 2 fill the 8 slots; a fifth peer is refused, not queued.
    let mut idle = Vec::new();
    for p in 2..6 {
        for _ in 0..2 {
            idle.push(connect_from(&format!("127.0.0.{p}"), addr).await);
        }
    }
    // The accept loop runs on its own task: let it take the eight.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get(connect_from("127.0.0.9", addr).await).await, "");
    drop(idle);
}

/// Bounds for the network tests: 16 slots, 4 of them for trusted peers, 2 per address, 6 per
/// network prefix.
const NETS: Limits = Limits {
    max_connections: 16,
    max_per_peer: 2,
    max_per_prefix: 6,
    reserved: 4,
    header_read: Duration::from_secs(30),
    connection: Duration::from_secs(60),
};

/// A listener under `NETS` whose trusted network is 127.9.0.0/24.
async fn nets_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let trusted = vec!["127.9.0.0/24".parse().unwrap()];
    tokio::spawn(accept_loop(listener, NETS, trusted, |tcp, _| async move {
        serve_connection(
            tcp,
            |_req| async {
                Ok::<_, std::convert::Infallible>(reply(hyper::StatusCode::OK, "text/plain", "ok"))
            },
            NETS,
        )
        .await
    }));
    addr
}

/// Issue 37: eight aliases of one network (each within its own cap) hold at most the network's
/// share; a peer of another network is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_addresses_of_one_network_hold_only_its_share() {
    let addr = nets_server().await;
    let mut idle = Vec::new();
    for p in 2..10 {
        for _ in 0..2 {
            idle.push(connect_from(&format!("127.0.0.{p}"), addr).await);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        get(connect_from("127.0.0.20", addr).await).await,
        "",
        "the network is over its share"
    );
    let answer = get(connect_from("127.0.1.1", addr).await).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    drop(idle);
}

/// Issue 37: many networks together take every general slot; the trusted network (the API
/// server's) still finds one of its reserved slots, another network does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trusted_network_is_served_when_every_other_slot_is_held() {
    let addr = nets_server().await;
    let mut idle = Vec::new();
    for net in 1..7 {
        for _ in 0..2 {
            idle.push(connect_from(&format!("127.1.{net}.1"), addr).await);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get(connect_from("127.2.0.1", addr).await).await, "");
    let answer = get(connect_from("127.9.0.1", addr).await).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    drop(idle);
}
