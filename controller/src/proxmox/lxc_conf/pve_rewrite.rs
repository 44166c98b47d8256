//! A model of PVE rewriting a container config (`parse_pct_config` + `write_pct_config`), as any
//! PVE tool does. Test-only: the tests use it to prove that the agent's lines survive such a
//! rewrite; nothing outside the tests calls it.

use std::collections::BTreeMap;

use super::pve_line::{parse_pve_line, PveLine};

#[derive(Debug, Default)]
struct PveSection {
    description: String,
    keys: BTreeMap<String, String>,
    env: Option<String>,
    lxc: Vec<(String, String)>,
}

impl PveSection {
    fn is_empty(&self) -> bool {
        self.description.is_empty()
            && self.keys.is_empty()
            && self.env.is_none()
            && self.lxc.is_empty()
    }

    fn write(&self, out: &mut String) {
        for line in perl_split(&self.description, '\n', false) {
            out.push('#');
            out.push_str(&encode_text(line));
            out.push('\n');
        }
        const SKIP: [&str; 7] = [
            "digest",
            "description",
            "pending",
            "snapshots",
            "snapname",
            "env",
            "lxc",
        ];
        for (k, v) in &self.keys {
            if !SKIP.contains(&k.as_str()) {
                out.push_str(&format!("{k}: {v}\n"));
            }
        }
        if let Some(env) = &self.env {
            for v in perl_split(env, '\0', true) {
                out.push_str(&format!("lxc.environment.runtime: {v}\n"));
            }
        }
        for (k, v) in &self.lxc {
            out.push_str(&format!("{k}: {v}\n"));
        }
    }
}

/// A model of what PVE's `parse_pct_config` + `write_pct_config` do to a file, i.e. what the
/// file looks like after any PVE tool (`pct set`, snapshot, backup lock, ...) rewrites it.
/// Used by tests to prove that the agent's lines survive a Proxmox rewrite.
///
/// Modelled: per section, `#` lines (wherever they are) become the description and are written
/// first, percent-encoded per `encode_text` (trailing empty comment lines are lost);
/// `description:` lines are appended to it without newline; normal keys are sorted (byte
/// order) with the last duplicate winning, booleans/integers of common keys normalised;
/// `lxc.*` lines are written as `key: value` after the normal keys in file order, with
/// `lxc.environment.runtime` first; invalid `lxc.*` keys and unparseable lines are dropped;
/// `delete:` outside `[pve:pending]` and a top-level `snapstate` are dropped; sections are
/// written main, `[pve:pending]` (if non-empty), snapshots sorted by name, each header
/// preceded by one blank line; output uses `\n` only.
///
/// Not modelled (approximations): type checks of keys beyond a small table, the exact list of
/// deprecated lxc2-era keys, removal of referenced `unusedN`, non-UTF-8 comment bytes.
pub(super) fn pve_rewrite(text: &str) -> String {
    let (mut main, pending, snaps) = parse_sections(text);
    main.keys.remove("snapstate");
    let mut out = String::new();
    main.write(&mut out);
    if !pending.is_empty() {
        out.push_str("\n[pve:pending]\n");
        pending.write(&mut out);
    }
    for (name, sec) in &snaps {
        out.push_str(&format!("\n[{name}]\n"));
        sec.write(&mut out);
    }
    out
}

/// Which section the parser is in.
#[derive(PartialEq)]
enum Cur {
    Main,
    Pending,
    Snap(String),
}

/// The sections as PVE's parser keeps them: main, `[pve:pending]`, and each snapshot by name.
type Sections = (PveSection, PveSection, BTreeMap<String, PveSection>);

