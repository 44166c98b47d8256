use super::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Instant;

/// A one-connection server that reads the request head and then runs `answer` on the socket.
fn serve_once(answer: impl FnOnce(&mut std::net::TcpStream) + Send + 'static) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 4096];
        let mut head = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                return;
            }
            head.extend_from_slice(&buf[..n]);
        }
        answer(&mut s);
    });
    port
}

#[test]
fn reads_a_chunked_answer_with_multibyte_text_split_across_chunks() {
    let port = serve_once(|s| {
        // "é" (c3 a9) is split between two chunks; the old hand-written decoder sliced text.
        let _ = s.write_all(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"\xc3\r\n4\r\n\xa9\":1\r\n1\r\n}\r\n0\r\n\r\n",
        );
    });
    let (code, body) = get("127.0.0.1", port, "/v1/models", Duration::from_secs(5)).unwrap();
    assert_eq!((code, body.as_str()), (200, "{\"é\":1}"));
}

#[test]
fn an_endless_body_is_cut_at_the_cap_not_kept() {
    let port = serve_once(|s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
        let chunk = vec![b'x'; 64 * 1024];
        // 64 MiB unless the client hangs up first.
        for _ in 0..1024 {
            if s.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let e = get("127.0.0.1", port, "/server_info", Duration::from_secs(20)).unwrap_err();
    assert!(e.to_string().contains("limit"), "{e}");
}

#[test]
fn a_trickling_server_is_given_up_on_at_the_deadline() {
    let port = serve_once(|s| {
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
        for _ in 0..100 {
            if s.write_all(b"x").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let t = Instant::now();
    let e = get(
        "127.0.0.1",
        port,
        "/health_generate",
        Duration::from_secs(1),
    );
    assert!(e.is_err(), "a 20 s answer came back within a 1 s deadline");
    eprintln!("gave up after {:?}", t.elapsed());
}

#[test]
fn a_status_other_than_200_is_an_answer_not_an_error() {
    let port = serve_once(|s| {
        let _ =
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 7\r\n\r\nloading");
    });
    let (code, body) = get(
        "127.0.0.1",
        port,
        "/health_generate",
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!((code, body.as_str()), (503, "loading"));
}

#[test]
fn nobody_listening_is_an_error() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    assert!(get(
        "127.0.0.1",
        port,
        "/health_generate",
        Duration::from_secs(2)
    )
    .is_err());
}
