//! The reference host (`examples/hosts/kpro6.yaml`) and its manifests (`examples/kpro6/`): names,
//! GPU addresses, and the split the agent must converge it to.

use crate::sim_host::{container_config, driver, unit_file_of};
use serde_yaml::Value as Yaml;

/// The node (and the GpuPartition's name).
pub const NODE: &str = "kpro6";
/// The InferenceServer of `examples/kpro6/server.yaml` (namespace default).
pub const SERVER: &str = "qwen35-122b";
/// Its unit in the host file.
pub const UNIT_KEY: &str = "lxc-129/sglang-qwen.service";
/// The GPUs on NUMA node 0 (stay on nvidia, in LXC 129).
pub const NUMA0: [&str; 4] = [
    "0000:01:00.0",
    "0000:11:00.0",
    "0000:61:00.0",
    "0000:71:00.0",
];
/// The GPUs on NUMA node 1 (go to vfio-pci, mapping pro6000-vm).
pub const NUMA1: [&str; 4] = [
    "0000:81:00.0",
    "0000:91:00.0",
    "0000:e1:00.0",
    "0000:f1:00.0",
];
/// The line of LXC 129's config that passes /dev/nvidia0.
pub const NVIDIA0_LINE: &str =
    "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file";

/// The server's unit file ("" when absent).
pub fn unit_file(host: &Yaml) -> String {
    unit_file_of(host, UNIT_KEY)
}

/// NUMA 0 on nvidia and in container 129, NUMA 1 on vfio-pci and out of it.
pub fn assert_reference_split(host: &Yaml) {
    for a in NUMA0 {
        assert_eq!(driver(host, a), "nvidia", "NUMA-0 GPU {a}");
    }
    for a in NUMA1 {
        assert_eq!(driver(host, a), "vfio-pci", "NUMA-1 GPU {a}");
    }
    let conf = container_config(host, "129");
    for n in 0..4 {
        assert!(
            conf.contains(&format!("/dev/nvidia{n} dev/nvidia{n} ")),
            "container 129 lacks /dev/nvidia{n}:\n{conf}"
        );
    }
    for n in 4..8 {
        assert!(
            !conf.contains(&format!("/dev/nvidia{n} ")),
            "container 129 still has /dev/nvidia{n}:\n{conf}"
        );
    }
}