/// Reads `text` as PVE's parser does: comments become the section's description, invalid
/// `lxc.*` keys are dropped, `delete:` counts only in `[pve:pending]`.
fn parse_sections(text: &str) -> Sections {
    let (mut main, mut pending) = (PveSection::default(), PveSection::default());
    let mut snaps: BTreeMap<String, PveSection> = BTreeMap::new();
    let mut cur = Cur::Main;
    let mut descr = String::new();
    fn section<'a>(
        cur: &Cur,
        main: &'a mut PveSection,
        pending: &'a mut PveSection,
        snaps: &'a mut BTreeMap<String, PveSection>,
    ) -> &'a mut PveSection {
        match cur {
            Cur::Main => main,
            Cur::Pending => pending,
            Cur::Snap(name) => snaps.entry(name.clone()).or_default(),
        }
    }
    for line in text.split('\n') {
        let parsed = parse_pve_line(line);
        if let PveLine::PendingHeader | PveLine::SnapshotHeader(_) = parsed {
            section(&cur, &mut main, &mut pending, &mut snaps).description =
                std::mem::take(&mut descr);
        }
        match parsed {
            PveLine::Blank | PveLine::Unparseable => {}
            PveLine::PendingHeader => {
                cur = Cur::Pending;
                pending = PveSection::default();
            }
            PveLine::SnapshotHeader(name) => {
                cur = Cur::Snap(name.to_string());
                snaps.insert(name.to_string(), PveSection::default());
            }
            PveLine::Comment(t) => {
                descr.push_str(&decode_text(t));
                descr.push('\n');
            }
            PveLine::Description(t) => descr.push_str(&decode_text(t)),
            PveLine::Delete(v) => {
                if cur == Cur::Pending {
                    pending.keys.insert("delete".to_string(), v.to_string());
                }
            }
            other => section(&cur, &mut main, &mut pending, &mut snaps).add(other),
        }
    }
    section(&cur, &mut main, &mut pending, &mut snaps).description = descr;
    (main, pending, snaps)
}

impl PveSection {
    /// Adds a key line (`lxc.*`, `snapstate`, any other key) as PVE's parser keeps it.
    fn add(&mut self, line: PveLine<'_>) {
        match line {
            PveLine::Lxc { key, value } if is_valid_lxc_key(key) => {
                if key == "lxc.environment.runtime" {
                    match &mut self.env {
                        Some(e) => {
                            e.push('\0');
                            e.push_str(value);
                        }
                        None => self.env = Some(value.to_string()),
                    }
                } else {
                    self.lxc.push((key.to_string(), value.to_string()));
                }
            }
            PveLine::Snapstate(s) => {
                self.keys.insert("snapstate".to_string(), s.to_string());
            }
            PveLine::Normal { key: "env", value } => self.env = Some(value.to_string()),
            PveLine::Normal { key, value } => {
                self.keys.insert(key.to_string(), check_type(key, value));
            }
            _ => {}
        }
    }
}

/// Perl `split(/SEP/, s)` (or `/SEP+/` when `collapse`): a leading empty field is kept,
/// trailing empty fields are dropped, and with `collapse` runs of separators count as one.
fn perl_split(s: &str, sep: char, collapse: bool) -> Vec<&str> {
    let mut fields: Vec<&str> = s
        .split(sep)
        .enumerate()
        .filter(|(i, f)| !collapse || *i == 0 || !f.is_empty())
        .map(|(_, f)| f)
        .collect();
    while fields.last().is_some_and(|f| f.is_empty()) {
        fields.pop();
    }
    fields
}

/// Boolean/integer normalisation done by `check_type` for common keys.
fn check_type(key: &str, value: &str) -> String {
    const BOOLEANS: [&str; 6] = [
        "onboot",
        "template",
        "protection",
        "unprivileged",
        "console",
        "debug",
    ];
    const INTEGERS: [&str; 5] = ["memory", "swap", "cores", "tty", "cpuunits"];
    if BOOLEANS.contains(&key) {
        let l = value.to_ascii_lowercase();
        if ["1", "on", "yes", "true"].contains(&l.as_str()) {
            return "1".to_string();
        }
        if ["0", "off", "no", "false"].contains(&l.as_str()) {
            return "0".to_string();
        }
    }
    if INTEGERS.contains(&key) && !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let t = value.trim_start_matches('0');
        return if t.is_empty() {
            "0".to_string()
        } else {
            t.to_string()
        };
    }
    value.to_string()
}

