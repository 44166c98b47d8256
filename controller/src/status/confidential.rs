//! The partition's `ConfidentialReady` and `ConfidentialMixed` (issue 25, part 1): whether the
//! host can start an SEV-SNP VM with passed-through GPUs, judged on the facts the backend read
//! (`host::model::ConfidentialFacts`) before the VM is asked to start. One reason per missing
//! prerequisite; every missing one is in the message. Pure.

use super::{Reason, ResourceStatus};
use crate::desired::{Desired, ResolvedConsumer};
use crate::host::model::{HostState, IommuMode};
use gpuplane_crds::condition::{types, Condition, Time};
use gpuplane_crds::{set_condition, GpuDriver};

/// NVIDIA's deployment guide asks for at least this SNP API (SEV firmware) version.
const MIN_SNP_API: (u32, u32) = (1, 51);

/// The VM slices whose VM is an SNP guest: (slice, vmid).
fn snp_slices<'a>(d: &'a Desired, h: &HostState) -> Vec<(&'a str, u32)> {
    d.partition
        .slices
        .iter()
        .filter_map(|s| match &s.consumer {
            Some(ResolvedConsumer::Vm { vmid, .. })
                if h.vms.get(vmid).is_some_and(|v| v.is_snp()) =>
            {
                Some((s.name.as_str(), *vmid))
            }
            _ => None,
        })
        .collect()
}

/// `major.minor` as numbers.
fn version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Every prerequisite that is not met: (reason, what is wrong and how to fix it).
pub fn missing(h: &HostState) -> Vec<(Reason, String)> {
    let f = &h.confidential;
    let mut out = Vec::new();
    if f.kvm_sev_snp != Some(true) {
        out.push((Reason::SevSnpDisabled, match f.kvm_sev_snp {
            Some(false) => "kvm_amd's sev_snp parameter is N: enable SEV-SNP in the BIOS and load kvm_amd with sev_snp=1".to_string(),
            _ => "kvm_amd is not loaded (no /sys/module/kvm_amd/parameters/sev_snp): SEV-SNP guests need it".to_string(),
        }));
    }
    if !f.dev_sev {
        out.push((
            Reason::SevDeviceMissing,
            "/dev/sev does not exist: the PSP (ccp) driver did not initialise SEV".into(),
        ));
    }
    match f.snp_api.as_deref().and_then(version) {
        Some(v) if v < MIN_SNP_API => out.push((Reason::SevFirmwareTooOld, format!(
            "the SEV firmware's SNP API is {}.{}; NVIDIA's deployment guide needs at least {}.{}: update the platform firmware",
            v.0, v.1, MIN_SNP_API.0, MIN_SNP_API.1
        ))),
        Some(_) => {}
        None => out.push((Reason::SevFirmwareUnknown, "the kernel log names no SEV-SNP API version (\"SEV-SNP API:x.y\"): SNP firmware was not initialised".into())),
    }
    let refused = |what: &str| f.kernel_refusals.iter().find(|r| r.contains(what)).cloned();
    if let Some(r) = refused("passthrough").or_else(|| {
        (h.iommu.mode() == IommuMode::Passthrough)
            .then(|| "the IOMMU's groups are identity (passthrough) domains".to_string())
    }) {
        out.push((Reason::IommuPassthrough, format!("{r} — Linux turns SNP off when the IOMMU is in passthrough mode (drivers/iommu/amd/init.c): remove iommu=pt from the kernel command line")));
    }
    if let Some(r) = refused("V2 page table") {
        out.push((
            Reason::IommuV2PageTable,
            format!("{r} — SNP needs the AMD IOMMU's v1 page table: remove amd_iommu=pgtbl_v2"),
        ));
    }
    for r in &f.kernel_refusals {
        if !r.contains("passthrough") && !r.contains("V2 page table") {
            out.push((Reason::KernelRefusedSnp, format!("the kernel logged: {r}")));
        }
    }
    let kernel_no = !out.is_empty();
    match f.proxmox_snp {
        Some(true) if kernel_no => out.push((Reason::ProxmoxDisagrees, "Proxmox's host-hw-capabilities.json says sev-support-snp: true (it reads CPUID only), but the kernel cannot run SNP guests (above): Proxmox will let the VM try to start".into())),
        Some(false) => out.push((Reason::ProxmoxSaysNoSnp, "Proxmox's host-hw-capabilities.json says sev-support-snp: false: Proxmox refuses amd-sev: type=snp on this host".into())),
        _ => {}
    }
    if f.vfio_disable_idle_d3 != Some(true) {
        out.push((Reason::VfioIdleD3, "vfio-pci's disable_idle_d3 is not set: a GPU left in D3cold cannot change its confidential-computing state or be reset (NVIDIA's deployment guide); add vfio-pci.disable_idle_d3=1 to the kernel command line".into()));
    }
    out
}

/// Sets `ConfidentialReady` (and `ConfidentialMixed`) on the partition's status when one of its
/// VM consumers is an SNP guest; nothing otherwise.
pub fn conditions(st: &mut ResourceStatus, d: &Desired, h: &HostState, g: Option<i64>, now: &Time) {
    let snp = snp_slices(d, h);
    if snp.is_empty() {
        return;
    }
    let vms: Vec<String> = snp
        .iter()
        .map(|(s, v)| format!("VM {v} (slice {s})"))
        .collect();
    let gaps = missing(h);
    let (status, reason, message) = match gaps.first() {
        Some((reason, _)) => (
            "False",
            *reason,
            format!(
                "this host cannot start {} as a confidential VM with its GPUs: {}",
                vms.join(", "),
                gaps.iter().map(|(r, m)| format!("{r}: {m}")).collect::<Vec<_>>().join("; ")
            ),
        ),
        // No tool reads the GPUs' CC mode without the NVIDIA driver here: say so, never Ready.
        None => (
            "Unknown",
            Reason::CcModeNotChecked,
            format!(
                "every host prerequisite of {} is met (kvm_amd sev_snp, /dev/sev, SNP API {}, a translating IOMMU with the v1 page table, vfio-pci disable_idle_d3); the GPUs' confidential-computing mode was not checked (it needs NVIDIA's gpu-admin-tools on the vfio-pci GPUs)",
                vms.join(", "),
                h.confidential.snp_api.as_deref().unwrap_or("?")
            ),
        ),
    };
    put(
        st,
        types::CONFIDENTIAL_READY,
        status,
        reason,
        message,
        g,
        now,
    );
    let on_nvidia: Vec<&str> = d
        .partition
        .slices
        .iter()
        .filter(|s| s.driver == GpuDriver::Nvidia && !s.gpus.is_empty())
        .map(|s| s.name.as_str())
        .collect();
    if !on_nvidia.is_empty() {
        put(st, types::CONFIDENTIAL_MIXED, "True", Reason::MixedPartition, format!(
            "slices {} keep GPUs on nvidia beside the confidential {}: NVIDIA's confidential-computing support matrix requires every GPU of a host in CC mode and in one confidential VM; this shape is outside it (informational: nothing is refused)",
            on_nvidia.join(", "),
            vms.join(", ")
        ), g, now);
    }
}

fn put(
    st: &mut ResourceStatus,
    t: &str,
    status: &str,
    reason: Reason,
    message: String,
    g: Option<i64>,
    now: &Time,
) {
    set_condition(
        &mut st.conditions,
        Condition {
            type_: t.into(),
            status: status.into(),
            reason: reason.into(),
            message: crate::text::truncate(&message, 4000),
            observed_generation: g,
            last_transition_time: now.clone(),
        },
    );
}

#[cfg(test)]
mod tests;
