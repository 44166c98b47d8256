//! A GPU's identity: what tells one GPU from another beyond its PCI address. Observed by the
//! backends (`host/local/identity.rs`), remembered by the ledger (`host/ledger.rs`) and matched
//! by the layout guard; a leaf, so that the host model and the ledger can both name it.

use serde::{Deserialize, Serialize};

/// What tells one GPU from another when all are the same model: facts that survive a
/// renumbering of the buses, and the GPU's own identity where it could be read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuIdentity {
    /// PCIe Device Serial Number (extended capability 0x0003), 16 hex digits; any driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsn: Option<String>,
    /// Physical slot name (`/sys/bus/pci/slots`), where the platform names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// Root complex, then each hop's device.function (`pci0000:00/01.0/00.0`): no bus numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// NVML UUID (`GPU-...`), while the GPU is on `nvidia`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Board serial from NVML, while the GPU is on `nvidia`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
}

impl GpuIdentity {
    pub fn is_empty(&self) -> bool {
        *self == GpuIdentity::default()
    }
}

/// `slot 3 (GPU-624a…)`, `uuid GPU-…`, `DSN 7800…` or `0000:41:00.0`, for messages.
pub fn describe(id: &GpuIdentity, address: &str) -> String {
    let strong = id
        .uuid
        .clone()
        .or_else(|| id.serial.clone().map(|s| format!("serial {s}")))
        .or_else(|| id.dsn.clone().map(|d| format!("DSN {d}")));
    match (&id.slot, strong) {
        (Some(s), Some(x)) => format!("slot {s} ({x})"),
        (Some(s), None) => format!("slot {s}"),
        (None, Some(x)) => x,
        (None, None) => format!("the GPU at {address}"),
    }
}
