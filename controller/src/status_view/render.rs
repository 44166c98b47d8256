//! Status documents as tables (`kubectl get`'s look) or as YAML (`-o yaml`). Pure: the time is
//! an argument, so the output of a given directory at a given instant is always the same
//! (the golden tests rely on it).

use super::model::{self, Doc, Kind, Resource, Specs};
use super::table::{human_age, Paint, Row, Table};

/// What one read shows: tables, or the documents as YAML (key → text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Tables(Vec<Table>),
    Yaml(Vec<(String, String)>),
}

const GPU_HEADER: &[&str] = &[
    "ADDRESS", "SLOT", "NUMA", "DRIVER", "HEALTH", "OWNER", "CONSUMER", "HOLDER",
];
const GPU_WIDE: &[&str] = &["PATH", "UUID", "SERIAL", "EVIDENCE"];
const CONDITION_HEADER: &[&str] = &["RESOURCE", "TYPE", "STATUS", "REASON", "AGE"];

fn or_dash(s: &Option<String>) -> String {
    s.clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "-".into())
}

/// The GPU table of partition `p`: one row per GPU of its status, the consumer from the spec
/// when it is at hand. No holder is in status, so that column is `-` (the agent names a
/// holding process in a `GpuInUse` condition's message instead).
fn gpu_table(p: &Resource, specs: &Specs, wide: bool) -> Table {
    let spec = specs.get(p.short_name());
    let mut title = p.name.clone();
    let mut facts = vec![];
    if let Some(n) = spec.and_then(|s| s.node.as_ref()) {
        facts.push(format!("node {n}"));
    }
    if let Some(h) = &p.layout_hash {
        facts.push(format!("layout {h}"));
    }
    if !facts.is_empty() {
        title = format!("{title} ({})", facts.join(", "));
    }
    let mut header = GPU_HEADER.to_vec();
    if wide {
        header.extend_from_slice(GPU_WIDE);
    }
    let mut seen = std::collections::BTreeSet::new();
    let rows = p
        .gpus
        .iter()
        .map(|g| {
            let consumer = g
                .owner
                .as_ref()
                .and_then(|o| spec.and_then(|s| s.consumers.get(o)))
                .cloned();
            let driver = if g.missing {
                "(missing)".to_string()
            } else {
                or_dash(&g.driver)
            };
            let mut cells = vec![
                g.address.clone(),
                or_dash(&g.slot),
                g.numa
                    .filter(|n| *n >= 0)
                    .map_or("-".into(), |n| n.to_string()),
                driver,
                match &g.quarantine {
                    Some(q) => format!("{} ({q})", or_dash(&g.health)),
                    None => or_dash(&g.health),
                },
                or_dash(&g.owner),
                or_dash(&consumer),
                "-".into(),
            ];
            if wide {
                cells.extend([
                    or_dash(&g.path),
                    or_dash(&g.uuid),
                    or_dash(&g.serial),
                    or_dash(&g.evidence),
                ]);
            }
            // A GPU replaced in place leaves a missing row at the address of the new one.
            let mut key = format!("{}{}", g.address, if g.missing { " missing" } else { "" });
            while !seen.insert(key.clone()) {
                key.push('+');
            }
            let mut row = Row::new(key, cells);
            if g.missing {
                row.paint[3] = Paint::Bad;
            }
            row.paint[4] = match g.health.as_deref() {
                _ if g.quarantine.is_some() => Paint::Bad,
                Some("Suspect") => Paint::Wait,
                Some("Unhealthy" | "Lost") => Paint::Bad,
                _ => Paint::Plain,
            };
            row
        })
        .collect();
    Table {
        id: format!("gpus {}", p.name),
        title,
        header,
        rows,
    }
}

