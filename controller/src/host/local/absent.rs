//! What a host may lack, and that is normal on some hosts: GPUs, Proxmox, systemd. Each absence
//! is observed and said plainly in [`HostState::notes`]; none is an error of the observation
//! (a spec that needs what is missing fails its own validation, naming the thing).
//!
//! (No IOMMU groups is an IOMMU fact: `iommu.rs` notes it in `IommuState::notes`.)

use super::Root;
use crate::host::model::HostState;

/// The notes for what `st` (observed under `root`, GPUs of `vendor`) lacks.
pub fn notes(root: &Root, st: &HostState, vendor: &str) -> Vec<String> {
    let mut out = Vec::new();
    match st.gpus(vendor).count() {
        0 => out.push(format!(
            "no GPU: no display-class PCI device (class 03xx) of vendor {vendor} under \
             /sys/bus/pci/devices; there is nothing to partition"
        )),
        1 => out.push(
            "one GPU: GPU peer-to-peer does not apply (there is no pair to probe)".to_string(),
        ),
        _ => {}
    }
    if !root.path("/etc/pve").is_dir() {
        out.push(
            "no Proxmox VE: /etc/pve is absent (not a Proxmox host, or pmxcfs is not mounted); \
             there are no LXC containers, VMs or PCI mappings to observe, so only slices \
             without a consumer and servers on the host can be served"
                .to_string(),
        );
    }
    if !root.path("/run/systemd/system").is_dir() {
        out.push(
            "no systemd: /run/systemd/system is absent (the host was not booted with systemd); \
             servers on the host cannot run as units here"
                .to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests;