/// Approximation of `is_valid_lxc_conf_key` (pve-container, `src/PVE/LXC/Config.pm`); invalid
/// keys are dropped by PVE.
fn is_valid_lxc_key(key: &str) -> bool {
    LXC_EXACT.contains(&key)
        || LXC_DEPRECATED.contains(&key)
        || key.starts_with("lxc.network.")
        || LXC_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// The `lxc.*` keys `is_valid_lxc_conf_key` accepts by their exact name ([`is_valid_lxc_key`]).
const LXC_EXACT: &[&str] = &[
    "lxc.apparmor.profile",
    "lxc.apparmor.allow_incomplete",
    "lxc.apparmor.allow_nesting",
    "lxc.apparmor.raw",
    "lxc.selinux.context",
    "lxc.include",
    "lxc.arch",
    "lxc.uts.name",
    "lxc.signal.halt",
    "lxc.signal.reboot",
    "lxc.signal.stop",
    "lxc.init.cmd",
    "lxc.init.cwd",
    "lxc.init.uid",
    "lxc.init.gid",
    "lxc.init.groups",
    "lxc.pty.max",
    "lxc.console.logfile",
    "lxc.console.path",
    "lxc.tty.max",
    "lxc.devtty.dir",
    "lxc.hook.autodev",
    "lxc.autodev",
    "lxc.kmsg",
    "lxc.mount.fstab",
    "lxc.mount.entry",
    "lxc.mount.auto",
    "lxc.rootfs.mount",
    "lxc.cap.drop",
    "lxc.cap.keep",
    "lxc.seccomp.profile",
    "lxc.seccomp.notify.proxy",
    "lxc.seccomp.notify.cookie",
    "lxc.idmap",
    "lxc.hook.pre-start",
    "lxc.hook.pre-mount",
    "lxc.hook.mount",
    "lxc.hook.start",
    "lxc.hook.stop",
    "lxc.hook.post-stop",
    "lxc.hook.clone",
    "lxc.hook.destroy",
    "lxc.hook.version",
    "lxc.log.level",
    "lxc.log.file",
    "lxc.start.auto",
    "lxc.start.delay",
    "lxc.start.order",
    "lxc.group",
    "lxc.environment",
    "lxc.environment.runtime",
    "lxc.environment.hooks",
    "lxc.sysctl.fs.mqueue",
    "lxc.sysctl.kernel.msgmax",
    "lxc.sysctl.kernel.msgmnb",
    "lxc.sysctl.kernel.msgmni",
    "lxc.sysctl.kernel.sem",
    "lxc.sysctl.kernel.shmall",
    "lxc.sysctl.kernel.shmmax",
    "lxc.sysctl.kernel.shmmni",
    "lxc.sysctl.kernel.shm_rmid_forced",
];
/// lxc2-era names PVE warns about but keeps (subset).
const LXC_DEPRECATED: &[&str] = &[
    "lxc.aa_profile",
    "lxc.aa_allow_incomplete",
    "lxc.se_context",
    "lxc.id_map",
    "lxc.init_cmd",
    "lxc.init_uid",
    "lxc.init_gid",
    "lxc.tty",
    "lxc.pts",
    "lxc.utsname",
    "lxc.devttydir",
    "lxc.loglevel",
];
/// Prefixes under which every `lxc.*` key is accepted.
const LXC_PREFIXES: [&str; 5] = [
    "lxc.cgroup2.",
    "lxc.prlimit.",
    "lxc.net.",
    "lxc.limit.",
    "lxc.cgroup.",
];

/// `PVE::ParseUtils::decode_text`: `%XX` unescape (any hex case), then lossy UTF-8 decode.
fn decode_text(s: &str) -> String {
    let b = s.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex_val(b[i + 1]), hex_val(b[i + 2])) {
                out.push(h * 16 + l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_val(c: u8) -> Option<u8> {
    (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// `PVE::ParseUtils::encode_text`: UTF-8 bytes outside 0x20-0x24, 0x26-0x39, 0x3b-0x7e become
/// `%XX` with upper-case hex.
fn encode_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        let safe = matches!(b, 0x20..=0x24 | 0x26..=0x39 | 0x3b..=0x7e);
        if safe {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
