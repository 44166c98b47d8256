//! Tests of the editor: the fixtures round-trip, edits touch only the agent's lines and are
//! idempotent (also as property tests), and edited files survive a PVE rewrite.

use super::classify::{classify_gpu_line, GpuLine};
use super::pve_rewrite::pve_rewrite;
use super::*;
use crate::proxmox::lines::testing::{is_subsequence, lines};
use proptest::prelude::*;

const F8A: &str = include_str!("testdata/lxc-8a.conf");
const F8A_CANON: &str = include_str!("testdata/lxc-8a-canonical.conf");
const F8B: &str = include_str!("testdata/lxc-8b.conf");
const F8C: &str = include_str!("testdata/lxc-8c.conf");
const FIXTURES: [&str; 4] = [F8A, F8A_CANON, F8B, F8C];

fn desired(minors: &[u32], uvm_major: u32, default_style: MountStyle) -> DesiredGpuMounts {
    DesiredGpuMounts {
        minors: minors.iter().copied().collect(),
        uvm_major,
        default_style,
    }
}

/// The allow lines the agent writes in the mount style: one per GPU minor, nvidiactl, and the
/// uvm major's `*`.
fn allow_lines(minors: &[u32], uvm_major: u32) -> String {
    let mut out: String = minors
        .iter()
        .map(|n| format!("lxc.cgroup2.devices.allow: c 195:{n} rwm\n"))
        .collect();
    out.push_str("lxc.cgroup2.devices.allow: c 195:255 rwm\n");
    out.push_str(&format!("lxc.cgroup2.devices.allow: c {uvm_major}:* rwm\n"));
    out
}

/// F8A with its broad `c 195:* rwm` grant narrowed to `minors` (the lines go after the last
/// owned line, the file's last; the 509 line is kept).
fn f8a_narrowed(minors: &[u32]) -> String {
    let mut out = F8A.replace("lxc.cgroup2.devices.allow: c 195:* rwm\n", "");
    let allow = allow_lines(minors, 509);
    out.push_str(allow.trim_end_matches("lxc.cgroup2.devices.allow: c 509:* rwm\n"));
    out
}

fn set(text: &str, d: &DesiredGpuMounts) -> (String, bool) {
    let mut c = LxcConfig::parse(text);
    let changed = c.set_gpu_mounts(d);
    (c.render(), changed)
}

/// Lines of `text` that the agent does not own for `uvm_major`.
fn foreign_lines(text: &str, uvm_major: u32) -> Vec<&str> {
    let c = LxcConfig::parse(text);
    let end = c.main_end();
    lines(text)
        .into_iter()
        .enumerate()
        .filter(|(i, l)| {
            *i >= end
                || match classify_gpu_line(l) {
                    None => true,
                    Some(GpuLine::Device { .. }) => false,
                    Some(GpuLine::Allow { major: m, .. }) => m != NVIDIA_MAJOR && m != uvm_major,
                }
        })
        .map(|(_, l)| l)
        .collect()
}

fn assert_only_owned_changed(before: &str, after: &str, uvm_major: u32) {
    assert_eq!(
        foreign_lines(before, uvm_major),
        foreign_lines(after, uvm_major),
        "foreign lines changed:\n--- before\n{before}\n--- after\n{after}"
    );
}

fn all_controls() -> BTreeSet<ControlDevice> {
    ControlDevice::ALL.into_iter().collect()
}

fn devn_controls() -> BTreeSet<ControlDevice> {
    [
        ControlDevice::Ctl,
        ControlDevice::Uvm,
        ControlDevice::UvmTools,
    ]
    .into()
}

#[test]
fn round_trip_fixtures_and_oddities() {
    let crlf = F8A.replace('\n', "\r\n");
    let no_nl = F8B.trim_end_matches('\n').to_string();
    let weird = "#  a: b %41 100%\n#\n\n   \n # indented\nFoo: bar\nonboot:\nlxc.Mount.entry: x\n\
                 lxc.foo : bar\n[bad name!]\n\u{fc}nic\u{f6}de: \u{1f600}\n\t\r\n\r\r\n";
    for text in
        FIXTURES
            .iter()
            .copied()
            .chain([crlf.as_str(), no_nl.as_str(), weird, "", "\n", "\r", "x"])
    {
        assert_eq!(LxcConfig::parse(text).render(), text);
    }
}

