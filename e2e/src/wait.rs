//! Waiting for a condition: poll a closure until it succeeds or a timeout passes.

use std::time::{Duration, Instant};

/// Polls `f` every 250 ms until it returns Ok, panicking after `timeout` with its last error.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if start.elapsed() > timeout => {
                panic!("timed out after {timeout:?} waiting for {what}; last state: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}
