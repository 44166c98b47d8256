//! The layer rules of ARCHITECTURE.md, checked on the source.
//!
//! The rules are read from ARCHITECTURE.md's table itself (one map, no second copy here): each
//! row names a module (`plan/`), a sub-module (`desired/select.rs`) or a group of them, and what
//! it may use. Every path a source file names — `crate::a::b`, `super::x`, `self::y`, in `use`
//! lines and in code — must lead to its own row or to one its row allows. Also checked: no
//! circle between files, the wall clock read only in `clock.rs`, and the pure middle free of
//! clocks, files, the environment and Kubernetes.
//!
//! A dependency that breaks a rule fails here, naming the file and the line. Test code (`tests.rs`,
//! `tests/`, modules and items under `#[cfg(test)]`) and comments are not checked: tests may
//! reach anywhere. The readers are checked on planted text too (the last tests), so that a rule
//! the reader silently stopped seeing cannot pass.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside the crate, `["host", "model"]` for `crate::host::model`.
type ModPath = Vec<String>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn architecture_md() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

// --- The map: ARCHITECTURE.md's table ---------------------------------------------------------

/// One row of the table: the modules it names (several for a group) and what they may use.
#[derive(Debug)]
struct Row {
    keys: Vec<ModPath>,
    may_use: Vec<ModPath>,
}

/// The table, rows in its order (the lower layers first).
#[derive(Debug)]
struct Map {
    rows: Vec<Row>,
}

/// `systemd/` → `systemd`, `text.rs` → `text`, `host/model.rs` → `host::model`, `host::model`.
fn key_path(token: &str) -> ModPath {
    token
        .trim_end_matches('/')
        .trim_end_matches(".rs")
        .split(['/', ':'])
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The backticked tokens of a cell.
fn ticked(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

impl Map {
    /// Reads the table that follows the `| folder / file | concern | may use |` header.
    ///
    /// The "may use" column is a comma-separated list of backticked modules and these words:
    /// `nothing`; `leaves` (every row above `host/model.rs`'s); `everything below` (every row
    /// above this one); `CRD types` (the other crate, not a module of this one). Anything else
    /// is refused, so that prose the reader would ignore cannot slip into a rule.
    fn parse(md: &str) -> Result<Map, String> {
        let mut lines = md
            .lines()
            .skip_while(|l| !l.starts_with("| folder / file"))
            .skip(2);
        let mut rows: Vec<Row> = Vec::new();
        let mut leaves_end = None;
        for line in lines.by_ref().take_while(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let [key, _concern, may] = cells[..] else {
                return Err(format!("not a row of three cells: {line}"));
            };
            let keys: Vec<ModPath> = ticked(key).into_iter().map(key_path).collect();
            if keys.is_empty() {
                return Err(format!("a row names no module: {line}"));
            }
            if keys[0] == ["host", "model"] {
                leaves_end = Some(rows.len());
            }
            let mut may_use = Vec::new();
            for item in may.split(',').map(str::trim) {
                let t = ticked(item);
                if !t.is_empty() {
                    may_use.extend(t.into_iter().map(key_path));
                    continue;
                }
                match item {
                    "nothing" | "CRD types" => {}
                    "leaves" => {
                        let end =
                            leaves_end.ok_or(format!("`leaves` before host/model.rs: {line}"))?;
                        may_use.extend(rows[..end].iter().flat_map(|r| r.keys.clone()));
                    }
                    "everything below" => {
                        may_use.extend(rows.iter().flat_map(|r| r.keys.clone()));
                    }
                    other => {
                        return Err(format!(
                            "unknown word {other:?} in the may-use cell of: {line}"
                        ))
                    }
                }
            }
            rows.push(Row { keys, may_use });
        }
        if rows.is_empty() {
            return Err("no table under `| folder / file | concern | may use |`".into());
        }
        Ok(Map { rows })
    }

    /// The row a module path belongs to: the one with the longest key that starts it.
    fn row_of(&self, path: &[String]) -> Option<usize> {
        self.rows
            .iter()
            .enumerate()
            .flat_map(|(i, r)| r.keys.iter().map(move |k| (i, k)))
            .filter(|(_, k)| path.starts_with(k))
            .max_by_key(|(_, k)| k.len())
            .map(|(i, _)| i)
    }

    /// Whether code of row `from` may name `target`: its own row, a module its row allows (or
    /// anything inside one), or another module of an allowed module's row (a group).
    fn allows(&self, from: usize, target: &[String]) -> bool {
        let Some(to) = self.row_of(target) else {
            return false;
        };
        to == from
            || self.rows[from]
                .may_use
                .iter()
                .any(|m| target.starts_with(m) || self.row_of(m) == Some(to))
    }
}

// --- The source ---------------------------------------------------------------------------------

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Names of modules declared right after `#[cfg(test)]` anywhere (`mod fuzz;`, `mod tests;`).
fn test_modules(files: &[PathBuf]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for w in lines.windows(2) {
            if w[0] == "#[cfg(test)]" {
                let decl = w[1]
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub(super) ")
                    .trim_start_matches("pub ");
                if let Some(m) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                    names.insert(m.to_string());
                }
            }
        }
    }
    names
}