#[test]
fn gpu_mounts_of_fixtures() {
    let a = LxcConfig::parse(F8A).gpu_mounts();
    assert_eq!(a.minors, [0, 1, 2, 3].into());
    assert_eq!(a.control, all_controls());
    assert_eq!(a.style, Some(MountStyle::MountEntry));
    assert_eq!(a.cgroup_allow_majors, [195, 509].into());
    assert_eq!(LxcConfig::parse(F8A_CANON).gpu_mounts(), a);

    let b = LxcConfig::parse(F8B).gpu_mounts();
    assert_eq!(b.minors, [0, 1].into());
    assert_eq!(b.control, devn_controls());
    assert_eq!(b.style, Some(MountStyle::DevN));
    assert!(b.cgroup_allow_majors.is_empty());

    let c = LxcConfig::parse(F8C).gpu_mounts();
    assert_eq!(c.minors, [0].into());
    assert_eq!(c.control, [ControlDevice::Ctl, ControlDevice::Uvm].into());
    assert_eq!(c.style, Some(MountStyle::DevN));
}

#[test]
fn no_change_when_already_satisfied() {
    // The broad `c 195:* rwm` is narrowed to the container's GPUs once, then nothing changes.
    let d = desired(&[0, 1, 2, 3], 509, MountStyle::DevN);
    let narrowed = f8a_narrowed(&[0, 1, 2, 3]);
    assert_eq!(set(F8A, &d), (narrowed.clone(), true));
    assert_only_owned_changed(F8A, &narrowed, 509);
    assert_eq!(set(&narrowed, &d), (narrowed.clone(), false));
    assert_eq!(
        set(F8B, &desired(&[0, 1], 511, MountStyle::MountEntry)),
        (F8B.to_string(), false)
    );
}

#[test]
fn mount_entry_remove_and_add_gpus() {
    let d = desired(&[0, 2], 509, MountStyle::DevN);
    let (out, changed) = set(F8A, &d);
    assert!(changed);
    let expected = f8a_narrowed(&[0, 2])
        .replace(
            "lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n",
            "",
        )
        .replace(
            "lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file\n",
            "",
        );
    assert_eq!(out, expected);
    assert_eq!(set(&out, &d), (out.clone(), false));

    let d = desired(&[0, 1, 2, 3, 4], 509, MountStyle::DevN);
    let (out2, changed) = set(&out, &d);
    assert!(changed);
    // After the last owned line (nvidiactl's allow line): the new GPUs' allow lines, then
    // their mount entries.
    let expected = format!(
        "{out}lxc.cgroup2.devices.allow: c 195:1 rwm\n\
         lxc.cgroup2.devices.allow: c 195:3 rwm\n\
         lxc.cgroup2.devices.allow: c 195:4 rwm\n\
         lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n\
         lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file\n\
         lxc.mount.entry: /dev/nvidia4 dev/nvidia4 none bind,optional,create=file\n"
    );
    assert_eq!(out2, expected);
    assert_only_owned_changed(F8A, &out2, 509);
    let g = LxcConfig::parse(&out2).gpu_mounts();
    assert_eq!(g.minors, [0, 1, 2, 3, 4].into());
    assert_eq!(set(&out2, &d), (out2.clone(), false));
}

#[test]
fn mount_entry_new_uvm_major_and_removal_of_everything() {
    // uvm major changed (container moved to another host): a 511 allow line is added,
    // the 509 one is no longer owned and stays; the broad 195 grant is narrowed.
    let (out, changed) = set(F8A, &desired(&[0, 1, 2, 3], 511, MountStyle::DevN));
    assert!(changed);
    assert_eq!(
        out,
        format!(
            "{}{}",
            F8A.replace("lxc.cgroup2.devices.allow: c 195:* rwm\n", ""),
            allow_lines(&[0, 1, 2, 3], 511)
        )
    );

    let (out, changed) = set(F8A, &desired(&[], 509, MountStyle::DevN));
    assert!(changed);
    let g = LxcConfig::parse(&out).gpu_mounts();
    assert_eq!(g, GpuMounts::default());
    assert!(out.contains("# NVIDIA passthrough"));
    assert!(out.contains("lxc.cgroup.devices.allow: c 195:* rwm\n"));
    assert_eq!(lines(&out).len(), lines(F8A).len() - 10);
    assert_only_owned_changed(F8A, &out, 509);
    assert!(!set(&out, &desired(&[], 509, MountStyle::DevN)).1);
}

