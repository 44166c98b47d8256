//! gpuplane: a reconciliation agent for GPU hosts.
//!
//! One idea carries the design: **observe → plan → apply**, with the plan a pure function.
//!
//! | folder      | concern                                                          |
//! |-------------|------------------------------------------------------------------|
//! | `host`      | the host model and its backends (`local` real host, `sim`)       |
//! | `step`      | `Step`: the words the planner and the backends share             |
//! | `desired`   | validation of specs and resolution against the host             |
//! | `p2p`       | GPU peer-to-peer policy and the correctness probe                |
//! | `plan`      | the pure planner: ordered, typed steps                           |
//! | `apply`     | the one door every host write goes through                       |
//! | `converge`  | the loop: observe, plan, apply one step, repeat; readiness       |
//! | `status`    | conditions from what was observed                                |
//! | `proxmox`   | byte-preserving editors of `/etc/pve` files                      |
//! | `systemd`   | unit rendering with systemd's quoting rules, unit names          |
//! | `sglang`    | SGLang's flags, launch command, startup phases, speculative checks |
//! | `manifests` | reading resources from YAML files and directories                |
//! | `modelfiles`| model directories read without trusting them (safetensors headers) |
//! | `reconcile` | the Kubernetes agent (`gpuplane run`): controller, lease, metrics |
//! | `cli`       | the `gpuplane` command                                           |
//!
//! Dependency rules (`ARCHITECTURE.md` has the picture): `desired`, `p2p`, `plan` and
//! `status` are pure; `plan` knows `desired`, `step` and `host::model`, never a backend; `host`
//! knows nothing of Kubernetes. Host writes happen only in a backend's `Host::apply`, reached
//! only through `apply::Door`, which `converge` holds (and `cli` for the single P2P probe step);
//! `reconcile` and `cli` are the only places where observe, plan and apply meet the outside.

pub mod apply;
pub mod cli;
pub mod converge;
pub mod crashpoint;
pub mod desired;
pub mod host;
pub mod http;
pub mod kubeapi;
pub mod manifests;
pub mod metrics;
pub mod modelfiles;
pub mod p2p;
pub mod plan;
pub mod proxmox;
pub mod reconcile;
pub mod sglang;
pub mod standalone;
pub mod status;
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
