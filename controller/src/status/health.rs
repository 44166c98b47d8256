//! The partition's `GpusHealthy` (issue 40): `True` while every GPU of its table is Healthy;
//! `False` with `GpusQuarantined` while a GPU is out of its slice, else the worst state's reason
//! (`GpuLost`, `GpuUnhealthy`, `GpuSuspect`), and a message naming each GPU that is not (the
//! quarantined first, with since when, the stage and the hash that accepts it), its owner and
//! its first evidence. Set only where the table is
//! (a partition with layout terms). Read from the table `gpus.rs` made, so the condition and
//! `status.gpus[]` cannot disagree. Pure.

use super::ResourceStatus;
use gpuplane_crds::condition::{types, Time};
use gpuplane_crds::reason::Reason;
use gpuplane_crds::GpuHealthState;

/// The most GPUs a message names (the rest are counted).
const NAMED_MAX: usize = 4;

/// Sets `GpusHealthy` from `st.gpus`.
pub fn condition(st: &mut ResourceStatus, g: Option<i64>, now: &Time) {
    if st.gpus.is_empty() {
        return;
    }
    let mut sick: Vec<&gpuplane_crds::GpuStatus> = st
        .gpus
        .iter()
        .filter(|r| {
            r.quarantine.is_some() || r.health.is_some_and(|h| h != GpuHealthState::Healthy)
        })
        .collect();
    sick.sort_by(|a, b| b.health.cmp(&a.health).then(a.address.cmp(&b.address)));
    let Some(worst) = sick.first().and_then(|r| r.health) else {
        let message = format!("all {} GPUs healthy", st.gpus.len());
        st.set(
            types::GPUS_HEALTHY,
            true,
            Reason::GpusHealthy,
            message,
            now,
            g,
        );
        return;
    };
    let out = sick.iter().filter(|r| r.quarantine.is_some()).count();
    // Quarantined GPUs first: they are what changed for the consumers.
    sick.sort_by_key(|r| r.quarantine.is_none());
    let reason = match worst {
        _ if out > 0 => Reason::GpusQuarantined,
        GpuHealthState::Lost => Reason::GpuLost,
        GpuHealthState::Unhealthy => Reason::GpuUnhealthy,
        _ => Reason::GpuSuspect,
    };
    let mut parts: Vec<String> = sick
        .iter()
        .take(NAMED_MAX)
        .map(|r| {
            let owner = r
                .owner
                .as_deref()
                .map(|o| format!(" (slice {o})"))
                .unwrap_or_default();
            let first = r
                .evidence
                .first()
                .map(|e| format!(": {e}"))
                .unwrap_or_default();
            let h = r.health.unwrap_or_default();
            match &r.quarantine {
                Some(q) => format!(
                    "{}{owner} {h:?}, quarantined since {} ({:?}; accept with {}={}){first}",
                    r.address,
                    q.since,
                    q.stage,
                    crate::layout::ACCEPT_HEALTH_ANNOTATION,
                    q.hash
                ),
                None => format!("{}{owner} {h:?}{first}", r.address),
            }
        })
        .collect();
    if sick.len() > NAMED_MAX {
        parts.push(format!("and {} more", sick.len() - NAMED_MAX));
    }
    let message = crate::text::sanitize(&parts.join("; "), 1000);
    st.set(types::GPUS_HEALTHY, false, reason, message, now, g);
}