#[test]
fn devn_add_gpu_copies_options_and_picks_free_index() {
    let d = desired(&[0, 1, 2], 511, MountStyle::MountEntry);
    let (out, changed) = set(F8B, &d);
    assert!(changed);
    let expected = F8B.replace(
        "dev4: /dev/nvidia-uvm-tools,mode=0666\n",
        "dev4: /dev/nvidia-uvm-tools,mode=0666\ndev7: /dev/nvidia2,gid=44,mode=0666\n",
    );
    assert_eq!(out, expected);
    assert_eq!(set(&out, &d), (out.clone(), false));

    // Remove GPU 0: exactly its line goes.
    let d = desired(&[1, 2], 511, MountStyle::MountEntry);
    let (out2, _) = set(&out, &d);
    assert_eq!(
        out2,
        out.replace("dev0: /dev/nvidia0,gid=44,mode=0666\n", "")
    );
    // Add it back: lowest free index is 0 again.
    let (out3, _) = set(&out2, &desired(&[0, 1, 2], 511, MountStyle::MountEntry));
    assert!(
        out3.contains("dev7: /dev/nvidia2,gid=44,mode=0666\ndev0: /dev/nvidia0,gid=44,mode=0666\n")
    );
    assert_only_owned_changed(F8B, &out3, 511);
}

#[test]
fn snapshot_and_pending_sections_untouched() {
    let d = desired(&[0, 1], 511, MountStyle::MountEntry);
    let (out, changed) = set(F8C, &d);
    assert!(changed);
    // dev0 is used in [pve:pending], dev1/dev2 in main: new lines get dev3, dev4.
    let expected = F8C.replacen(
        "dev2: /dev/nvidia-uvm,mode=0666\nhostname",
        "dev2: /dev/nvidia-uvm,mode=0666\ndev3: /dev/nvidia1,mode=0666\n\
         dev4: /dev/nvidia-uvm-tools,mode=0666\nhostname",
        1,
    );
    assert_eq!(out, expected);
    let main_end = out.find("\n[pve:pending]").unwrap_or(0);
    assert_eq!(
        out[main_end..],
        F8C[F8C.find("\n[pve:pending]").unwrap_or(0)..]
    );
    assert_eq!(set(&out, &d), (out.clone(), false));

    let (out, _) = set(F8C, &desired(&[], 511, MountStyle::MountEntry));
    assert!(!out[..out.find("[pve:pending]").unwrap_or(0)].contains("nvidia"));
    assert_eq!(out.matches("/dev/nvidia").count(), 4); // pending dev0 + snapshot's 3
}

#[test]
fn new_lines_go_to_end_of_main_section() {
    let text =
        "arch: amd64\nhostname: a\nlxc.apparmor.profile: unconfined\n\n[snap]\narch: amd64\n";
    let d = desired(&[0], 510, MountStyle::MountEntry);
    let (out, _) = set(text, &d);
    assert_eq!(
        out,
        "arch: amd64\nhostname: a\nlxc.apparmor.profile: unconfined\n\
         lxc.cgroup2.devices.allow: c 195:0 rwm\nlxc.cgroup2.devices.allow: c 195:255 rwm\n\
         lxc.cgroup2.devices.allow: c 510:* rwm\n\
         lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n\
         lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file\n\
         lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n\
         lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file\n\
         lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir\n\
         \n[snap]\narch: amd64\n"
    );
    let g = LxcConfig::parse(&out).gpu_mounts();
    assert_eq!(g.minors, [0].into());
    assert_eq!(g.control, all_controls());
    assert_eq!(g.cgroup_allow_majors, [195, 510].into());

    let (out, _) = set(text, &desired(&[3], 510, MountStyle::DevN));
    assert_eq!(
        out,
        "arch: amd64\nhostname: a\nlxc.apparmor.profile: unconfined\n\
         dev0: /dev/nvidia3,mode=0666\ndev1: /dev/nvidiactl,mode=0666\n\
         dev2: /dev/nvidia-uvm,mode=0666\ndev3: /dev/nvidia-uvm-tools,mode=0666\n\
         \n[snap]\narch: amd64\n"
    );
    // Empty file and a file whose main section is empty.
    let (out, _) = set("", &desired(&[1], 510, MountStyle::DevN));
    assert!(out.starts_with("dev0: /dev/nvidia1,mode=0666\n"));
    let (out, _) = set(
        "[snap]\narch: amd64\n",
        &desired(&[1], 510, MountStyle::DevN),
    );
    assert!(out.ends_with("dev3: /dev/nvidia-uvm-tools,mode=0666\n[snap]\narch: amd64\n"));
}