/// `host/local/mod.rs` → `host::local`, `plan/servers.rs` → `plan::servers`.
fn module_path(rel: &str) -> ModPath {
    let mut p: ModPath = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if p.last().is_some_and(|l| l == "mod") {
        p.pop();
    }
    p
}

/// One non-test source file of `controller/src`.
struct Source {
    rel: String,
    module: ModPath,
    /// Its code lines (comments and `#[cfg(test)]` items dropped), numbered from 1.
    code: Vec<(usize, String)>,
}

impl Source {
    fn top(&self) -> &str {
        &self.module[0]
    }
}

/// The non-test source files of `controller/src` (the crate root files aside).
fn sources() -> Vec<Source> {
    let root = src();
    let mut files = Vec::new();
    rs_files(&root, &mut files);
    files.sort();
    let tests = test_modules(&files);
    let mut out = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        if rel.contains("/tests/")
            || tests.contains(&stem)
            || ["main.rs", "lib.rs"].contains(&rel.as_str())
        {
            continue;
        }
        let code = code_lines(&std::fs::read_to_string(&f).unwrap());
        out.push(Source {
            module: module_path(&rel),
            rel,
            code,
        });
    }
    out
}

/// The lines of a file that are code, numbered from 1: comments dropped, and every item under
/// `#[cfg(test)]` (an inline `mod tests { … }`, a test-only function) skipped to its closing
/// brace at the attribute's indentation.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skip_to: Option<String> = None;
    let mut skip_one = false;
    let lines: Vec<&str> = text.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        if let Some(end) = &skip_to {
            if line.trim_end() == end {
                skip_to = None;
            }
            continue;
        }
        let code = line.trim_start();
        if code == "#[cfg(test)]" {
            let next = lines.get(n + 1).map_or("", |l| l.trim());
            if next.ends_with('}') {
                skip_one = true;
            } else if !next.ends_with(';') {
                let indent = &line[..line.len() - code.len()];
                skip_to = Some(format!("{indent}}}"));
            }
            continue;
        }
        if std::mem::take(&mut skip_one) {
            continue;
        }
        if code.starts_with("//") {
            continue;
        }
        out.push((n + 1, code.split(" //").next().unwrap_or(code).to_string()));
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every module path named by `code` from `module`: `crate::a::b`, `super::x`, `self::y`, with
/// their groups (`crate::{a, b::{c, d}}`), resolved to absolute paths. A path stops at its first
/// segment that is no module name (`Step`, `now`): types and items do not matter here, only
/// which module they come from.
fn paths_named(code: &str, module: &[String]) -> Vec<ModPath> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start).map(|i| i + from) {
            from = i + start.len();
            if i > 0 && (is_ident(b[i - 1] as char) || b[i - 1] == b':') {
                continue;
            }
            // Resolve the relative prefix (`super::super::`).
            let (mut base, mut rest): (ModPath, &str) = match start {
                "crate::" => (vec![], &code[from..]),
                "self::" => (module.to_vec(), &code[from..]),
                _ => (
                    module[..module.len().saturating_sub(1)].to_vec(),
                    &code[from..],
                ),
            };
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            tree(rest, base, &mut out);
        }
    }
    out
}

