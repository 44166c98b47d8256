//! The partition's `RebootRequired` (issue 25, part 3), set only when `spec.host.kernelArgs`
//! lists arguments: `True` while the running kernel (`/proc/cmdline`) lacks a `present` word or
//! holds an `absent` one and a reboot would apply them, with the difference in the message;
//! `False` once it runs with them (`KernelArgsBooted`), and `False` when a reboot already
//! happened without them (`KernelArgsNotBooted`: another reboot would not help; the partition
//! is Stalled with the same message). Judged by `plan::kernel_args::judge`, as the planner
//! judges it. Pure.

use super::ResourceStatus;
use crate::desired::Desired;
use crate::host::model::HostState;
use crate::plan::kernel_args::{blocker_text, judge, Standing};
use crate::plan::Reason;
use gpuplane_crds::condition::{types, Condition, Time};
use gpuplane_crds::set_condition;

/// Sets `RebootRequired` on the partition's status when it sets kernel arguments.
pub fn condition(st: &mut ResourceStatus, d: &Desired, h: &HostState, g: Option<i64>, now: &Time) {
    let (Some(j), Some(k)) = (judge(d, h), d.partition.kernel_args.as_ref()) else {
        return;
    };
    let wanted = {
        let mut w: Vec<String> = k.present.clone();
        w.extend(k.absent.iter().map(|a| format!("not {a}")));
        w.join(", ")
    };
    let (status, reason, message) = match &j.standing {
        Standing::Booted => (
            "False",
            Reason::KernelArgsBooted,
            format!(
                "the running kernel has the partition's kernel arguments (/proc/cmdline: {wanted})"
            ),
        ),
        Standing::NotBooted => {
            let (r, m) = blocker_text(d, &j, h);
            ("False", r, m)
        }
        Standing::Unknown => {
            let (r, m) = blocker_text(d, &j, h);
            ("Unknown", r, m)
        }
        _ => {
            let (r, m) = blocker_text(d, &j, h);
            (
                "True",
                if r == Reason::RebootRequired || crate::plan::kernel_args::is_reboot_wait(r) {
                    Reason::KernelArgsPending
                } else {
                    r
                },
                m,
            )
        }
    };
    set_condition(
        &mut st.conditions,
        Condition {
            type_: types::REBOOT_REQUIRED.into(),
            status: status.into(),
            reason: reason.into(),
            message: crate::text::truncate(&message, 4000),
            observed_generation: g,
            last_transition_time: now.clone(),
        },
    );
}
