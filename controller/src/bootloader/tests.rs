use super::*;

fn v(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

const PVE_GRUB: &str = "# If you change this file, run 'update-grub' afterwards to update\n\
# /boot/grub/grub.cfg.\n\
# For full documentation of the options in this file, see:\n\
#   info -f grub -n 'Simple configuration'\n\
\n\
GRUB_DEFAULT=0\n\
GRUB_TIMEOUT=5\n\
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`\n\
GRUB_CMDLINE_LINUX_DEFAULT=\"quiet amd_iommu=on iommu=pt\"\n\
GRUB_CMDLINE_LINUX=\"\"\n\
\n\
# Uncomment to enable BadRAM filtering, modify to suit your needs\n\
#GRUB_BADRAM=\"0x01234567,0xfefefefe,0x89abcdef,0xefefefef\"\n";

#[test]
fn proxmox_boot_tool_edit_keeps_every_other_byte() {
    let text = "root=ZFS=rpool/ROOT/pve-1 boot=zfs  quiet\tiommu=pt amd_iommu=on\n";
    let out = Bootloader::ProxmoxBootTool
        .edit(text, &v(&["vfio-pci.disable_idle_d3=1"]), &v(&["iommu=pt"]))
        .unwrap();
    assert_eq!(
        out,
        "root=ZFS=rpool/ROOT/pve-1 boot=zfs  quiet amd_iommu=on vfio-pci.disable_idle_d3=1\n"
    );
    // Applying it again changes nothing.
    let again = Bootloader::ProxmoxBootTool
        .edit(&out, &v(&["vfio-pci.disable_idle_d3=1"]), &v(&["iommu=pt"]))
        .unwrap();
    assert_eq!(again, out);
}

#[test]
fn cmdline_crlf_duplicates_first_word_and_no_newline() {
    // CRLF kept; both copies of a duplicate removed; a word first on its line takes the blank
    // after it with it.
    let out = cmdline::edit(
        "iommu=pt root=/dev/sda1 iommu=pt\r\n",
        &v(&["a=1"]),
        &v(&["iommu=pt"]),
    )
    .unwrap();
    assert_eq!(out, "root=/dev/sda1 a=1\r\n");
    // No trailing newline: none added.
    assert_eq!(
        cmdline::edit("root=/dev/sda1", &v(&["a=1"]), &[]).unwrap(),
        "root=/dev/sda1 a=1"
    );
    // A present word already there twice is left alone.
    assert_eq!(
        cmdline::edit("a=1 a=1\n", &v(&["a=1"]), &[]).unwrap(),
        "a=1 a=1\n"
    );
    // A present word listed twice is added once.
    assert_eq!(cmdline::edit("q\n", &v(&["b", "b"]), &[]).unwrap(), "q b\n");
    // Words inside quotes are one word; only whole words match.
    let t = "root=/dev/sda1 dyndbg=\"file x.c +p\" iommu=ptx\n";
    assert_eq!(cmdline::edit(t, &[], &v(&["iommu=pt", "+p"])).unwrap(), t);
}

#[test]
fn cmdline_refuses_unterminated_quotes_and_empty_files() {
    assert!(cmdline::words("a \"b c").is_err());
    let e = Bootloader::ProxmoxBootTool
        .edit("\n", &v(&["a=1"]), &[])
        .unwrap_err();
    assert!(e.contains("no kernel arguments"), "{e}");
}

#[test]
fn grub_edit_of_proxmox_s_default_file() {
    let out = Bootloader::Grub
        .edit(
            PVE_GRUB,
            &v(&["vfio-pci.disable_idle_d3=1"]),
            &v(&["iommu=pt"]),
        )
        .unwrap();
    let want = PVE_GRUB.replace(
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet amd_iommu=on iommu=pt\"",
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet amd_iommu=on vfio-pci.disable_idle_d3=1\"",
    );
    assert_eq!(out, want);
    assert_eq!(
        Bootloader::Grub.args(&out).unwrap(),
        v(&["quiet", "amd_iommu=on", "vfio-pci.disable_idle_d3=1"])
    );
    assert_eq!(
        Bootloader::Grub
            .edit(&out, &v(&["vfio-pci.disable_idle_d3=1"]), &v(&["iommu=pt"]))
            .unwrap(),
        out
    );
}

#[test]
fn grub_quoting_forms() {
    let edit = |t: &str| grub::edit(t, &v(&["a=1"]), &v(&["iommu=pt"])).unwrap();
    // Single quotes stay single quotes.
    assert_eq!(
        edit("GRUB_CMDLINE_LINUX_DEFAULT='quiet iommu=pt'\n"),
        "GRUB_CMDLINE_LINUX_DEFAULT='quiet a=1'\n"
    );
    // Unquoted: rewritten double-quoted (a space needs quotes).
    assert_eq!(
        edit("GRUB_CMDLINE_LINUX_DEFAULT=quiet\n"),
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet a=1\"\n"
    );
    // Escapes kept meaning: the kernel's quoted word survives.
    assert_eq!(
        edit("GRUB_CMDLINE_LINUX_DEFAULT=\"quiet dyndbg=\\\"file x +p\\\" iommu=pt\"\n"),
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet dyndbg=\\\"file x +p\\\" a=1\"\n"
    );
    // export, leading blanks, a trailing comment and CRLF are kept.
    assert_eq!(
        edit("  export GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"  # mine\r\nX=1\r\n"),
        "  export GRUB_CMDLINE_LINUX_DEFAULT=\"quiet a=1\"  # mine\r\nX=1\r\n"
    );
    // The last assignment is the one the shell keeps, and the one edited.
    assert_eq!(
        edit("GRUB_CMDLINE_LINUX_DEFAULT=\"old\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n"),
        "GRUB_CMDLINE_LINUX_DEFAULT=\"old\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet a=1\"\n"
    );
    // A commented line is not an assignment.
    assert_eq!(
        edit("#GRUB_CMDLINE_LINUX_DEFAULT=\"x\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"\"\n"),
        "#GRUB_CMDLINE_LINUX_DEFAULT=\"x\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"a=1\"\n"
    );
    // No assignment: one line added at the end, in the file's line ending.
    assert_eq!(
        edit("GRUB_TIMEOUT=5"),
        "GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX_DEFAULT=\"a=1\"\n"
    );
    assert_eq!(
        edit("GRUB_TIMEOUT=5\r\n"),
        "GRUB_TIMEOUT=5\r\nGRUB_CMDLINE_LINUX_DEFAULT=\"a=1\"\r\n"
    );
    // An absent word in GRUB_CMDLINE_LINUX is removed there too; a present one there is enough.
    assert_eq!(
        grub::edit(
            "GRUB_CMDLINE_LINUX=\"iommu=pt a=1\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n",
            &v(&["a=1"]),
            &v(&["iommu=pt"])
        )
        .unwrap(),
        "GRUB_CMDLINE_LINUX=\"a=1\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n"
    );
    // A value spanning lines inside its quotes: a word first on its line goes, its indentation
    // stays; new words follow the last word.
    assert_eq!(
        edit("GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\n iommu=pt\"\nZ=1\n"),
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet a=1\n \"\nZ=1\n"
    );
}

#[test]
fn grub_refuses_what_it_cannot_read_with_certainty() {
    for (t, want) in [
        (
            "GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT iommu=pt\"\n",
            "expansion",
        ),
        ("GRUB_CMDLINE_LINUX_DEFAULT=`cat /x`\n", "expansion"),
        ("GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\n", "unterminated"),
        ("GRUB_CMDLINE_LINUX_DEFAULT='quiet\n", "unterminated"),
        (
            "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"; rm -rf /\n",
            "more follows",
        ),
        (
            "GRUB_CMDLINE_LINUX_DEFAULT=\"a \\\nb\"\n",
            "backslash-newline",
        ),
        ("GRUB_CMDLINE_LINUX_DEFAULT=a\\ b\n", "backslash"),
        (
            "GRUB_CMDLINE_LINUX_DEFAULT=\"a \\\"b\"\n",
            "unterminated double quote in the kernel",
        ),
    ] {
        let e = Bootloader::Grub.edit(t, &v(&["x=1"]), &[]).unwrap_err();
        assert!(e.contains(want), "{t:?}: {e}");
        assert!(Bootloader::Grub.args(t).is_err(), "{t:?}");
    }
    let big = "#".repeat(MAX_FILE_BYTES + 1);
    assert!(Bootloader::Grub.args(&big).is_err());
    assert!(Bootloader::ProxmoxBootTool.edit(&big, &[], &[]).is_err());
}

#[test]
fn hostile_input_never_panics() {
    let samples = [
        "",
        "\"",
        "'",
        "GRUB_CMDLINE_LINUX_DEFAULT=",
        "GRUB_CMDLINE_LINUX_DEFAULT=\"\u{1F600} é\"",
        "GRUB_CMDLINE_LINUX_DEFAULT=\"\\",
        "export",
        "export GRUB_CMDLINE_LINUX_DEFAULT",
        "\r",
        "\r\r\n",
        "GRUB_CMDLINE_LINUX_DEFAULT=\"x\"\r",
        "GRUB_CMDLINE_LINUX_DEFAULT=é\u{0}",
    ];
    for t in samples {
        for b in Bootloader::ALL {
            let _ = b.args(t);
            let _ = b.edit(t, &v(&["a=1"]), &v(&["x"]));
        }
        let _ = running_args(t);
    }
}

#[test]
fn arguments_are_checked_strictly() {
    for ok in [
        "iommu=pt",
        "vfio-pci.disable_idle_d3=1",
        "vfio-pci.ids=10de:2335,10de:22a3",
        "hugepagesz=1G",
        "quiet",
        "console=ttyS0,115200n8",
    ] {
        assert!(check_word(ok).is_ok(), "{ok}");
    }
    for (bad, want) in [
        ("", "empty"),
        ("a b", "whitespace"),
        ("a\nb", "whitespace"),
        ("a\"b", "'\"'"),
        ("a'b", "'\\''"),
        ("$(reboot)", "'$'"),
        ("a;b", "';'"),
        ("a`b", "'`'"),
        ("a\\b", "'\\\\'"),
        ("--", "'-'"),
        ("-x", "'-'"),
        ("init=/bin/sh", "boots into"),
        ("root=/dev/sdb1", "boots into"),
        ("rdinit=/x", "boots into"),
        ("systemd.run=/x", "systemd's options"),
    ] {
        let e = check_word(bad).unwrap_err();
        assert!(e.contains(want), "{bad:?}: {e}");
        // What the editors refuse, validation refuses.
        assert!(check_arg(bad, Side::Present, &[]).is_err(), "{bad:?}");
    }
    assert!(check_word(&"a".repeat(257))
        .unwrap_err()
        .contains("longer than 256"));
    // The editors refuse a word no opt-in opens, whoever asks.
    let e = Bootloader::ProxmoxBootTool
        .edit("root=/dev/sda1\n", &v(&["systemd.run=/bin/sh"]), &[])
        .unwrap_err();
    assert!(e.contains("never"), "{e}");
}

/// Issue 37: on the kernel's command line the words after a lone `--` go to init. The agent's
/// words go before it (the kernel reads them), init's words stay init's (never removed, never
/// counted as the kernel's), every other byte is kept.
#[test]
fn words_the_agent_adds_go_before_the_double_dash() {
    let d3 = v(&["vfio-pci.disable_idle_d3=1"]);
    let text = "root=ZFS=rpool/ROOT/pve-1 boot=zfs  iommu=pt -- --log-level=debug iommu=pt\n";
    let out = Bootloader::ProxmoxBootTool
        .edit(text, &d3, &v(&["iommu=pt"]))
        .unwrap();
    assert_eq!(
        out,
        "root=ZFS=rpool/ROOT/pve-1 boot=zfs vfio-pci.disable_idle_d3=1 -- --log-level=debug iommu=pt\n"
    );
    assert_eq!(
        Bootloader::ProxmoxBootTool.args(&out).unwrap(),
        v(&[
            "root=ZFS=rpool/ROOT/pve-1",
            "boot=zfs",
            "vfio-pci.disable_idle_d3=1"
        ])
    );
    // Applying it again changes nothing.
    assert_eq!(
        Bootloader::ProxmoxBootTool
            .edit(&out, &d3, &v(&["iommu=pt"]))
            .unwrap(),
        out
    );
    // A word init has is not the kernel's: it is added before the `--`.
    assert_eq!(
        cmdline::edit("root=/dev/sda1 -- vfio-pci.disable_idle_d3=1\n", &d3, &[]).unwrap(),
        "root=/dev/sda1 vfio-pci.disable_idle_d3=1 -- vfio-pci.disable_idle_d3=1\n"
    );
    // Nothing before the `--`: the words go first. A quoted "--" ends the arguments too.
    assert_eq!(
        cmdline::edit("-- x\n", &d3, &[]).unwrap(),
        "vfio-pci.disable_idle_d3=1 -- x\n"
    );
    assert_eq!(
        cmdline::edit("root=/dev/sda1 \"--\" x", &d3, &[]).unwrap(),
        "root=/dev/sda1 vfio-pci.disable_idle_d3=1 \"--\" x"
    );
}

/// GRUB: `grub-mkconfig` writes `GRUB_CMDLINE_LINUX` then `GRUB_CMDLINE_LINUX_DEFAULT`. A `--` in
/// the second has the words go before it; a `--` in the first gives every word of the second
/// to init, so the words go into the first, before its `--`.
#[test]
fn grub_words_go_before_the_double_dash() {
    let d3 = v(&["vfio-pci.disable_idle_d3=1"]);
    let out = Bootloader::Grub
        .edit(
            "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet iommu=pt -- splash\"\nGRUB_CMDLINE_LINUX=\"\"\n",
            &d3,
            &v(&["iommu=pt"]),
        )
        .unwrap();
    assert_eq!(
        out,
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet vfio-pci.disable_idle_d3=1 -- splash\"\nGRUB_CMDLINE_LINUX=\"\"\n"
    );
    let text = "GRUB_CMDLINE_LINUX=\"iommu=pt -- single\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet iommu=pt\"\n";
    assert_eq!(Bootloader::Grub.args(text).unwrap(), v(&["iommu=pt"]));
    let out = Bootloader::Grub.edit(text, &d3, &v(&["iommu=pt"])).unwrap();
    assert_eq!(
        out,
        "GRUB_CMDLINE_LINUX=\"vfio-pci.disable_idle_d3=1 -- single\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet iommu=pt\"\n"
    );
    assert_eq!(
        Bootloader::Grub.args(&out).unwrap(),
        v(&["vfio-pci.disable_idle_d3=1"])
    );
    assert_eq!(
        Bootloader::Grub.edit(&out, &d3, &v(&["iommu=pt"])).unwrap(),
        out
    );
    // No GRUB_CMDLINE_LINUX_DEFAULT at all: still into GRUB_CMDLINE_LINUX, no new line.
    assert_eq!(
        Bootloader::Grub
            .edit("GRUB_CMDLINE_LINUX=\"-- x\"\n", &d3, &[])
            .unwrap(),
        "GRUB_CMDLINE_LINUX=\"vfio-pci.disable_idle_d3=1 -- x\"\n"
    );
    // A drop-in that puts a `--` in is refused by name (where the words land is not certain).
    let e = grub::args_with_drop_ins(
        "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n",
        &[(
            "/etc/default/grub.d/x.cfg".into(),
            "GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX -- x\"\n".into(),
        )],
    )
    .unwrap_err();
    assert!(
        e.contains("/etc/default/grub.d/x.cfg") && e.contains("\"--\""),
        "{e}"
    );
}

#[test]
fn proc_cmdline_stops_at_the_double_dash() {
    // The H200 machine's /proc/cmdline (testdata/h200): init's own arguments follow "--".
    let t = "console=ttyS0 quiet rdinit=/process_api pci=realloc=off -- --firecracker-init --addr 0.0.0.0:2024\n";
    assert_eq!(
        running_args(t),
        v(&[
            "console=ttyS0",
            "quiet",
            "rdinit=/process_api",
            "pci=realloc=off"
        ])
    );
    assert_eq!(running_args("a \"b c"), v(&["a", "\"b c\""]));
    let (missing, unwanted) = difference(
        &running_args("quiet iommu=pt"),
        &v(&["vfio-pci.disable_idle_d3=1", "quiet"]),
        &v(&["iommu=pt", "x"]),
    );
    assert_eq!(
        (missing, unwanted),
        (v(&["vfio-pci.disable_idle_d3=1"]), v(&["iommu=pt"]))
    );
}

/// GRUB's drop-ins (`/etc/default/grub.d/*.cfg`): Proxmox's ZFS install appends to
/// `GRUB_CMDLINE_LINUX`; both spellings of the self-reference count; a drop-in that sets a
/// variable anew, glues the reference into a word or expands anything else is refused by name.
#[test]
fn grub_drop_ins_add_words_and_one_that_replaces_is_refused() {
    let main = "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\nGRUB_CMDLINE_LINUX=\"\"\n";
    let zfs = (
        "/etc/default/grub.d/zfs.cfg".to_string(),
        "GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX root=ZFS=rpool/ROOT/pve-1 boot=zfs\"\n"
            .to_string(),
    );
    let iommu = (
        "/etc/default/grub.d/iommu.cfg".to_string(),
        "GRUB_DISTRIBUTOR=\"Proxmox VE\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} iommu=pt\"\n"
            .to_string(),
    );
    let (args, added) = grub::args_with_drop_ins(main, &[iommu.clone(), zfs.clone()]).unwrap();
    assert_eq!(
        args,
        v(&["root=ZFS=rpool/ROOT/pve-1", "boot=zfs", "quiet", "iommu=pt"])
    );
    assert_eq!(
        added,
        [
            (iommu.0.clone(), v(&["iommu=pt"])),
            (zfs.0.clone(), v(&["root=ZFS=rpool/ROOT/pve-1", "boot=zfs"]))
        ]
    );
    // A drop-in that does not touch the variables changes nothing.
    let other = (
        "/etc/default/grub.d/a.cfg".to_string(),
        "GRUB_TIMEOUT=3\n".to_string(),
    );
    assert_eq!(
        grub::args_with_drop_ins(main, &[other]).unwrap(),
        (v(&["quiet"]), vec![])
    );

    let refused = |text: &str| {
        grub::args_with_drop_ins(main, &[("/etc/default/grub.d/x.cfg".into(), text.into())])
            .unwrap_err()
    };
    let e = refused("GRUB_CMDLINE_LINUX_DEFAULT=\"quiet splash\"\n");
    assert!(
        e.contains("/etc/default/grub.d/x.cfg sets GRUB_CMDLINE_LINUX_DEFAULT anew"),
        "{e}"
    );
    let e = refused("GRUB_CMDLINE_LINUX=\"x$GRUB_CMDLINE_LINUX\"\n");
    assert!(e.contains("a variable inside a word"), "{e}");
    let e = refused("GRUB_CMDLINE_LINUX=\"$OTHER $GRUB_CMDLINE_LINUX\"\n");
    assert!(e.contains("/etc/default/grub.d/x.cfg line 1"), "{e}");
    // $GRUB_CMDLINE_LINUX_DEFAULT is not $GRUB_CMDLINE_LINUX followed by text.
    let (args, _) = grub::args_with_drop_ins(
        main,
        &[(
            "/etc/default/grub.d/y.cfg".into(),
            "GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT a=1\"\n".into(),
        )],
    )
    .unwrap();
    assert_eq!(args, v(&["quiet", "a=1"]));
}
