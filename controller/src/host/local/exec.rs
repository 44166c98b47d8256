//! Running commands and writing sysfs files under a deadline.
//!
//! A sysfs write such as `driver/unbind` can block for as long as the driver waits for its
//! users; a command such as `pct stop` can hang on a stuck container. Every such call here has
//! a deadline: when it passes, the call is an error (the agent reports it) instead of a hung
//! agent. A blocked write runs on a detached thread that is abandoned, not killed (a thread in
//! an uninterruptible kernel wait cannot be killed); the error says so.

use super::error::LocalError;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a finished command printed.
#[derive(Debug, Clone)]
pub struct CmdOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOutput {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `argv` (no shell) with a deadline; the child is killed when it passes.
pub fn run(argv: &[String], deadline: Duration) -> Result<CmdOutput, LocalError> {
    let Some((prog, args)) = argv.split_first() else {
        return Err(LocalError::EmptyCommand);
    };
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| LocalError::Spawn {
            program: prog.clone(),
            source,
        })?;
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LocalError::Killed {
                    command: argv.join(" "),
                    seconds: deadline.as_secs(),
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                return Err(LocalError::failed(
                    format!("waiting for {prog}"),
                    &e.to_string(),
                ))
            }
        }
    };
    Ok(CmdOutput {
        code: status.code(),
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    })
}

/// Writes `value` to a sysfs attribute, failing if the write takes longer than `deadline`.
pub fn sysfs_write(path: &Path, value: &str, deadline: Duration) -> Result<(), LocalError> {
    let (tx, rx) = mpsc::channel();
    let p = path.to_path_buf();
    let v = value.to_string();
    std::thread::spawn(move || {
        let r = std::fs::write(&p, v.as_bytes()).map_err(|e| e.to_string());
        let _ = tx.send(r);
    });
    match rx.recv_timeout(deadline) {
        Ok(r) => r.map_err(|e| {
            LocalError::Sysfs(format!("writing {value:?} to {}: {e}", path.display()))
        }),
        Err(_) => Err(LocalError::Sysfs(format!(
            "writing {value:?} to {} blocked for more than {} s (the driver may be waiting for a user of the device); the write was abandoned",
            path.display(),
            deadline.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests;
