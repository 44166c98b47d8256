//! Running the slice's interpreter the way its unit will: as the unit's user, isolated from the
//! environment and the working directory, and only from a tree no one else can write.
//!
//! The preflight import check and the P2P probe run the admin's interpreter before the unit
//! exists. As root, they would hand root to whoever can write the interpreter's tree or drop a
//! `sglang.py` in the working directory, although the unit itself runs with `User=`. So:
//! - [`argv`] prefixes `runuser -u USER --` (a numeric UID: `setpriv --reuid --regid
//!   --clear-groups`) when the slice names a user other than root, and runs Python with `-I -s`
//!   (isolated: no `PYTHON*` variables, no user site, no script or working directory on
//!   `sys.path`);
//! - [`tree_problem`] refuses an interpreter any of whose files or directories, from `/` down to
//!   the binary it resolves to and the venv's `site-packages`, is writable by someone other than
//!   root and the unit's user (another owner, or group/other write without the sticky bit).
//!
//! # Caveats
//! The unit's systemd sandbox (`sglang/sandbox.rs`) is not applied to these short runs; only the
//! user, the cleared environment (`exec.rs`) and Python's isolation are. The tree check looks at
//! the path to the interpreter and the `site-packages` directories themselves, not at every
//! file below them (a venv holds tens of thousands).

/// `python -I -s`: isolated mode (`-I` implies `-E` and `-s`; `-s` is written for a reader).
pub const ISOLATED: [&str; 2] = ["-I", "-s"];

/// The argv that runs `argv` as `user` (`None` or `root`: unchanged), with `runuser` at
/// `runuser` for a name and `setpriv` for a numeric UID.
pub fn argv(user: Option<&str>, runuser: &str, argv: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = match user {
        None | Some("root") | Some("0") => return argv,
        Some(u) if u.bytes().all(|b| b.is_ascii_digit()) => [
            "setpriv",
            &format!("--reuid={u}"),
            &format!("--regid={u}"),
            "--clear-groups",
            "--",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        Some(u) => vec![runuser.into(), "-u".into(), u.into(), "--".into()],
    };
    out.extend(argv);
    out
}

/// One path as `stat` sees it: owner UID, mode bits, and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub uid: u32,
    pub mode: u32,
    pub path: String,
}

/// `stat -L -c '%u %a %n'` lines (mode in octal) as [`Stat`]s; lines that do not parse are left out.
pub fn parse_stat(out: &str) -> Vec<Stat> {
    out.lines()
        .filter_map(|l| {
            let mut w = l.splitn(3, ' ');
            let uid = w.next()?.parse().ok()?;
            let mode = u32::from_str_radix(w.next()?, 8).ok()?;
            Some(Stat {
                uid,
                mode,
                path: w.next()?.to_string(),
            })
        })
        .collect()
}

/// The paths whose ownership decides who controls `python`: every ancestor directory of the
/// interpreter and of `real` (what it resolves to), both files, and `site_packages`.
pub fn paths_to_check(python: &str, real: Option<&str>, site_packages: &[String]) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    let mut add_chain = |p: &str| {
        let mut cur = std::path::Path::new(p);
        loop {
            let s = cur.to_string_lossy().into_owned();
            if !s.is_empty() && !out.contains(&s) {
                out.push(s);
            }
            match cur.parent() {
                Some(parent) => cur = parent,
                None => break,
            }
        }
    };
    add_chain(python);
    if let Some(r) = real {
        add_chain(r);
    }
    for sp in site_packages {
        add_chain(sp);
    }
    out
}

/// Why the interpreter is not safe to run as the unit's user: the first path another user can
/// write. `trusted`: the UIDs that may own it besides root (the unit's user, and the agent's own
/// user, which can do whatever the agent does anyway: a test under a non-root account).
pub fn tree_problem(python: &str, stats: &[Stat], trusted: &[u32]) -> Option<String> {
    const STICKY: u32 = 0o1000;
    for s in stats {
        let owner_ok = s.uid == 0 || trusted.contains(&s.uid);
        let others_write = s.mode & 0o022 != 0 && s.mode & STICKY == 0;
        if !owner_ok || others_write {
            let who = if !owner_ok {
                format!("owned by UID {}", s.uid)
            } else {
                format!("mode {:04o}", s.mode & 0o7777)
            };
            return Some(format!(
                "{python}: {} is {who}, so someone other than root and the unit's user can change the code it runs; the agent runs no interpreter such a user controls (chown it to root, or chmod go-w)",
                crate::text::sanitize(&s.path, 200),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests;
