//! The wall clock, read only here: the front doors (`reconcile/`, `standalone/`, `cli/`,
//! `webhook/`) read it once per pass (`pass::Pass::begin`) and hand the time down; the pure middle (`desired/`, `p2p/`,
//! `plan/`, `status/`, `pool/`, `layout/`) takes it as an argument, so its tests pass plain
//! values; the host backend and the Lease read it for ages and renewals. `controller/tests/
//! layers.rs` checks that nothing outside this file reads the wall clock, and that nothing in the
//! pure middle reads a clock, a file, the environment or Kubernetes.

use gpuplane_crds::condition::Time;
use std::time::SystemTime;

/// Now, as `lastTransitionTime` takes it.
pub fn now() -> Time {
    Time(timestamp())
}

/// Now, as a timestamp (a reboot gate's, a Lease's, a pool's decision time).
pub fn timestamp() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

/// Now, in the file system's terms (a file's or a lock's age, seconds since the epoch).
pub fn system_time() -> SystemTime {
    SystemTime::now()
}
