//! Shared harness of the end-to-end tests in `e2e/tests/`: they run the real gpuplane binary
//! against real components (a kube-apiserver + etcd, a qemu VM with a real kernel, SGLang's own
//! argument parser) and fail, never skip, when a component is missing.
//!
//! - [`paths`]: the repository, the gpuplane binary (`GPUPLANE_BIN`), the cache
//!   (`GPUPLANE_E2E_CACHE`).
//! - [`kube`]: a real control plane, kubectl, Kubernetes objects, the agent tests' cluster.
//! - [`agent`]: `gpuplane run` as a child process, its log and metrics.
//! - [`fleet`]: many nodes' objects, one process's RSS and CPU, the API server's metrics.
//! - [`scenario`]: start (cluster, agent, examples converged) and end of an agent test.
//! - [`sim_host`] and [`kpro6`]: the simulated host file and the reference host's facts.
//! - [`wait`]: polling until a condition holds. [`net`]: free ports, HTTP GET. [`tcp_cut`]: a
//!   relay that cuts the agent's connections to the API server.
//! - [`manifests`]: multi-document YAML.
//! - [`vm`]: the emulated GPU host (qemu) and its scenarios.

pub mod agent;
pub mod docs;
pub mod fleet;
pub mod kpro6;
pub mod kube;
pub mod manifests;
pub mod net;
pub mod packaging;
pub mod paths;
pub mod prometheus;
pub mod scenario;
pub mod sim_host;
pub mod tcp_cut;
pub mod vm;
pub mod wait;
