//! `gpuplane wait`: the front door's loop around `status_view::wait::judge` — read, judge, sleep
//! a second, until the verdict is final or the timeout passes.

use super::failure::Failure;
use crate::status_view::{model, wait, Source};
use std::time::{Duration, Instant};

/// Waits for `condition` (`condition=Ready` or `Ready`) on every resource of `source`; 0 when
/// met, 1 when a resource failed or `timeout` passed (stdout names who).
pub fn wait(source: &Source, condition: &str, timeout: Duration) -> Result<i32, Failure> {
    let condition = condition.strip_prefix("condition=").unwrap_or(condition);
    if condition.is_empty() || !condition.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(Failure::Input(format!(
            "--for {condition:?}: write condition=TYPE, e.g. condition=Ready"
        )));
    }
    let expected = source.expected().map_err(Failure::Failed)?;
    let start = Instant::now();
    loop {
        let (docs, _, _) = source.read().map_err(Failure::Failed)?;
        let resources: Vec<model::Resource> = docs.iter().map(model::resource).collect();
        let (lines, code) = match wait::judge(&resources, condition, &expected) {
            wait::Verdict::Met(lines) => (lines, 0),
            wait::Verdict::Failed(lines) => (lines, 1),
            wait::Verdict::Waiting(lines) if start.elapsed() >= timeout => {
                let head = format!(
                    "timed out after {}s waiting for {condition}:",
                    timeout.as_secs()
                );
                (std::iter::once(head).chain(lines).collect(), 1)
            }
            wait::Verdict::Waiting(_) => {
                std::thread::sleep(
                    Duration::from_secs(1).min(timeout.saturating_sub(start.elapsed())),
                );
                continue;
            }
        };
        for l in lines {
            println!("{l}");
        }
        return Ok(code);
    }
}
