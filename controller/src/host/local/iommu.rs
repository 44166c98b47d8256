//! IOMMU state: kernel command line options, group domain types, and faults from the kernel log.

use super::Root;
use crate::host::model::IommuState;
use std::collections::BTreeMap;

/// Options that decide the IOMMU mode.
pub fn cmdline_options(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .filter(|w| {
            w.starts_with("iommu=")
                || w.starts_with("intel_iommu=")
                || w.starts_with("amd_iommu=")
                || w.starts_with("iommu.")
        })
        .map(str::to_string)
        .collect()
}

/// Problems with the options that a user should hear about.
pub fn cmdline_warnings(opts: &[String]) -> Vec<String> {
    let mut w = Vec::new();
    for o in opts {
        if o == "amd_iommu=on" {
            w.push("amd_iommu=on is not a valid option (the AMD IOMMU is on by default; amd_iommu=off disables it); it is ignored by the kernel".into());
        }
    }
    w
}

/// Parses kernel log lines: the default domain type and `IO_PAGE_FAULT`/DMAR faults per device.
pub fn parse_log(lines: &str, state: &mut IommuState) {
    for line in lines.lines() {
        if let Some(rest) = line.split("iommu: Default domain type: ").nth(1) {
            state.default_domain_type = Some(rest.trim().to_string());
        }
        if line.contains("IO_PAGE_FAULT") {
            // Older kernels: `device=0000:01:00.0` inside the brackets; newer ones prefix the
            // line with the device (`vfio-pci 0000:81:00.0: AMD-Vi: Event logged [...]`).
            let dev = line
                .split("device=")
                .nth(1)
                .and_then(|s| s.split([' ', ']']).next())
                .map(str::to_string)
                .or_else(|| {
                    line.split_whitespace()
                        .map(|w| w.trim_end_matches(':'))
                        .find(|w| is_address(w))
                        .map(str::to_string)
                });
            if let Some(dev) = dev {
                *state.page_faults.entry(full_address(&dev)).or_default() += 1;
            }
        }
        if line.contains("DMAR:") && line.contains("Request device [") {
            if let Some(dev) = line
                .split("Request device [")
                .nth(1)
                .and_then(|s| s.split(']').next())
            {
                *state.page_faults.entry(full_address(dev)).or_default() += 1;
            }
        }
        if line.contains("SEV-SNP") && (line.contains("enabled") || line.contains("SNP: ")) {
            state.sev_snp = true;
        }
    }
}

/// Whether `w` is a full PCI address, `0000:01:00.0`.
pub(super) fn is_address(w: &str) -> bool {
    let b = w.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && w.chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
}

fn full_address(dev: &str) -> String {
    let d = dev.to_ascii_lowercase();
    if d.matches(':').count() == 1 {
        format!("0000:{d}")
    } else {
        d
    }
}

/// The whole IOMMU summary, with the kernel log already read (`kmsg.rs`).
pub fn observe_with(root: &Root, log: &str) -> IommuState {
    let cmdline = root.read("/proc/cmdline").unwrap_or_default();
    let mut st = IommuState {
        cmdline: cmdline_options(&cmdline),
        ..IommuState::default()
    };
    let mut types = BTreeMap::new();
    for g in root.list("/sys/kernel/iommu_groups") {
        if let (Ok(n), Some(t)) = (
            g.parse::<u32>(),
            root.read(&format!("/sys/kernel/iommu_groups/{g}/type")),
        ) {
            types.insert(n, t.trim().to_string());
        }
    }
    if types.is_empty() {
        st.notes.push("no IOMMU groups are exposed (/sys/kernel/iommu_groups is empty): the IOMMU is off or not given to this machine, so VFIO passthrough is impossible and GPU DMA is not translated".into());
    }
    st.group_types = types;
    st.notes.extend(cmdline_warnings(&st.cmdline));
    parse_log(log, &mut st);
    if root
        .read("/sys/module/kvm_amd/parameters/sev_snp")
        .is_some_and(|v| v.trim() == "Y" || v.trim() == "1")
    {
        st.sev_snp = true;
    }
    st
}

#[cfg(test)]
mod tests;
