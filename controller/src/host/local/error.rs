//! Errors of the real host backend, by kind, so callers match a variant instead of a string.
//!
//! Converted once into the backend-neutral [`crate::host::HostError`] (which the converge loop
//! turns into a stop and the status into a condition). The `Display` texts are what users read
//! in conditions and events; they name the file, command or device and what to do.

use std::path::PathBuf;

/// A failure of the real host.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A process holds the GPU's device nodes: unbinding it now would pull it from under them.
    #[error("GpuInUse: {address} is held by {}; not unbinding", holders.join(", "))]
    InUse {
        address: String,
        /// Who holds it, e.g. `pid 4242 (python3) in container 129`.
        holders: Vec<String>,
    },
    /// The PCI device is not on the bus.
    #[error("no PCI device {address}")]
    NoDevice { address: String },
    /// `drivers_probe` reported success, but the device is not on the driver it was told to take.
    #[error("probe of {address} bound {} instead of {want}", bound.as_deref().unwrap_or("no driver"))]
    WrongDriver {
        address: String,
        bound: Option<String>,
        want: String,
    },
    /// A file operation failed (`action` says which: `cannot create`, `cannot write`, ...).
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The atomic replace of a file failed at the rename.
    #[error("cannot rename {} to {}: {source}", from.display(), to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    /// A file would be larger than pmxcfs accepts.
    #[error("{} would exceed pmxcfs's 1 MiB file limit", path.display())]
    TooLarge { path: PathBuf },
    /// A Proxmox lock could not be taken (the texts are Proxmox's own).
    #[error("{0}")]
    Lock(String),
    /// Another writer holds a Proxmox lock past the acquire timeout: a wait, not a failure (a
    /// dead writer's cfs lock expires after 120 s; a flock goes with its holder).
    #[error("{} is held{}; waited {waited_secs} s", lock.display(), held_secs.map(|s| format!(" (taken {s} s ago; a dead writer's lock expires after 120 s)")).unwrap_or_default())]
    LockHeld {
        lock: PathBuf,
        held_secs: Option<u64>,
        waited_secs: u64,
    },
    /// An empty command line (a bug in the caller).
    #[error("empty command")]
    EmptyCommand,
    /// A program could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// A program ran past its deadline and was killed.
    #[error("{command} did not finish within {seconds} s and was killed")]
    Killed { command: String, seconds: u64 },
    /// The observation's commands together ran past its budget: the look is given up.
    #[error("the observation of the host ran past its budget of {seconds} s (a command, or a container answering `pct exec`, is slow or hung); nothing was decided on it, it is tried again")]
    ObserveBudget { seconds: u64 },
    /// One server's preflight (its reads through `pct exec`, its import check) used up its own
    /// budget: nothing more is run for it in this observation, which goes on.
    #[error("the preflight of this server ran past its budget of {seconds} s (a command where it runs hung or kept its output open); it is tried again at the next observation")]
    PreflightBudget { seconds: u64 },
    /// A program exited, but something it left behind kept its output open past the deadline.
    #[error("{command} exited, but a process it left behind kept its output open for more than {seconds} s; its process group was killed and the output dropped")]
    OutputHeld { command: String, seconds: u64 },
    /// A program ran and failed; `detail` is what it printed on stderr.
    #[error("{command}: {detail}")]
    Failed { command: String, detail: String },
    /// A write to a sysfs attribute failed or blocked past its deadline.
    #[error("{0}")]
    Sysfs(String),
    /// The P2P probe did not produce a usable answer.
    #[error("{0}")]
    Probe(String),
    /// A Proxmox file could not be changed as asked.
    #[error("{0}")]
    Edit(String),
}

impl LocalError {
    /// The backend-neutral error for a failed `step`: the one conversion out of this backend.
    pub fn into_host_error(self, step: &crate::step::Step) -> crate::host::HostError {
        use crate::host::HostError;
        match self {
            LocalError::InUse { address, holders } => HostError::InUse {
                step: step.to_string(),
                address,
                holders,
            },
            LocalError::LockHeld { ref lock, .. } => HostError::LockHeld {
                step: step.to_string(),
                lock: lock.display().to_string(),
                message: self.to_string(),
            },
            e => HostError::Step {
                step: step.to_string(),
                message: e.to_string(),
            },
        }
    }

    /// An I/O failure on `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LocalError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A command that ran and failed, with its trimmed stderr.
    pub fn failed(command: impl Into<String>, stderr: &str) -> Self {
        LocalError::Failed {
            command: command.into(),
            detail: stderr.trim().to_string(),
        }
    }
}