#[test]
fn crlf_and_missing_final_newline() {
    let crlf = F8B.replace('\n', "\r\n");
    let d = desired(&[0, 1, 5], 511, MountStyle::MountEntry);
    let (out, _) = set(&crlf, &d);
    assert!(out.contains(
        "dev4: /dev/nvidia-uvm-tools,mode=0666\r\ndev7: /dev/nvidia5,gid=44,mode=0666\r\n"
    ));
    assert!(!out.replace("\r\n", "").contains('\n'));
    assert_eq!(set(&out, &d), (out.clone(), false));

    let text = "arch: amd64\nlxc.cgroup2.devices.allow: c 195:0 rwm";
    let (out, _) = set(text, &desired(&[0], 511, MountStyle::MountEntry));
    assert!(out.starts_with(
        "arch: amd64\nlxc.cgroup2.devices.allow: c 195:0 rwm\nlxc.cgroup2.devices.allow: c 195:255 rwm\n\
         lxc.cgroup2.devices.allow: c 511:* rwm\nlxc.mount.entry: /dev/nvidia0 "
    ));
    assert!(out.ends_with("create=dir\n"));
    let (out, _) = set(&out, &desired(&[], 511, MountStyle::MountEntry));
    assert_eq!(out, "arch: amd64\n");
}

#[test]
fn separators_and_spacing_variants_are_owned() {
    let text = "lxc.mount.entry=/dev/nvidia0 dev/nvidia0 none bind 0 0\n\
                lxc.mount.entry   =   /dev/nvidiactl dev/nvidiactl none bind\n\
                lxc.mount.entry:/dev/nvidia-uvm   dev/nvidia-uvm none bind  \n\
                lxc.cgroup2.devices.allow =  c   195:*   rwm\n\
                lxc.cgroup2.devices.allow: c 195:0 rw\n\
                dev9: path=/dev/nvidia-uvm-tools ,uid=0\n\
                dev11: mode=0666,path=/dev/nvidia-uvm-tools,uid=0\n\
                dev10:   /dev/nvidia7\n\
                dev01: /dev/nvidia8\n\
                lxc.mount.entry: /dev/nvidia01 dev/nvidia1 none bind\n\
                dev2: /dev/nvidia9snapstate: prepare\n";
    let g = LxcConfig::parse(text).gpu_mounts();
    assert_eq!(g.minors, [0, 7].into());
    assert_eq!(g.control, devn_controls());
    assert_eq!(g.style, Some(MountStyle::MountEntry));
    assert_eq!(g.cgroup_allow_majors, [195].into());
}

#[test]
fn mixed_styles_converge() {
    let text = "dev0: /dev/nvidia5,mode=0666\n\
                lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n\
                dev1: /dev/nvidia-caps,mode=0666\n";
    let d = desired(&[0], 500, MountStyle::DevN);
    let (out, changed) = set(text, &d);
    assert!(changed);
    let g = LxcConfig::parse(&out).gpu_mounts();
    assert_eq!(g.minors, [0].into());
    assert_eq!(g.control, all_controls());
    assert_eq!(g.style, Some(MountStyle::MountEntry));
    assert_eq!(g.cgroup_allow_majors, [195, 500].into());
    assert!(!out.contains("dev1:"));
    assert_eq!(set(&out, &d), (out.clone(), false));
}

#[test]
fn pending_delete_and_keys_block_dev_indices() {
    let text = "dev1: /dev/dri/card0\n\n[pve:pending]\ndelete: dev0,!dev2;dev4\ndev3: /dev/null\n\n[s1]\ndev5: /dev/x\n";
    let (out, _) = set(text, &desired(&[0], 500, MountStyle::DevN));
    assert!(
        out.starts_with(
            "dev1: /dev/dri/card0\ndev5: /dev/nvidia0,mode=0666\ndev6: /dev/nvidiactl,mode=0666\n"
        ),
        "{out}"
    );
}

