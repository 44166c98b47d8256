//! The systemd sandboxing an SGLang server's unit gets: only options SGLang (with PyTorch,
//! Triton, NCCL and the CUDA driver) is known to tolerate.
//!
//! | option | where | why it is safe for SGLang |
//! |---|---|---|
//! | `NoNewPrivileges=yes` | everywhere | nothing in SGLang needs setuid; a tenant's code cannot gain privileges through one |
//! | `RestrictSUIDSGID=yes` | everywhere | it creates no setuid files |
//! | `LockPersonality=yes` | everywhere | it never changes the execution domain |
//! | `RestrictRealtime=yes` | everywhere | it uses no realtime scheduling |
//! | `SystemCallArchitectures=native` | everywhere | x86-64 code only |
//! | `ProtectSystem=full` | host | `/usr`, `/boot`, `/etc` read-only: it writes only caches in `$HOME` and `/tmp` |
//! | `PrivateTmp=yes` | host | its ZMQ IPC sockets in `/tmp` are shared only among its own processes, all in the unit; `/dev/shm` (NCCL) is unaffected |
//! | `ProtectKernelTunables=yes`, `ProtectKernelModules=yes`, `ProtectKernelLogs=yes`, `ProtectControlGroups=yes`, `ProtectClock=yes`, `ProtectHostname=yes` | host | it only reads `/proc` and `/sys` (NCCL topology) |
//!
//! | `RuntimeDirectory=gpuplane/<unit>` with `WorkingDirectory=` there | everywhere | a private, empty directory systemd creates for the unit's user and removes when it stops: a relative path in SGLang's arguments or a template name cannot open a file in `/` |
//!
//! The options marked *host* need a mount namespace; an unprivileged LXC container without
//! `nesting=1` cannot create one and systemd would fail the unit (`226/NAMESPACE`), so
//! container units get only the first group (seccomp and `prctl` based, which work there).
//!
//! Left out on purpose: `PrivateDevices` (hides `/dev/nvidia*`), `MemoryDenyWriteExecute`
//! (Triton, PyTorch and the CUDA driver JIT-compile into writable+executable memory),
//! `ProtectHome` (venvs and caches live in home directories, e.g. `/root/ml-env`),
//! `ProtectSystem=strict` (model downloads and compile caches need deployment-specific
//! `ReadWritePaths`), `PrivateNetwork`/`RestrictAddressFamilies` (it listens; NCCL and RDMA use
//! several families), `SystemCallFilter` (CUDA, NCCL and PyTorch use syscalls outside
//! `@system-service`, e.g. `mbind`, `process_vm_readv`), `CapabilityBoundingSet` (a unit run as
//! a non-root `User=` has none anyway; one run as root in a container may need to read files of
//! other owners). `NoNewPrivileges` stops the setuid `nvidia-modprobe`: the host loads
//! `nvidia_uvm` at boot (it does on Proxmox with the NVIDIA driver installed).

/// The sandboxing lines (`Key`, `value`) for a unit on the host (`on_host`) or in a container.
///
/// # Guarantees
/// Constant text (no spec input); the host set contains the container set.
pub fn options(on_host: bool) -> Vec<(String, String)> {
    let everywhere: &[(&str, &str)] = &[
        ("NoNewPrivileges", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("RestrictRealtime", "yes"),
        ("SystemCallArchitectures", "native"),
    ];
    let host: &[(&str, &str)] = &[
        ("ProtectSystem", "full"),
        ("PrivateTmp", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectControlGroups", "yes"),
        ("ProtectClock", "yes"),
        ("ProtectHostname", "yes"),
    ];
    let extra: &[(&str, &str)] = if on_host { host } else { &[] };
    everywhere
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The unit's private working directory, relative to `/run` (systemd's `RuntimeDirectory=`):
/// `gpuplane/<unit name>`, every byte but `[A-Za-z0-9._-]` replaced by `_`, so the value is
/// plain text for the unit file whatever the unit's name.
pub fn runtime_directory(unit_name: &str) -> String {
    let stem = unit_name.strip_suffix(".service").unwrap_or(unit_name);
    let safe: String = stem
        .chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .collect();
    format!("gpuplane/{safe}")
}

#[cfg(test)]
mod tests;
