//! The wall clock as a condition's time, read only by the front doors (`reconcile/`,
//! `standalone/`, `cli/`): the pure middle (`desired/`, `p2p/`, `plan/`, `status/`) takes the
//! time as an argument, so its tests pass plain values. `controller/tests/layers.rs` checks that
//! nothing in the pure middle reads a clock, a file, the environment or Kubernetes.

use gpuplane_crds::condition::Time;

/// Now, as `lastTransitionTime` takes it.
pub fn now() -> Time {
    Time(jiff::Timestamp::now())
}