#[test]
fn pve_rewrite_matches_canonical_examples() {
    assert_eq!(pve_rewrite(F8A), F8A_CANON);
    assert_eq!(pve_rewrite(F8A_CANON), F8A_CANON);
    assert_eq!(pve_rewrite(F8B), F8B);
    assert_eq!(
        pve_rewrite(F8C),
        F8C.replace("#Training box: see runbook", "#Training box%3A see runbook")
    );
    assert_eq!(
        pve_rewrite("onboot: yes\nmemory: 0512\n# a: b\n#%3a 100%\n#\n\n[z1]\n#x\r\nlxc.foo: 1\nlxc.rootfs.path: x\ndelete: mp0\nsnapstate: prepare\n[a1]\nlxc.environment.runtime: A=1\nlxc.mount.entry = x y\nlxc.environment.runtime: B=2\ndescription: hi\n"),
        "# a%3A b\n#%3A 100%25\nmemory: 512\nonboot: 1\n\n[a1]\n#hi\nlxc.environment.runtime: A=1\nlxc.environment.runtime: B=2\nlxc.mount.entry: x y\n\n[z1]\n#x%0D\nsnapstate: prepare\n"
    );
}

#[test]
fn edited_files_survive_pve_rewrite() {
    let cases = [
        (F8A, desired(&[1, 6], 509, MountStyle::DevN)),
        (F8A, desired(&[0, 1, 2, 3], 511, MountStyle::DevN)),
        (F8B, desired(&[0, 3], 511, MountStyle::MountEntry)),
        (F8C, desired(&[0, 1, 2], 511, MountStyle::MountEntry)),
        (
            "arch: amd64\n\n[s]\narch: amd64\n",
            desired(&[2], 235, MountStyle::MountEntry),
        ),
        (
            "arch: amd64\n\n[s]\narch: amd64\n",
            desired(&[2], 235, MountStyle::DevN),
        ),
    ];
    for (text, d) in cases {
        let (out, _) = set(text, &d);
        let before = LxcConfig::parse(&out).gpu_mounts();
        let rewritten = pve_rewrite(&out);
        assert_eq!(
            LxcConfig::parse(&rewritten).gpu_mounts(),
            before,
            "{rewritten}"
        );
        assert!(!set(&rewritten, &d).1, "{rewritten}");
    }
}

/// A generated line: its text and whether the agent owns it (for the test's uvm major).
#[derive(Debug, Clone)]
struct GenLine {
    text: String,
    owned: bool,
}

const UVM: u32 = 509;

fn foreign_line() -> impl Strategy<Value = GenLine> {
    let fixed = prop::sample::select(vec![
        "arch: amd64",
        "hostname: gpu-01",
        "# NVIDIA: passthrough %41",
        "#",
        "",
        "   ",
        " # indented comment",
        "Foo: bar",
        "onboot:",
        "description: legacy text",
        "unknown_key: 1",
        "lxc.cgroup.devices.allow: c 195:* rwm",
        "lxc.cgroup2.devices.allow: c 226:* rwm",
        "lxc.cgroup2.devices.allow: c 195:0 rw",
        "lxc.cgroup2.devices.allow: c 999:* rwm",
        "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir",
        "lxc.Mount.entry: /dev/nvidia0 dev/nvidia0 none bind",
        "lxc.mount.entry: /dev/nvidia01 dev/nvidia01 none bind",
        "lxc.mount.entry : /dev/nvidia0 dev/nvidia0 none bind",
        "lxc.apparmor.profile: unconfined",
        "dev0x: /dev/nvidia0",
        "devx: /dev/nvidia0",
        "mp0: /mnt/x,mp=/x",
        "\u{fc}ber: \u{1f600}",
    ])
    .prop_map(|t| GenLine {
        text: t.to_string(),
        owned: false,
    });
    let other_dev = (
        0u32..20,
        prop::sample::select(vec![
            "/dev/dri/renderD128",
            "/dev/nvidia-caps/nvidia-cap1",
            "/dev/fuse",
        ]),
    )
        .prop_map(|(i, p)| GenLine {
            text: format!("dev{i}: {p},mode=0660"),
            owned: false,
        });
    prop_oneof![4 => fixed, 1 => other_dev]
}

