//! `-w`: read again every interval and print only what changed, as `kubectl get -w` does: a
//! row whose words changed (its age aside, which grows every second) is printed again under
//! its table's title and header; a row that went away is printed once more, marked `(gone)`;
//! in `-o yaml` a changed document is printed whole.

use super::render::Frame;
use super::table::{Row, Table};
use std::io::Write;

/// What `new` shows that `old` did not; `None` when nothing changed.
pub fn changes(old: &Frame, new: &Frame) -> Option<Frame> {
    match (old, new) {
        (Frame::Tables(o), Frame::Tables(n)) => {
            let changed: Vec<Table> = n
                .iter()
                .filter_map(|t| table_changes(o.iter().find(|x| x.id == t.id), t))
                .chain(
                    // A whole table gone (a partition's file removed): its rows, marked.
                    o.iter()
                        .filter(|t| !n.iter().any(|x| x.id == t.id))
                        .filter_map(|t| table_changes(Some(t), &empty_like(t))),
                )
                .collect();
            (!changed.is_empty()).then_some(Frame::Tables(changed))
        }
        (Frame::Yaml(o), Frame::Yaml(n)) => {
            let changed: Vec<(String, String)> =
                n.iter().filter(|d| !o.contains(d)).cloned().collect();
            (!changed.is_empty()).then_some(Frame::Yaml(changed))
        }
        _ => Some(new.clone()),
    }
}

fn empty_like(t: &Table) -> Table {
    Table {
        rows: vec![],
        ..t.clone()
    }
}

/// The rows of `new` that are new or changed since `old`, then `old`'s rows that are gone.
fn table_changes(old: Option<&Table>, new: &Table) -> Option<Table> {
    let before = |key: &str| old.and_then(|o| o.rows.iter().find(|r| r.key == key));
    let mut rows: Vec<Row> = new
        .rows
        .iter()
        .filter(|r| !before(&r.key).is_some_and(|b| b.same_as(r)))
        .cloned()
        .collect();
    for gone in old
        .map(|o| o.rows.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|r| !new.rows.iter().any(|n| n.key == r.key))
    {
        let mut g = gone.clone();
        if let Some(first) = g.cells.first_mut() {
            first.push_str(" (gone)");
        }
        rows.push(g);
    }
    (!rows.is_empty()).then(|| Table {
        rows,
        ..new.clone()
    })
}

/// How a watch runs: `read` gives each frame and its notes (an error is reported on stderr and
/// the watch goes on: an API hiccup is not the end); at most `count` reads when set. Notes go
/// to stderr when they differ from the last read's, so a lasting problem is said once.
pub struct Watch<'a> {
    pub interval: std::time::Duration,
    pub count: Option<u64>,
    pub colour: bool,
    pub out: &'a mut dyn Write,
}

impl Watch<'_> {
    /// Prints `first` whole (its notes were printed), then the changes of each later read.
    pub fn run(
        &mut self,
        first: (Frame, Vec<String>),
        mut read: impl FnMut() -> Result<(Frame, Vec<String>), String>,
    ) -> std::io::Result<()> {
        let print = |f: &Frame, out: &mut dyn Write, colour: bool| -> std::io::Result<()> {
            out.write_all(super::render::print(f, colour).as_bytes())?;
            out.flush()
        };
        let (first, mut notes) = first;
        print(&first, self.out, self.colour)?;
        let mut last = first;
        let mut reads = 1;
        while self.count.is_none_or(|c| reads < c) {
            std::thread::sleep(self.interval);
            reads += 1;
            match read() {
                Ok((f, n)) => {
                    if n != notes {
                        n.iter().for_each(|n| eprintln!("warning: {n}"));
                        notes = n;
                    }
                    if let Some(c) = changes(&last, &f) {
                        self.out.write_all(b"\n")?;
                        print(&c, self.out, self.colour)?;
                    }
                    last = f;
                }
                Err(e) => eprintln!("warning: {e}"),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
