//! The Kubernetes agent's port to the disruption gate (`pass::gate`): the converge on the host
//! under the host mutex, and the ask of the partition's `GpuNodePool` in the API server
//! (`budget.rs`). Used alike by a partition's reconcile and by the restore on its deletion.

use super::super::host_io::run_converge;
use super::super::{Ctx, Error};
use crate::converge::{Report, Slot};
use crate::desired::Desired;
use crate::pass::gate::{through, Gated, SlotPort};
use crate::pass::Pass;
use crate::pool::{Answer, Ask};
use gpuplane_crds::GpuPartition;
use std::future::Future;
use std::sync::Arc;

/// Partition `p`'s pass: its desired state, the pool it is a member of (or none).
struct ApiPort<'a> {
    ctx: &'a Arc<Ctx>,
    p: &'a GpuPartition,
    pool: Option<&'a str>,
    desired: Desired,
    block: bool,
    now: jiff::Timestamp,
}

impl SlotPort for ApiPort<'_> {
    type Error = Error;

    fn pool(&self) -> Option<&str> {
        self.pool
    }

    fn converge(
        &mut self,
        hold: Option<Slot>,
    ) -> impl Future<Output = Result<Report, Error>> + Send {
        run_converge(self.ctx, self.desired.clone(), self.block, hold)
    }

    fn ask(&mut self, reason: String) -> impl Future<Output = Result<Answer, Error>> + Send {
        let pool = self.pool.unwrap_or_default();
        super::ask(self.ctx, pool, self.p, Ask::Slot { reason }, self.now)
    }
}

/// Converges `desired` for partition `p`, a member of `pool` (or of none), through the gate
/// in `pass`; `reason` prefixes the step in the ask ("restore on deletion: ").
pub async fn converge(
    pass: &Pass,
    ctx: &Arc<Ctx>,
    p: &GpuPartition,
    pool: Option<&str>,
    desired: Desired,
    block: bool,
    reason: &str,
) -> Result<Gated, Error> {
    let mut port = ApiPort {
        ctx,
        p,
        pool,
        desired,
        block,
        now: pass.now,
    };
    through(&mut port, reason).await
}