fn gpu_path() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..8).prop_map(|n| format!("/dev/nvidia{n}")),
        prop::sample::select(ControlDevice::ALL.to_vec()).prop_map(|c| c.path().to_string()),
    ]
}

fn owned_line() -> impl Strategy<Value = GenLine> {
    let sep = prop::sample::select(vec![": ", ":", " = ", "=", ":   "]);
    let entry = (
        gpu_path(),
        sep.clone(),
        prop::sample::select(vec!["create=file", "create=dir 0 0"]),
    )
        .prop_map(|(p, s, o)| GenLine {
            text: format!("lxc.mount.entry{s}{p} {} none bind,optional,{o}", &p[1..]),
            owned: true,
        });
    let allow = (prop::sample::select(vec![NVIDIA_MAJOR, UVM]), sep).prop_map(|(m, s)| GenLine {
        text: format!("lxc.cgroup2.devices.allow{s}c {m}:* rwm"),
        owned: true,
    });
    let devn = (
        0u32..20,
        gpu_path(),
        any::<bool>(),
        prop::sample::select(vec![
            "",
            ",mode=0666",
            ",gid=44,mode=0660",
            ",uid=0,deny-write=1",
        ]),
    )
        .prop_map(|(i, p, explicit, o)| GenLine {
            text: format!("dev{i}: {}{p}{o}", if explicit { "path=" } else { "" }),
            owned: true,
        });
    prop_oneof![entry, allow, devn]
}

fn gen_file() -> impl Strategy<Value = (Vec<GenLine>, bool, bool)> {
    let main = prop::collection::vec(prop_oneof![foreign_line(), owned_line()], 0..25);
    let section = (
        prop::sample::select(vec!["[pve:pending]", "[snap1]", "[before-upgrade]"]),
        prop::collection::vec(prop_oneof![foreign_line(), owned_line()], 0..8),
    )
        .prop_map(|(h, body)| {
            let mut v = vec![GenLine {
                text: h.to_string(),
                owned: false,
            }];
            // Everything outside the main section is foreign.
            v.extend(body.into_iter().map(|l| GenLine {
                text: l.text,
                owned: false,
            }));
            v
        });
    (
        main,
        prop::collection::vec(section, 0..3),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(mut main, sections, crlf, final_nl)| {
            for s in sections {
                main.extend(s);
            }
            (main, crlf, final_nl)
        })
}

fn join(lines: &[GenLine], crlf: bool, final_nl: bool) -> String {
    let eol = if crlf { "\r\n" } else { "\n" };
    let mut s = lines
        .iter()
        .map(|l| l.text.as_str())
        .collect::<Vec<_>>()
        .join(eol);
    // An empty last line only exists if it is terminated.
    let last_empty = lines.last().is_some_and(|l| l.text.is_empty());
    if (final_nl || last_empty) && !lines.is_empty() {
        s.push_str(eol);
    }
    s
}

/// Words of a container config, for fuzz input that reaches the GPU-line branches.
const LXC_WORDS: &[&str] = &[
    "lxc.mount.entry",
    "lxc.cgroup2.devices.allow",
    "lxc.cgroup.devices.allow",
    ":",
    "=",
    " ",
    "\t",
    "/dev/nvidia0",
    "/dev/nvidia12",
    "/dev/nvidia01",
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-caps",
    " dev/nvidia0 none bind,optional,create=file",
    "c 195:* rwm",
    "c 509:* rwm",
    "dev0",
    "dev7",
    "dev255",
    "dev256",
    "path=",
    ",mode=0666",
    "[snap1]",
    "[pve:pending]",
    "delete: dev0",
    "#",
    "\n",
    "\r\n",
    "\r",
    "arch: amd64",
    "é",
];

