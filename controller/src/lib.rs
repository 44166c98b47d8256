//! gpuplane: a reconciliation agent for GPU hosts.
//!
//! One idea carries the design: **observe → plan → apply**, with the plan a pure function.
//!
//! The map of the modules — each with its concern and what it may use, the one pass every
//! front door shares (`pass`), and a newcomer's walk from each door to a host write — is
//! `ARCHITECTURE.md`, kept true by `controller/tests/layers.rs`, which reads its rules from there.

pub mod atomic_file;
pub mod bootloader;
pub mod cli;
pub mod clock;
pub mod converge;
pub mod crashpoint;
pub mod desired;
pub mod digest;
pub mod discovery;
pub mod door;
pub mod health;
pub mod host;
pub mod http;
pub mod kubeapi;
pub mod layout;
pub mod manifests;
pub mod memo;
pub mod metrics;
pub mod modelfiles;
pub mod p2p;
pub mod pass;
pub mod plan;
pub mod pool;
pub mod proxmox;
pub mod reconcile;
pub mod resource_key;
pub mod sglang;
pub mod standalone;
pub mod status;
pub mod status_dir;
pub mod status_view;
pub mod step;
pub mod systemd;
#[cfg(test)]
pub(crate) mod testutil;
pub mod text;
pub mod webhook;

/// The simulated reference host, embedded so `gpuplane converge` runs with no arguments.
pub const EMBEDDED_HOST: &str = include_str!("../../examples/hosts/kpro6.yaml");
/// The reference split manifests, embedded for the same reason.
pub const EMBEDDED_MANIFESTS: &[(&str, &str)] = &[
    (
        "examples/kpro6/partition.yaml",
        include_str!("../../examples/kpro6/partition.yaml"),
    ),
    (
        "examples/kpro6/server.yaml",
        include_str!("../../examples/kpro6/server.yaml"),
    ),
];
