//! Text and JSON output of `plan` and `converge`.

use super::args::Format;
use crate::converge::{Report, Stop};
use crate::desired::Desired;
use crate::plan::Plan;
use crate::status::ResourceStatus;
use serde_json::json;
use std::collections::BTreeMap;

pub fn print_plan(p: &Plan, format: Format) {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(p).unwrap_or_default()),
        Format::Text => {
            if p.is_empty() && p.continues_after.is_none() {
                println!("No changes. The host matches the spec.");
                return;
            }
            for b in &p.blockers {
                println!("BLOCKED {} ({}): {}", b.resource, b.reason, b.message);
            }
            for (i, s) in p.steps.iter().enumerate() {
                println!("{:>3}. {}\n       why: {}", i + 1, s.step, s.why);
            }
            for n in &p.notes {
                println!("note: {}: {}", n.resource, n.message);
            }
            if let Some(c) = &p.continues_after {
                println!("... the plan continues after {c}");
            }
        }
    }
}

pub fn print_converge(
    d: &Desired,
    r: &Report,
    status: &BTreeMap<crate::resource_key::ResourceKey, ResourceStatus>,
    format: Format,
) {
    match format {
        Format::Json => {
            let v = json!({
                "converged": r.converged(),
                "writes": r.writes,
                "writesByKind": r.writes_by_kind,
                "steps": r.applied,
                "notes": r.notes,
                "stop": r.stop,
                "remaining": r.final_plan,
                "status": status,
            });
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        Format::Text => print_converge_text(d, r, status),
    }
}

/// `gpuplane converge`'s words: what it converges to, each step with why and what came of it,
/// the decisions, how it ended, the conditions and the host writes.
fn print_converge_text(
    d: &Desired,
    r: &Report,
    status: &BTreeMap<crate::resource_key::ResourceKey, ResourceStatus>,
) {
    let servers: Vec<String> = d
        .servers
        .iter()
        .map(|s| crate::resource_key::ResourceKey::server_id(&s.id).to_string())
        .collect();
    println!(
        "Converging node {} to GpuPartition/{}{}",
        d.partition.node_name,
        d.partition.name,
        if servers.is_empty() {
            String::new()
        } else {
            format!(" and {}", servers.join(", "))
        }
    );
    let mut noted = 0;
    for (i, a) in r.applied.iter().enumerate() {
        println!(
            "{:>3}. [t={}s] {}\n       why: {}",
            i + 1,
            a.at,
            a.planned.step,
            a.planned.why
        );
        if let Some(d) = &a.detail {
            println!("       result: {d}");
        }
        for l in &a.leftovers {
            println!("       healed: {l}");
        }
        // Decisions made after this step (e.g. P2P disabled after the probe).
        while noted < r.notes.len() && matches!(a.planned.step, crate::plan::Step::ProbeP2p { .. })
        {
            println!("       decision: {}", r.notes[noted].message);
            noted += 1;
        }
    }
    for n in &r.notes[noted..] {
        println!("     decision: {}: {}", n.resource, n.message);
    }
    match &r.stop {
        None if r.final_plan.is_empty() => println!("Converged: a new plan has no steps."),
        None => println!("Stopped with {} steps left.", r.final_plan.steps.len()),
        Some(stop @ Stop::Blocked { .. }) => {
            println!("{stop}");
            println!("Nothing more was changed.");
        }
        Some(stop) => println!("{stop}"),
    }
    println!("\nStatus:");
    for (res, st) in status {
        println!("  {res}");
        for c in &st.conditions {
            println!("    {}={} ({}): {}", c.type_, c.status, c.reason, c.message);
        }
    }
    println!("\nHost writes: {}", r.writes);
}
