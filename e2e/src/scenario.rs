//! Start and end of the agent tests' scenarios: a [`Cluster`] with agent `agent-a` on it and the
//! examples converged, and the closing line with how long a test took.

use crate::agent::{Agent, AgentOpts};
use crate::kube::Cluster;
use std::time::Instant;

/// Starts a cluster named `name` and agent `agent-a` (default options) on it, applies
/// `examples/kpro6/` and waits until both resources are Ready.
pub fn start_converged(name: &str) -> (Cluster, Agent) {
    let c = Cluster::start(name);
    let a = Agent::start(&c, "agent-a", AgentOpts::default());
    c.apply_examples_and_wait();
    (c, a)
}

/// Prints how long `test` took since `t0`.
pub fn report_duration(test: &str, t0: Instant) {
    eprintln!("[kube_agent] {test}: {:.1}s", t0.elapsed().as_secs_f64());
}
