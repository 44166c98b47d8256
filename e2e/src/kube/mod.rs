//! Kubernetes: a real control plane ([`control_plane`]), kubectl ([`kubectl`]), reading objects
//! ([`objects`]) and the agent tests' cluster with CRDs, RBAC and a simulated host ([`cluster`]).

pub mod cluster;
pub mod control_plane;
pub mod kubectl;
pub mod objects;

pub use cluster::{by_name, Cluster, LEASE_NS};
pub use control_plane::{describe, ControlPlane, KubeBinaries};
pub use kubectl::{table, Kubectl, KubectlOutput};
pub use objects::{cond3, condition, has_finalizer, ready_for_generation, ready_is};