/// How a condition's status reads: `Ready=True` is good, `Stalled=True` bad, `Reconciling=True`
/// a wait (kstatus's abnormal-true types are fine when `False`).
fn paint(type_: &str, status: &str) -> Paint {
    let abnormal = matches!(
        type_,
        "Stalled" | "Degraded" | "Reconciling" | "Progressing"
    );
    match (status, abnormal) {
        ("True", false) => Paint::Good,
        ("False", false) => Paint::Bad,
        ("True", true) if matches!(type_, "Stalled" | "Degraded") => Paint::Bad,
        ("True", true) => Paint::Wait,
        ("False", true) => Paint::Plain,
        _ => Paint::Wait,
    }
}

/// Every resource's conditions, one row each, with reason and age (and message when wide).
fn condition_table(resources: &[Resource], now: jiff::Timestamp, wide: bool) -> Table {
    let mut header = CONDITION_HEADER.to_vec();
    if wide {
        header.push("MESSAGE");
    }
    let mut rows = vec![];
    for r in resources {
        if let Some(why) = &r.unreadable {
            let mut cells = vec![
                r.name.clone(),
                "-".into(),
                "Unknown".into(),
                "Unreadable".into(),
                "-".into(),
            ];
            if wide {
                cells.push(why.clone());
            }
            let mut row = Row::new(format!("{} -", r.name), cells);
            row.paint[3] = Paint::Bad;
            rows.push(row);
            continue;
        }
        if r.conditions.is_empty() {
            let mut cells = vec![
                r.name.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ];
            if wide {
                cells.push("-".into());
            }
            rows.push(Row::new(format!("{} -", r.name), cells));
        }
        for c in &r.conditions {
            let age = c
                .since
                .map_or("-".into(), |t| human_age(now.duration_since(t).as_secs()));
            let mut cells = vec![
                r.name.clone(),
                c.type_.clone(),
                c.status.clone(),
                if c.reason.is_empty() {
                    "-".into()
                } else {
                    c.reason.clone()
                },
                age,
            ];
            if wide {
                cells.push(if c.message.is_empty() {
                    "-".into()
                } else {
                    c.message.clone()
                });
            }
            let mut row = Row::new(format!("{} {}", r.name, c.type_), cells);
            row.age = Some(4);
            row.paint[2] = paint(&c.type_, &c.status);
            rows.push(row);
        }
    }
    Table {
        id: "conditions".into(),
        title: String::new(),
        header,
        rows,
    }
}

/// The tables of one read: per partition (host) its GPU table, then one table of every
/// resource's conditions.
pub fn tables(docs: &[Doc], specs: &Specs, wide: bool, now: jiff::Timestamp) -> Vec<Table> {
    let resources: Vec<Resource> = docs.iter().map(model::resource).collect();
    let mut out: Vec<Table> = resources
        .iter()
        .filter(|r| r.kind == Kind::Partition && r.unreadable.is_none())
        .map(|p| gpu_table(p, specs, wide))
        .collect();
    out.push(condition_table(&resources, now, wide));
    out
}

/// The documents as YAML, each after `---` and a comment naming where it came from. Strings
/// are re-emitted by the YAML serializer, which quotes and escapes control characters, so a
/// terminal escape in a file cannot reach the terminal; bidirectional overrides become `�`.
pub fn yaml(docs: &[Doc]) -> Vec<(String, String)> {
    docs.iter()
        .map(|d| {
            let origin = model::clean(&d.origin, 253);
            let body = match &d.value {
                Ok(v) => serde_yaml::to_string(&model::unbidi_value(v)).unwrap_or_default(),
                Err(e) => format!("# unreadable: {}\n", model::clean(e, 400)),
            };
            (origin.clone(), format!("---\n# {origin}\n{body}"))
        })
        .collect()
}

/// A frame as text, colour only when `colour`.
pub fn print(frame: &Frame, colour: bool) -> String {
    match frame {
        Frame::Yaml(docs) => docs.iter().map(|(_, t)| t.as_str()).collect(),
        Frame::Tables(tables) => tables
            .iter()
            .map(|t| {
                let rows: Vec<&Row> = t.rows.iter().collect();
                super::table::format(&t.title, &t.header, &rows, colour)
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}
