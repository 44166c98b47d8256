//! HTTP for the agent, on well-kept stacks: serving (hyper: `/metrics`, `/healthz`, `/readyz`,
//! the webhook) and reading SGLang's endpoints (ureq). A leaf: it knows nothing of Kubernetes,
//! hosts or the planner.

pub mod client;
pub mod server;
