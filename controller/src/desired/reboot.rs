//! Whether the agent may reboot its host for the kernel arguments now (`spec.host.reboot`,
//! issue 25 part 3). Pure: the front doors (`reconcile/`, `standalone/`) pass the clock and
//! whether they can ask a pool, and put the answer into the desired partition, where the
//! planner reads it.
//!
//! # Rules
//! - `Manual`: never.
//! - `Auto` with `maintenanceWindow`: only inside the window (UTC).
//! - `Auto` in a pool (label `gpuplane.dev/pool`): the planner plans the reboot and the front
//!   door asks the pool for a slot before the first disruptive step, as for any disruption; a
//!   denied slot means no host write at all. An agent on manifest files cannot ask a pool:
//!   there the window alone decides, and without one it never reboots (and says why).

use gpuplane_crds::{GpuPartition, GpuPartitionSpec, MaintenanceWindow, RebootPolicy, Weekday};

/// What the planner may do about a pending reboot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RebootGate {
    /// `reboot: Manual`: a person reboots.
    #[default]
    Manual,
    /// `reboot: Auto`, and the agent may reboot now: on what authority (a pool's slot, the
    /// window).
    Now(String),
    /// `reboot: Auto`, outside the maintenance window: why (a wait that ends by itself).
    Later(String),
    /// `reboot: Auto`, but this agent cannot reboot by itself: why (a person must act).
    Cannot(String),
}

impl RebootGate {
    /// `reboot: Auto`, whatever the gate says now.
    pub fn is_auto(&self) -> bool {
        !matches!(self, RebootGate::Manual)
    }
}

impl RebootGate {
    /// The gate as the spec alone gives it: `Auto` is closed until [`RebootGate::decide`] runs.
    pub fn of(spec: &GpuPartitionSpec) -> RebootGate {
        match spec.host.as_ref().map(|h| h.reboot) {
            Some(RebootPolicy::Auto) => RebootGate::Cannot(
                "the agent has not decided whether it may reboot (no clock, no pool asked)".into(),
            ),
            _ => RebootGate::Manual,
        }
    }

    /// The gate at `now` for partition `p` (its pool is its `gpuplane.dev/pool` label); `api`:
    /// the agent can ask the pool.
    pub fn for_partition(p: &GpuPartition, api: bool, now: jiff::Timestamp) -> RebootGate {
        RebootGate::decide(&p.spec, gpuplane_crds::pool_of(p), api, now)
    }

    /// The gate at `now` for a partition whose pool label is `pool`; `api`: the agent can ask
    /// the pool (it runs against the API server).
    pub fn decide(
        spec: &GpuPartitionSpec,
        pool: Option<&str>,
        api: bool,
        now: jiff::Timestamp,
    ) -> RebootGate {
        let Some(host) = spec
            .host
            .as_ref()
            .filter(|h| h.reboot == RebootPolicy::Auto)
        else {
            return RebootGate::Manual;
        };
        let window = match host.maintenance_window.as_ref().map(parse_window) {
            Some(Ok(w)) => Some(w),
            Some(Err(e)) => return RebootGate::Cannot(format!("spec.host.maintenanceWindow {e}")),
            None => None,
        };
        if let Some(w) = &window {
            if !w.open_at(now) {
                return RebootGate::Later(format!(
                    "outside spec.host.maintenanceWindow {} (now {})",
                    w.describe(),
                    utc_minute(now)
                ));
            }
        }
        let inside = window
            .as_ref()
            .map(|w| format!("inside spec.host.maintenanceWindow {}", w.describe()));
        let r: Result<String, String> = match (pool, api, inside) {
            (Some(p), true, None) => Ok(format!("holding a disruption slot of pool {p}")),
            (Some(p), true, Some(i)) => Ok(format!("holding a disruption slot of pool {p}, {i}")),
            (Some(p), false, Some(i)) => Ok(format!(
                "{i} (this agent runs on manifest files and cannot ask pool {p} for a slot)"
            )),
            (Some(p), false, None) => Err(format!(
                "the partition is in pool {p}, whose slots are asked through the API server, and this agent runs on manifest files: set spec.host.maintenanceWindow"
            )),
            (None, _, Some(i)) => Ok(i),
            (None, _, None) => Err(
                "reboot: Auto needs a pool (label gpuplane.dev/pool) or spec.host.maintenanceWindow"
                    .into(),
            ),
        };
        match r {
            Ok(by) => RebootGate::Now(by),
            Err(why) => RebootGate::Cannot(why),
        }
    }
}

/// A parsed maintenance window: minutes of the UTC day, and its days (empty: every day).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    start: u16,
    end: u16,
    days: Vec<Weekday>,
}

/// `HH:MM` as minutes of the day.
fn minutes(s: &str) -> Option<u16> {
    let (h, m) = s.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

/// Checks a window: two `HH:MM` times that differ.
pub fn parse_window(w: &MaintenanceWindow) -> Result<Window, String> {
    let t = |field: &str, v: &str| {
        minutes(v).ok_or_else(|| {
            format!(
                "{field}: {:?} is not a time of day as HH:MM, 00:00 to 23:59 UTC with two digits each (e.g. \"02:00\", quoted in YAML)",
                crate::text::sanitize(v, 16)
            )
        })
    };
    let (start, end) = (t("start", &w.start)?, t("end", &w.end)?);
    if start == end {
        return Err(format!(
            "start and end are both {:?}: the window would be empty; give it a length (e.g. start: \"02:00\", end: \"04:00\"), or for a whole day say 00:00 to 23:59",
            crate::text::sanitize(&w.start, 16)
        ));
    }
    Ok(Window {
        start,
        end,
        days: w.days.clone(),
    })
}

fn weekday(d: jiff::civil::Weekday) -> Weekday {
    use jiff::civil::Weekday as J;
    match d {
        J::Monday => Weekday::Mon,
        J::Tuesday => Weekday::Tue,
        J::Wednesday => Weekday::Wed,
        J::Thursday => Weekday::Thu,
        J::Friday => Weekday::Fri,
        J::Saturday => Weekday::Sat,
        J::Sunday => Weekday::Sun,
    }
}

fn utc_minute(now: jiff::Timestamp) -> String {
    let z = now.to_zoned(jiff::tz::TimeZone::UTC);
    format!(
        "{:?} {:02}:{:02} UTC",
        weekday(z.weekday()),
        z.hour(),
        z.minute()
    )
}

impl Window {
    /// Whether the window is open at `now`.
    pub fn open_at(&self, now: jiff::Timestamp) -> bool {
        let z = now.to_zoned(jiff::tz::TimeZone::UTC);
        let m = z.hour() as u16 * 60 + z.minute() as u16;
        let today = weekday(z.weekday());
        let yesterday = weekday(z.weekday().previous());
        let on = |d: Weekday| self.days.is_empty() || self.days.contains(&d);
        if self.start < self.end {
            on(today) && self.start <= m && m < self.end
        } else {
            (on(today) && m >= self.start) || (on(yesterday) && m < self.end)
        }
    }

    /// `02:00-04:00 UTC` (`on Sat, Sun`).
    pub fn describe(&self) -> String {
        let hm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
        let days = if self.days.is_empty() {
            String::new()
        } else {
            let d: Vec<String> = self.days.iter().map(|d| format!("{d:?}")).collect();
            format!(" on {}", d.join(", "))
        };
        format!("{}-{} UTC{days}", hm(self.start), hm(self.end))
    }
}

#[cfg(test)]
mod tests;