/// Reads one use-tree from `text` under `prefix` into `out`; returns the bytes read.
fn tree(text: &str, prefix: ModPath, out: &mut Vec<ModPath>) -> usize {
    let mut path = prefix;
    let mut i = 0;
    loop {
        let rest = &text[i..];
        if let Some(group) = rest.strip_prefix('{') {
            i += 1;
            let mut j = 0;
            loop {
                let g = &group[j..];
                let skip = g.len() - g.trim_start().len();
                j += skip;
                if group[j..].starts_with('}') || j >= group.len() {
                    return i + j + 1;
                }
                // At least one byte, so that a stray character cannot stall the reader.
                j += tree(&group[j..], path.clone(), out).max(1);
                let g = &group[j..];
                let skip = g.len() - g.trim_start_matches([',', ' ', '\n']).len();
                j += skip;
            }
        }
        let seg: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        i += seg.len();
        let module_name = seg.starts_with(|c: char| c.is_ascii_lowercase()) && seg != "self";
        if module_name {
            path.push(seg);
        }
        if module_name && text[i..].starts_with("::") {
            i += 2;
            continue;
        }
        if !path.is_empty() {
            out.push(path);
        }
        // Skip the rest of this tree item (`as x`, a type's path) up to `,` or `}`.
        let tail = &text[i..];
        return i + tail.find([',', '}', ';', '(', ' ']).unwrap_or(tail.len());
    }
}

/// Every path named by a source, with the line it is on.
fn named(s: &Source) -> Vec<(usize, ModPath)> {
    // A use-tree may span lines: read the code joined, then map offsets back to lines.
    let mut text = String::new();
    let mut starts = Vec::new();
    for (n, l) in &s.code {
        starts.push((text.len(), *n));
        text.push_str(l);
        text.push('\n');
    }
    let line_at = |off: usize| {
        starts
            .iter()
            .rev()
            .find(|(o, _)| *o <= off)
            .map_or(0, |(_, n)| *n)
    };
    let is_use = |l: &str| {
        let l = l
            .trim_start_matches("pub ")
            .trim_start_matches("pub(crate) ");
        l.trim_start_matches("pub(super) ").starts_with("use ")
    };
    // Paths in code, line by line (a `use` statement is read whole below).
    let mut out: Vec<(usize, ModPath)> = s
        .code
        .iter()
        .filter(|(_, l)| !is_use(l))
        .flat_map(|(n, l)| paths_named(l, &s.module).into_iter().map(move |p| (*n, p)))
        .collect();
    // `use` statements, whole (to their `;`); `use child::x` names a child module this file
    // declares (`mod child;`), as 2018 paths allow.
    let children = declared_children(&s.code);
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        if !is_use(line) {
            continue;
        }
        let from = start + line.find("use ").unwrap() + 4;
        let end = text[from..].find(';').map_or(text.len(), |e| e + from);
        let stmt = &text[from..end];
        let first: String = stmt.chars().take_while(|c| is_ident(*c)).collect();
        if ["crate", "super", "self"].contains(&first.as_str()) {
            out.extend(
                paths_named(stmt, &s.module)
                    .into_iter()
                    .map(|p| (line_at(start), p)),
            );
        } else if children.contains(&first) {
            let mut sub = Vec::new();
            tree(stmt, s.module.clone(), &mut sub);
            out.extend(sub.into_iter().map(|p| (line_at(start), p)));
        }
    }
    out
}

