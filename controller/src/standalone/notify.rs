//! `sd_notify(READY=1)`: a datagram to `$NOTIFY_SOCKET`, as systemd's `Type=notify` expects.
//! Does nothing outside systemd.

use std::os::unix::net::UnixDatagram;

/// Tells systemd the service is ready; errors are logged, never fatal.
pub fn ready() {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = UnixDatagram::unbound().and_then(|s| {
        let p = std::path::Path::new(&path);
        // An abstract socket is named with a leading '@'.
        if let Some(name) = p.to_str().and_then(|s| s.strip_prefix('@')) {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            s.send_to_addr(b"READY=1\n", &addr)
        } else {
            s.send_to(b"READY=1\n", p)
        }
    });
    if let Err(e) = sent {
        tracing::warn!("sd_notify READY=1: {e}");
    }
}
