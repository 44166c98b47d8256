//! Running commands and writing sysfs files under a deadline.
//!
//! A sysfs write such as `driver/unbind` can block for as long as the driver waits for its
//! users; a command such as `pct stop` can hang on a stuck container. Every such call here has
//! a deadline: when it passes, the call is an error (the agent reports it) instead of a hung
//! agent. A blocked write runs on a detached thread that is abandoned, not killed (a thread in
//! an uninterruptible kernel wait cannot be killed); the error says so.

use super::error::LocalError;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
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

/// Most bytes kept of each of a command's stdout and stderr (the rest is read and dropped, so
/// the child never blocks on a full pipe). The container's own binaries answer `pct exec`.
pub const OUTPUT_MAX: usize = 1024 * 1024;

/// The only environment a child gets: the agent's own (tokens, kubeconfig paths, proxies) is
/// not passed on, also not through `pct exec` into containers.
const CHILD_ENV: &[(&str, &str)] = &[
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("LANG", "C.UTF-8"),
];

/// Runs `argv` (no shell) with a deadline; see [`run_with_input`].
pub fn run(argv: &[String], deadline: Duration) -> Result<CmdOutput, LocalError> {
    run_with_input(argv, None, deadline)
}

/// Runs `argv` (no shell) with `input` on its stdin (or none) and a deadline.
///
/// # Guarantees
/// * The child runs in its own process group with only [`CHILD_ENV`]; at the deadline the whole
///   group is killed (`SIGKILL`), so grandchildren (`pct exec` → `lxc-attach` → the command)
///   do not outlive it.
/// * At most [`OUTPUT_MAX`] bytes of each stream are kept; the text is lossy UTF-8.
/// * The call returns within the deadline (or 200 ms after the child's exit, if later), also
///   when a process the child left behind keeps its stdout or stderr open: that is
///   [`LocalError::OutputHeld`].
pub fn run_with_input(
    argv: &[String],
    input: Option<&[u8]>,
    deadline: Duration,
) -> Result<CmdOutput, LocalError> {
    let Some((prog, args)) = argv.split_first() else {
        return Err(LocalError::EmptyCommand);
    };
    let mut child = Command::new(prog)
        .args(args)
        .env_clear()
        .envs(CHILD_ENV.iter().copied())
        .process_group(0)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| LocalError::Spawn {
            program: prog.clone(),
            source,
        })?;
    if let (Some(data), Some(mut stdin)) = (input.map(<[u8]>::to_vec), child.stdin.take()) {
        // On its own thread: a child that does not read must not block us past the deadline.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
    }
    let t_out = reader(child.stdout.take());
    let t_err = reader(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > deadline => {
                kill_group(&mut child);
                return Err(LocalError::Killed {
                    command: argv.join(" "),
                    seconds: deadline.as_secs(),
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                kill_group(&mut child);
                return Err(LocalError::failed(
                    format!("waiting for {prog}"),
                    &e.to_string(),
                ));
            }
        }
    };
    // The child has exited; its output ends when every holder of the pipes closes them. A
    // process it left behind (`sleep 100000 &`, or one inside a container that `pct exec` does
    // not own) may never do so: the rest of the deadline is all it gets, then its group is
    // killed, and a holder out of reach is abandoned with its reader thread.
    let left = deadline.saturating_sub(start.elapsed());
    let ends = Instant::now() + left.max(Duration::from_millis(200));
    let mut outs = [None, None];
    for (slot, rx) in outs.iter_mut().zip([&t_out, &t_err]) {
        *slot = rx
            .recv_timeout(ends.saturating_duration_since(Instant::now()))
            .ok();
    }
    if outs.iter().any(Option::is_none) {
        kill_group(&mut child);
        return Err(LocalError::OutputHeld {
            command: argv.join(" "),
            seconds: deadline.as_secs(),
        });
    }
    let [stdout, stderr] = outs.map(Option::unwrap_or_default);
    Ok(CmdOutput {
        code: status.code(),
        stdout,
        stderr,
    })
}

/// Kills the child's whole process group, then reaps the child.
fn kill_group(child: &mut std::process::Child) {
    if let Ok(pgid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) with a negative pid signals the process group we created for the
        // child (process_group(0) makes its pid the group id); no memory is touched.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads a stream to its end on a thread, keeping at most [`OUTPUT_MAX`] bytes; the text
/// arrives on the channel once the stream ends (never, while someone holds it open).
fn reader<R: Read + Send + 'static>(stream: Option<R>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        if let Some(mut r) = stream {
            let mut buf = [0u8; 8192];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let room = OUTPUT_MAX.saturating_sub(kept.len());
                        kept.extend_from_slice(&buf[..n.min(room)]);
                    }
                }
            }
        }
        let _ = tx.send(String::from_utf8_lossy(&kept).into_owned());
    });
    rx
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