/// The child modules a file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared_children(code: &[(usize, String)]) -> BTreeSet<String> {
    code.iter()
        .filter_map(|(_, l)| {
            let l = l
                .trim_start_matches("pub ")
                .trim_start_matches("pub(crate) ");
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

// --- The checks ---------------------------------------------------------------------------------

#[test]
fn every_module_uses_only_what_its_row_in_architecture_md_allows() {
    let map = Map::parse(&architecture_md()).unwrap();
    let mut broken = BTreeSet::new();
    let mut checked = 0;
    for s in sources() {
        let Some(row) = map.row_of(&s.module) else {
            panic!(
                "controller/src/{} has no row in ARCHITECTURE.md's table",
                s.rel
            );
        };
        checked += 1;
        for (n, target) in named(&s) {
            if !map.allows(row, &target) {
                broken.insert(format!(
                    "controller/src/{}:{n}: {} uses {}",
                    s.rel,
                    s.module.join("::"),
                    target.join("::")
                ));
            }
        }
    }
    assert!(checked > 150, "only {checked} files checked");
    assert!(
        broken.is_empty(),
        "layer rules broken (ARCHITECTURE.md's table says what each row may use):\n{}",
        broken.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The file a module path lands in: the longest prefix that is a source file's module.
fn file_of(path: &[String], files: &BTreeSet<ModPath>) -> Option<ModPath> {
    (1..=path.len())
        .rev()
        .map(|k| path[..k].to_vec())
        .find(|p| files.contains(p))
}

/// File → the files it names, leaving out a file's own ancestors and descendants (a module
/// declares its children and they use its items through `super::`: that is the nesting, not a
/// dependency between concerns).
fn file_edges(sources: &[Source]) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files: BTreeSet<ModPath> = sources.iter().map(|s| s.module.clone()).collect();
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for s in sources {
        let e = edges.entry(s.module.clone()).or_default();
        for (_, p) in named(s) {
            if let Some(to) = file_of(&p, &files) {
                if !to.starts_with(&s.module) && !s.module.starts_with(&to) {
                    e.insert(to);
                }
            }
        }
    }
    edges
}

/// The strongly connected components of more than one file (Tarjan), each sorted.
fn circles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct T<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a ModPath) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.edges.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        out: vec![],
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn show(c: &[ModPath]) -> String {
    c.iter()
        .map(|p| p.join("::"))
        .collect::<Vec<_>>()
        .join(" ↔ ")
}

#[test]
fn no_two_files_import_each_other_even_through_others() {
    let found = circles(&file_edges(&sources()));
    assert!(
        found.is_empty(),
        "import circles between files (move what both need into a file of its own):\n{}",
        found.iter().map(|c| show(c)).collect::<Vec<_>>().join("\n")
    );
}

/// The modules of the pure middle (ARCHITECTURE.md, "Pure in the middle").
const PURE: &[&str] = &["desired", "p2p", "plan", "status", "pool", "layout"];

/// What the pure middle never names outside its tests: a clock, the file system, the
/// environment, processes, threads, an async runtime, Kubernetes.
const IMPURE: &[&str] = &[
    "Timestamp::now",
    "SystemTime::now",
    "Instant::now",
    "clock::now",
    "std::fs",
    "std::env",
    "std::process",
    "std::thread",
    "tokio::",
    "kube::",
];

#[test]
fn the_pure_middle_reads_no_clock_file_environment_or_kubernetes() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for s in sources().iter().filter(|s| PURE.contains(&s.top())) {
        checked += 1;
        for (n, code) in &s.code {
            for bad in IMPURE.iter().filter(|b| code.contains(*b)) {
                broken.push(format!(
                    "controller/src/{}:{n}: {} names {bad}",
                    s.rel,
                    s.top()
                ));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} files of the pure middle checked"
    );
    assert!(
        broken.is_empty(),
        "the pure middle takes the time, files and environment as arguments (ARCHITECTURE.md):\n{}",
        broken.join("\n")
    );
}

/// Reads of the wall clock; only `clock.rs` makes them (a pass reads it once, through there).
const WALL_CLOCK: &[&str] = &["Timestamp::now(", "SystemTime::now(", "Zoned::now("];

#[test]
fn only_clock_rs_reads_the_wall_clock() {
    let mut broken = Vec::new();
    for s in sources().iter().filter(|s| s.rel != "clock.rs") {
        for (n, code) in &s.code {
            for bad in WALL_CLOCK.iter().filter(|b| code.contains(*b)) {
                broken.push(format!("controller/src/{}:{n}: {bad}", s.rel));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "the wall clock is read through crate::clock (one read per pass, at the door):\n{}",
        broken.join("\n")
    );
}

/// Whether a file declares a test module inline (`#[cfg(test)]` then `mod x {`).
fn inline_test_module(text: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    lines.windows(2).position(|w| {
        w[0].trim() == "#[cfg(test)]" && {
            let next = w[1].trim();
            let next = next
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub(crate) ");
            next.starts_with("mod ") && next.ends_with('{')
        }
    })
}

/// One place for unit tests: `a.rs`'s are in `a/tests.rs` (`a/mod.rs`'s in `a/tests.rs`),
/// declared `#[cfg(test)] mod tests;`, never inline, so that a file's code is read without
/// scrolling past its tests and a newcomer finds them by name.
#[test]
fn unit_tests_live_in_their_own_file() {
    let root = src();
    let mut files = Vec::new();
    rs_files(&root, &mut files);
    let inline: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = inline_test_module(&std::fs::read_to_string(f).unwrap())?;
            Some(format!(
                "{}:{}",
                f.strip_prefix(&root).unwrap().display(),
                n + 2
            ))
        })
        .collect();
    assert!(
        inline.is_empty(),
        "test modules declared inline (move each to a file of its own, `mod tests;`):\n{}",
        inline.join("\n")
    );
    assert!(inline_test_module("#[cfg(test)]\nmod tests {\n}\n").is_some());
    assert!(inline_test_module("#[cfg(test)]\nmod tests;\n").is_none());
}

// --- The readers, on planted text ---------------------------------------------------------------

fn p(s: &str) -> ModPath {
    s.split("::").map(str::to_string).collect()
}

#[test]
fn the_path_reader_sees_groups_relative_paths_and_paths_in_code() {
    let here = p("plan::servers");
    assert_eq!(
        paths_named("use crate::{host::model, step::Step};", &here),
        [p("host::model"), p("step")]
    );
    assert_eq!(
        paths_named("let m = crate::metrics::Metrics::new();", &here),
        [p("metrics")]
    );
    assert_eq!(
        paths_named(
            "use super::{err, tenancy::{self, check}, Problems};",
            &p("desired::server")
        ),
        [
            p("desired::err"),
            p("desired::tenancy"),
            p("desired::tenancy::check"),
            p("desired")
        ]
    );
    assert_eq!(
        paths_named("use super::super::model::X;", &p("host::local::ledger")),
        [p("host::model")]
    );
    assert_eq!(
        paths_named("x = crate::host::preflight::sha256(&t);", &here),
        [p("host::preflight::sha256")]
    );
    assert!(paths_named("no use here; gpuplane_crate::x", &here).is_empty());
}

const PLANTED_MD: &str = "\
| folder / file | concern | may use |
|---|---|---|
| `text.rs` | text | nothing |
| `clock.rs` | clock | nothing |
| `host/model.rs`, `host/ledger.rs` | the model | leaves |
| `host/` | backends | `host::model`, leaves |
| `plan/` | planner | `host::model`, CRD types |
| `cli/` | the command | everything below |
";

#[test]
fn the_map_reader_refuses_what_a_planted_map_forbids() {
    let m = Map::parse(PLANTED_MD).unwrap();
    let row = |s: &str| m.row_of(&p(s)).unwrap();
    // An upward use, a reach past the model into a backend, a use of a group's other file.
    assert!(!m.allows(row("host::model"), &p("plan")));
    assert!(!m.allows(row("plan::servers"), &p("host::preflight::sha256")));
    assert!(m.allows(row("plan::servers"), &p("host::model::HostState")));
    assert!(m.allows(row("plan"), &p("host::ledger")));
    assert!(m.allows(row("host::local"), &p("text")));
    assert!(!m.allows(row("host::model"), &p("host::local")));
    assert!(m.allows(row("cli"), &p("host::local")));
    assert!(!m.allows(row("text"), &p("clock")));
    // Prose the reader would ignore is refused.
    let bad = PLANTED_MD.replace("| leaves |", "| leaves and sometimes `cli` maybe |");
    assert!(
        Map::parse(&bad).is_ok(),
        "backticked modules in prose are read as rules"
    );
    let bad = PLANTED_MD.replace(
        "`host::model`, CRD types",
        "`host::model`, whatever it needs",
    );
    assert!(Map::parse(&bad).unwrap_err().contains("whatever it needs"));
}

#[test]
fn the_circle_finder_finds_a_planted_circle_and_ignores_nesting() {
    let srcs = |files: &[(&str, &str)]| -> Vec<Source> {
        files
            .iter()
            .map(|(rel, text)| Source {
                rel: rel.to_string(),
                module: module_path(rel),
                code: code_lines(text),
            })
            .collect()
    };
    let planted = srcs(&[
        ("desired/mod.rs", "mod server;\npub use server::resolve;\n"),
        ("desired/server.rs", "use super::{err, tenancy};\n"),
        (
            "desired/tenancy.rs",
            "fn f() { super::server::model_location(p) }\n",
        ),
    ]);
    let found = circles(&file_edges(&planted));
    assert_eq!(found, [vec![p("desired::server"), p("desired::tenancy")]]);
    let nested = srcs(&[
        ("desired/mod.rs", "mod server;\npub use server::resolve;\n"),
        ("desired/server.rs", "use super::err;\n"),
    ]);
    assert!(circles(&file_edges(&nested)).is_empty());
}

#[test]
fn test_code_and_comments_are_not_read() {
    let text = "use crate::a;\n// use crate::b;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\nfn f() {}\n    #[cfg(test)]\n    fn g() {\n        crate::d::x();\n    }\nx = crate::e::y();\n";
    let code: Vec<String> = code_lines(text).into_iter().map(|(_, l)| l).collect();
    assert_eq!(code, ["use crate::a;", "fn f() {}", "x = crate::e::y();"]);
}
