//! A loopback TCP relay in front of a real server that the test can cut: every open connection is
//! shut down at once and new ones are closed as soon as they are accepted, until the relay is
//! resumed. It stands for a network cut between the agent and kube-apiserver while the API server
//! itself keeps running (TLS passes through untouched; the server's certificate names 127.0.0.1).
//! It can also become a black hole: connections stay open (and new ones are accepted) but no byte
//! goes through either way, as when a peer vanishes without a reset.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The relay; it keeps running until the process ends (its threads only block on sockets).
pub struct CutRelay {
    pub port: u16,
    cut: Arc<AtomicBool>,
    hole: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    refused: Arc<AtomicU64>,
}

impl CutRelay {
    /// Relays 127.0.0.1:`port` (a free port) to 127.0.0.1:`target`.
    pub fn start(target: u16) -> CutRelay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let hole = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let refused = Arc::new(AtomicU64::new(0));
        let (c, h, o, r) = (cut.clone(), hole.clone(), open.clone(), refused.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if h.load(Ordering::SeqCst) {
                    // Accepted and kept open, never answered.
                    o.lock().unwrap().push(client);
                    continue;
                }
                if c.load(Ordering::SeqCst) {
                    r.fetch_add(1, Ordering::SeqCst);
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let mut live = o.lock().unwrap();
                live.retain(|s| s.peer_addr().is_ok());
                live.push(client.try_clone().unwrap());
                live.push(server.try_clone().unwrap());
                drop(live);
                pipe(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    h.clone(),
                );
                pipe(server, client, h.clone());
            }
        });
        CutRelay {
            port,
            cut,
            hole,
            open,
            refused,
        }
    }

    /// Shuts every open connection down and refuses new ones until [`CutRelay::resume`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Relays new connections again (and ends a black hole).
    pub fn resume(&self) {
        self.cut.store(false, Ordering::SeqCst);
        self.hole.store(false, Ordering::SeqCst);
    }

    /// From now on no byte goes through, either way, on open or new connections; nothing is
    /// closed. [`CutRelay::cut`] then closes them all.
    pub fn black_hole(&self) {
        self.hole.store(true, Ordering::SeqCst);
    }

    /// Connections closed at once because the relay was cut.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }
}

/// Copies `from` to `to` on a thread until either side closes; drops what it reads while `hole`.
fn pipe(mut from: TcpStream, mut to: TcpStream, hole: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) if hole.load(Ordering::SeqCst) => {}
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
