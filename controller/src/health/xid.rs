//! The curated Xid table: what each NVIDIA Xid means for the GPU that logged it.
//!
//! Source: NVIDIA's Xid catalogue (`Xid-Catalog.xlsx`, Ampere and later, linked from
//! docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), its "Immediate Action" column
//! mapped to a [`Class`]: `IGNORE` → [`Class::Informational`], `RESTART_APP` →
//! [`Class::Application`], `RESET_GPU` (and `WORKFLOW_XID_48` alone) → [`Class::ResetGpu`],
//! `RESTART_BM` → [`Class::RebootNode`], `CONTACT_SUPPORT` and the NVLink workflow →
//! [`Class::ContactSupport`]. Where the catalogue sends a person to another Xid (45: "follow the
//! other Xid"; 43: "GPU stopped processing, GPU healthy") the GPU is the application's, as the
//! NVIDIA DRA driver's skip list has it (13, 31, 43, 45, 68, 109 — except 109, which the catalogue
//! says needs a reset). Xid 154 carries its own action in its text. The table with each row's
//! source is in `docs/health.md`; `health/tests.rs` checks the two agree.

/// What an Xid says of the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// Nothing to do (a recorded row remap, a corrected error rate).
    Informational,
    /// The application's fault; the GPU is healthy (restart the application).
    Application,
    /// The GPU needs a reset before it serves again.
    ResetGpu,
    /// The node needs a reboot (the GPU fell off the bus).
    RebootNode,
    /// The board needs a field diagnostic or a replacement.
    ContactSupport,
    /// Not in the table: a person should look.
    Unknown,
}

/// `(xid, mnemonic, class)`, in the catalogue's order.
pub const TABLE: &[(u32, &str, Class)] = &[
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", Class::Application),
    (
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        Class::Application,
    ),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", Class::Application),
    (
        43,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        Class::Application,
    ),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", Class::Application),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", Class::ResetGpu),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", Class::ResetGpu),
    (61, "PMU_BREAKPOINT", Class::ContactSupport),
    (62, "PMU_HALT_ERROR", Class::ResetGpu),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", Class::Informational),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", Class::ResetGpu),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", Class::Application),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", Class::Application),
    (74, "NVLINK_ERROR", Class::ContactSupport),
    (
        79,
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        Class::RebootNode,
    ),
    (92, "EXCESSIVE_SBE_INTERRUPTS", Class::Informational),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", Class::Application),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", Class::ResetGpu),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", Class::ResetGpu),
    (119, "GSP_RPC_TIMEOUT", Class::ResetGpu),
    (120, "GSP_ERROR", Class::ResetGpu),
    (121, "C2C_ERROR", Class::Informational),
    (136, "ALI_TRAINING_FAIL", Class::ResetGpu),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", Class::ResetGpu),
    (143, "GPU_INIT_ERROR", Class::ResetGpu),
    (154, "GPU_RECOVERY_ACTION_CHANGED", Class::Informational),
    (155, "NVLINK_SW_DEFINED_ERROR", Class::ResetGpu),
    (156, "RESOURCE_RETIREMENT_EVENT", Class::ResetGpu),
    (158, "GPU_FATAL_TIMEOUT", Class::ResetGpu),
];

/// The class and mnemonic of Xid `xid` as logged in `line` (Xid 154 names its action in its
/// text: `GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)`).
pub fn classify(xid: u32, line: &str) -> (Class, &'static str) {
    let Some(&(_, name, class)) = TABLE.iter().find(|(x, _, _)| *x == xid) else {
        return (Class::Unknown, "not in gpuplane's Xid table");
    };
    if xid != 154 {
        return (class, name);
    }
    // The action is the last parenthesis of the line.
    let action = line
        .rsplit_once('(')
        .and_then(|(_, a)| a.split_once(')'))
        .map(|(a, _)| a.trim())
        .unwrap_or("");
    let class = match action {
        "None" => Class::Informational,
        "GPU Reset Required" | "Drain and Reset" => Class::ResetGpu,
        "Node Reboot Required" => Class::RebootNode,
        _ => Class::ContactSupport,
    };
    (class, name)
}
