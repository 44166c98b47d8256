//! What decides whether an SEV-SNP confidential VM with passed-through GPUs can start, read the
//! way the kernel and Proxmox decide it (issue 25, part 1): `kvm_amd`'s `sev_snp` parameter,
//! `/dev/sev`, the SEV firmware's SNP API version and the kernel's own refusals from its log
//! (`drivers/crypto/ccp/sev-dev.c` logs `SEV-SNP API:%d.%d build:%d`; `drivers/iommu/amd/init.c`
//! logs `SNP: <why>, SNP cannot be supported.`), Proxmox's CPUID view
//! (`/run/qemu-server/host-hw-capabilities.json`), and `vfio-pci`'s `disable_idle_d3`.

use super::Root;
use crate::host::model::ConfidentialFacts;

/// The facts under `root`, with the kernel log `log` (read once for the IOMMU and for this).
pub fn observe(root: &Root, log: &str) -> ConfidentialFacts {
    let flag = |p: &str| {
        root.read(p).map(|v| {
            let v = v.trim();
            v == "Y" || v == "1"
        })
    };
    let mut f = ConfidentialFacts {
        kvm_sev_snp: flag("/sys/module/kvm_amd/parameters/sev_snp"),
        dev_sev: root.path("/dev/sev").exists(),
        vfio_disable_idle_d3: flag("/sys/module/vfio_pci/parameters/disable_idle_d3"),
        proxmox_snp: root
            .read("/run/qemu-server/host-hw-capabilities.json")
            .and_then(|t| proxmox_snp(&t)),
        ..ConfidentialFacts::default()
    };
    parse_log(log, &mut f);
    f
}

/// `amd-sev.sev-support-snp` of Proxmox's capabilities file.
pub fn proxmox_snp(json: &str) -> Option<bool> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.get("amd-sev")?.get("sev-support-snp")?.as_bool()
}

/// The SNP API version and the kernel's refusals from the kernel log (the last version wins: a
/// firmware update reloads it).
pub fn parse_log(log: &str, f: &mut ConfidentialFacts) {
    for line in log.lines().take(200_000) {
        if let Some(rest) = line.split("SEV-SNP API:").nth(1) {
            let v: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .take(16)
                .collect();
            if v.contains('.') {
                f.snp_api = Some(v);
            }
        }
        if line.contains("SNP cannot be supported") && f.kernel_refusals.len() < 8 {
            let at = line.find("SNP: ").unwrap_or(0);
            let msg = crate::text::sanitize(&line[at..], 200);
            if !f.kernel_refusals.contains(&msg) {
                f.kernel_refusals.push(msg);
            }
        }
    }
}

#[cfg(test)]
mod tests;
