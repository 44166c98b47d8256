//! Columns aligned the way `kubectl get` aligns them (upper-case headers, three spaces between
//! columns), ages in kubectl's words, and colour laid on after padding so that escape codes
//! never shift a column.

/// One row: `key` identifies it across two reads (the watch compares rows by key); `age`, when
/// set, is the index of the cell that only says how old something is, which a watch ignores (an
/// age grows every second; a row is changed only when what it says changed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub key: String,
    pub cells: Vec<String>,
    pub age: Option<usize>,
    /// Colour per cell (parallel to `cells`), applied only on a terminal.
    pub paint: Vec<Paint>,
}

impl Row {
    pub fn new(key: String, cells: Vec<String>) -> Row {
        let paint = vec![Paint::Plain; cells.len()];
        Row {
            key,
            cells,
            age: None,
            paint,
        }
    }

    /// Whether `self` and `other` say the same, their ages aside.
    pub fn same_as(&self, other: &Row) -> bool {
        self.cells.len() == other.cells.len()
            && self
                .cells
                .iter()
                .zip(&other.cells)
                .enumerate()
                .all(|(i, (a, b))| Some(i) == self.age || a == b)
    }
}

/// The few colours the view uses: what is wrong, what is waiting, what is fine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Paint {
    Plain,
    Good,
    Wait,
    Bad,
}

impl Paint {
    fn code(self) -> Option<&'static str> {
        match self {
            Paint::Plain => None,
            Paint::Good => Some("\x1b[32m"),
            Paint::Wait => Some("\x1b[33m"),
            Paint::Bad => Some("\x1b[31m"),
        }
    }
}

/// A titled table: `title` (a line above the header, may be empty), the header and rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// Identifies the table across two reads, like a row's key.
    pub id: String,
    pub title: String,
    pub header: Vec<&'static str>,
    pub rows: Vec<Row>,
}

/// The width of `s` in columns: characters, as every cell is sanitized text (no escapes).
fn width(s: &str) -> usize {
    s.chars().count()
}

/// `title`, the header and `rows` aligned; colour only when `colour`. The last column is not
/// padded (no trailing blanks).
pub fn format(title: &str, header: &[&str], rows: &[&Row], colour: bool) -> String {
    let n = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for r in rows {
        for (i, c) in r.cells.iter().enumerate().take(n) {
            widths[i] = widths[i].max(width(c));
        }
    }
    let mut out = String::new();
    if !title.is_empty() {
        out.push_str(title);
        out.push('\n');
    }
    let line = |cells: &[String], paint: &[Paint], out: &mut String| {
        let mut text = String::new();
        for (i, w) in widths.iter().enumerate() {
            let c = cells.get(i).map(String::as_str).unwrap_or("");
            let p = paint.get(i).copied().unwrap_or(Paint::Plain);
            match p.code().filter(|_| colour) {
                Some(code) => {
                    text.push_str(code);
                    text.push_str(c);
                    text.push_str("\x1b[0m");
                }
                None => text.push_str(c),
            }
            if i + 1 < n {
                text.push_str(&" ".repeat(w.saturating_sub(width(c)) + 3));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    let head: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    line(&head, &[], &mut out);
    for r in rows {
        line(&r.cells, &r.paint, &mut out);
    }
    out
}

/// `seconds` as kubectl prints an age (apimachinery's `HumanDuration`): `45s`, `2m30s`, `25m`,
/// `4h10m`, `20h`, `3d4h`, `40d`, `2y10d`; a time more than a second in the future is
/// `<invalid>`, as there.
pub fn human_age(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        };
    }
    if days < 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if days < 365 * 8 {
        let d = days % 365;
        return if d == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{d}d")
        };
    }
    format!("{years}y")
}

#[cfg(test)]
mod tests;