proptest! {
    #![proptest_config(crate::testutil::fuzz_config(2048))]

    #[test]
    fn prop_round_trip_any_string(s in "(?s).{0,200}") {
        prop_assert_eq!(LxcConfig::parse(&s).render(), s);
    }

    /// Any text, also text made of the file's own words: it renders back byte for byte, an edit
    /// never panics, and an edit of the edited file changes nothing (no rewrite at every pass).
    #[test]
    fn prop_any_text_edits_without_panic_and_settles(
        s in prop_oneof!["(?s).{0,200}", crate::testutil::noisy(LXC_WORDS)],
        minors in prop::collection::btree_set(0u32..8, 0..4),
        devn_default in any::<bool>(),
    ) {
        prop_assert_eq!(LxcConfig::parse(&s).render(), s.clone());
        let style = if devn_default { MountStyle::DevN } else { MountStyle::MountEntry };
        let d = desired(&minors.iter().copied().collect::<Vec<_>>(), UVM, style);
        let mut c = LxcConfig::parse(&s);
        c.gpu_mounts();
        c.set_gpu_mounts(&d);
        let out = c.render();
        prop_assert_eq!(LxcConfig::parse(&out).render(), out.clone());
        let (again, changed) = set(&out, &d);
        prop_assert!(!changed, "second edit changed {:?} into {:?}", out, again);
    }

    #[test]
    fn prop_set_gpu_mounts(
        (gen, crlf, final_nl) in gen_file(),
        minors in prop::collection::btree_set(0u32..8, 0..5),
        devn_default in any::<bool>(),
    ) {
        let text = join(&gen, crlf, final_nl);
        prop_assert_eq!(LxcConfig::parse(&text).render(), text.clone());
        let default_style = if devn_default { MountStyle::DevN } else { MountStyle::MountEntry };
        let d = DesiredGpuMounts { minors: minors.clone(), uvm_major: UVM, default_style };
        let mut c = LxcConfig::parse(&text);
        let before = c.gpu_mounts();
        c.set_gpu_mounts(&d);
        let out = c.render();

        // Foreign lines are an identical subsequence, and nothing else but owned lines was added.
        let foreign: Vec<&str> = gen.iter().filter(|l| !l.owned).map(|l| l.text.as_str()).collect();
        prop_assert_eq!(foreign_lines(&out, UVM), foreign.clone());
        prop_assert!(is_subsequence(&foreign, &lines(&out)));
        if crlf && text.contains('\n') {
            prop_assert!(!out.replace("\r\n", "").contains('\n'));
        }

        let g = c.gpu_mounts();
        prop_assert_eq!(&g.minors, &minors);
        if minors.is_empty() {
            prop_assert!(g.control.is_empty());
            prop_assert_eq!(g.style, None);
            prop_assert!(!g.cgroup_allow_majors.contains(&NVIDIA_MAJOR));
            prop_assert!(!g.cgroup_allow_majors.contains(&UVM));
        } else {
            let style = before.style.unwrap_or(default_style);
            prop_assert_eq!(g.style, Some(style));
            let mut want = devn_controls();
            if style == MountStyle::MountEntry {
                want.insert(ControlDevice::Caps);
                prop_assert!(g.cgroup_allow_majors.contains(&NVIDIA_MAJOR));
                prop_assert!(g.cgroup_allow_majors.contains(&UVM));
            } else {
                prop_assert!(!g.cgroup_allow_majors.contains(&NVIDIA_MAJOR));
                prop_assert!(!g.cgroup_allow_majors.contains(&UVM));
            }
            prop_assert_eq!(&g.control, &want);
        }

        // Idempotent.
        let mut again = c.clone();
        prop_assert!(!again.set_gpu_mounts(&d));
        prop_assert_eq!(again.render(), out);
    }
}

/// PVE's `unprivileged` is a boolean defaulting to 0: only a true value in the main section
/// makes the container unprivileged; a snapshot's or a pending value does not.
#[test]
fn unprivileged_is_read_from_the_main_section_with_pves_default() {
    let u = |t: &str| LxcConfig::parse(t).unprivileged();
    assert!(!u("arch: amd64\nhostname: a\n"), "absent: privileged");
    assert!(!u("unprivileged: 0\n"));
    assert!(u("unprivileged: 1\n"));
    assert!(u("unprivileged:   Yes  \n"));
    assert!(!u("arch: amd64\n[pve:pending]\nunprivileged: 1\n"));
    assert!(!u("unprivileged: 0\n[snap1]\nunprivileged: 1\n"));
    assert!(!u("#unprivileged: 1\n"));
}
