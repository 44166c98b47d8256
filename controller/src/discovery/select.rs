//! Which servers are scrape targets, at which address, with which labels (pure).
//!
//! A server is listed when, in the reconcile just made:
//! - its `Ready` condition is `True` (a stopped, failed, starting or stalled server is not), and
//!   its `Degraded` reason is not `RolledBack` (the unit serving is an older spec's, which the
//!   spec's owner did not ask for: its series would be filed under the new spec's labels);
//! - the unit file on the host runs `sglang.launch_server` with `--enable-metrics` (what runs,
//!   not what the spec asks: they differ while a change waits or after a rollback).
//!
//! **Address.** The port is the unit's `--port` (SGLang's default 30000). The address is where
//! a Prometheus can reach it:
//! - a container server: the container's address as the host side names it (its config's
//!   static `ip=`, else its network namespace's; `host/local/container_net.rs`), the address
//!   the agent itself reached it at. A container the host knows no routable address of is not
//!   listed;
//! - a host server listening on a wildcard (`0.0.0.0`, `::`): the node's address given to the
//!   agent (`--sd-node-address`; the chart passes the pod's `status.hostIP`), else 127.0.0.1;
//! - a host server on loopback: 127.0.0.1 — only a Prometheus on the same machine reaches it
//!   (the standalone agent's file_sd next to a local Prometheus); listen on a wildcard or the
//!   node's address to be scraped from elsewhere;
//! - a host server on one of the host's addresses: that address.
//!
//! **Labels:** `namespace`, `inference_server`, `model` (the served name), `node`,
//! `partition`, `slice`, `tp`.

use super::Target;
use crate::desired::{Desired, DesiredServer};
use crate::host::model::{HostState, Location};
use gpuplane_crds::condition::{types, Condition};

/// What the node tells discovery about itself.
#[derive(Debug, Clone, Default)]
pub struct Node<'a> {
    /// The node's name (label `node`).
    pub name: &'a str,
    /// The address a host server listening on a wildcard is reached at; `None`: 127.0.0.1.
    pub address: Option<&'a str>,
}

/// The targets of `desired`'s servers on `host`, each with the conditions just computed for it
/// (`conditions(server)`), in the order of `desired.servers`.
pub fn targets<'c>(
    desired: &Desired,
    host: &HostState,
    node: &Node<'_>,
    conditions: impl Fn(&DesiredServer) -> &'c [Condition],
) -> Vec<Target> {
    desired
        .servers
        .iter()
        .filter(|s| listed(conditions(s)))
        .filter_map(|s| target(s, host, node))
        .take(super::MAX_TARGETS)
        .collect()
}

/// Ready, and not serving a rolled-back unit.
fn listed(conditions: &[Condition]) -> bool {
    let is = |ty: &str, status: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == ty)
            .filter(|c| c.status == status)
    };
    is(types::READY, "True").is_some()
        && is(types::DEGRADED, "True").is_none_or(|c| c.reason != crate::plan::Reason::RolledBack)
}

/// The value of `--flag value` or `--flag=value` in `argv`.
fn flag(argv: &[String], name: &str) -> Option<String> {
    argv.iter().enumerate().find_map(|(i, a)| {
        if a == name {
            argv.get(i + 1).cloned()
        } else {
            a.strip_prefix(name)
                .and_then(|r| r.strip_prefix('='))
                .map(str::to_string)
        }
    })
}

/// One server's target, when its unit runs SGLang with metrics at an address Prometheus can reach.
fn target(s: &DesiredServer, host: &HostState, node: &Node<'_>) -> Option<Target> {
    let unit = host.unit(&s.unit)?;
    let parsed = crate::systemd::unit::parse(unit.file.as_deref()?).ok()?;
    let argv = &parsed.exec_start;
    if !argv.iter().any(|a| a == "sglang.launch_server")
        || !argv.iter().any(|a| a == "--enable-metrics")
    {
        return None;
    }
    let port: u16 = flag(argv, "--port")
        .and_then(|p| p.parse().ok())
        .unwrap_or(30000);
    let listen = flag(argv, "--host").unwrap_or_else(|| "127.0.0.1".into());
    let reached = unit.server.as_ref()?.reached_at.clone()?;
    let address = match s.unit.location {
        Location::Host if matches!(listen.as_str(), "0.0.0.0" | "::") => {
            node.address.map(str::to_string).unwrap_or(reached)
        }
        _ => reached,
    };
    let address = if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    };
    let (namespace, name) = s.id.split_once('/').unwrap_or(("", s.id.as_str()));
    let model =
        flag(argv, "--served-model-name").unwrap_or_else(|| s.spec.model.served_name.clone());
    let tp = flag(argv, "--tp-size")
        .or_else(|| flag(argv, "--tp"))
        .unwrap_or_else(|| "1".into());
    Some(Target::new(
        address,
        &[
            ("namespace", namespace),
            ("inference_server", name),
            ("model", &model),
            ("node", node.name),
            ("partition", &s.spec.partition_ref.name),
            ("slice", &s.spec.partition_ref.slice),
            ("tp", &tp),
        ],
    ))
}
