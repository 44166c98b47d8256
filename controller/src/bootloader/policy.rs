//! Which kernel arguments the agent may write (issue 37): an **allow-list** of the keys this
//! project exists to manage, each with the values that serve that purpose; other keys only where
//! the partition's admin lists them in `spec.host.kernelArgs.allowKeys`; and keys that no opt-in
//! opens. Pure and host-independent: the webhook, the CLI and the agent decide alike.
//!
//! # The managed keys ([`MANAGED`]) and why each is there
//! The project passes GPUs through to VMs (vfio-pci), confidential ones included (AMD SEV-SNP),
//! and keeps the rest on `nvidia`. What the kernel command line has to do with that:
//! - the IOMMU, which passthrough needs: `iommu` (`pt`, `nopt`, `force`), `intel_iommu` (`on`,
//!   `igfx_off`, `sm_on`, `sm_off`), `amd_iommu` (`on`, `force_enable`, `force_isolation`,
//!   `pgtbl_v1`, `pgtbl_v2`), `iommu.passthrough` and `iommu.strict` (0/1);
//! - vfio-pci: `vfio-pci.ids` (NVIDIA's ids only, vendor `10de`: an id of the host's disk or
//!   network controller would take it from the host at boot), `vfio-pci.disable_vga`,
//!   `vfio-pci.disable_idle_d3` (0/1); `rd.driver.pre` (only `vfio`, `vfio_pci`,
//!   `vfio_iommu_type1`: vfio-pci loaded early, before another driver claims the GPUs);
//! - large-BAR GPUs: `pci` (only `realloc`, `realloc=on`, `realloc=off`);
//! - confidential VMs: `kvm_amd.sev`, `kvm_amd.sev_es`, `kvm_amd.sev_snp` (only on: `1`, `y`,
//!   `Y`), `mem_encrypt` (only `on`);
//! - keeping other drivers off the GPUs: `nouveau.modeset=0`, `modprobe.blacklist` and
//!   `rd.driver.blacklist` (only `nouveau`, `nvidiafb`: not `nvidia`, which the partition's
//!   `nvidia` slices use), `video` (only `efifb:off`, `vesafb:off`, `simplefb:off`) and
//!   `initcall_blacklist=sysfb_init` (a boot GPU's framebuffer let go, so it can be passed
//!   through).
//!
//! Left out on purpose (an admin may list them in `allowKeys`): `pcie_acs_override` (makes the
//! kernel pretend devices are isolated when the hardware does not isolate them: a VM could reach
//! its neighbours' memory by peer-to-peer DMA), `vfio_iommu_type1.allow_unsafe_interrupts` (the
//! same for interrupts), `module_blacklist` (any module, `vfio_pci` or the disk's driver
//! included), `nvidia.*` module options (the host's own driver, not passthrough), and the values
//! that switch a prerequisite off (`iommu=off`, `amd_iommu=off`, `kvm_amd.sev_snp=0`,
//! `mem_encrypt=off`, ...).
//!
//! # Never ([`never`]), not even with `allowKeys`
//! What chooses what the host boots (`root`, `init`, `rdinit`, `nfsroot`, `resume`, the runlevel
//! words `2`–`5`), what opens a shell (`single`, `s`, `S`, `1`, `emergency`, `rescue`, `b`,
//! every `rd.*` option but the two managed ones: `rd.break`, `rd.shell`, ...), everything of
//! systemd's (`systemd.*`: units, programs, environment, masks, credentials, debug shells), what
//! the kernel hands init as its environment (a `NAME=value` it does not know: any key without a
//! dot holding a capital letter, `LD_PRELOAD` and the like), the kernel debugger (`kgdb*`,
//! `sysrq_always_enabled`) and the kernel's own protections (`security`, `lsm`, `selinux`,
//! `enforcing`, `apparmor`, `lockdown`, `module.sig_enforce`, `ima_appraise`, `ima_policy`).
//!
//! Keys are compared as the kernel and systemd compare them: `-` and `_` are the same
//! (`vfio-pci.ids` is `vfio_pci.ids`, `systemd.debug-shell` is `systemd.debug_shell`).

use crate::text::sanitize;

/// Which list of `spec.host.kernelArgs` a word is in: `present` words must be managed with a
/// managed value; `absent` words (removed, never added) need only a managed key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Present,
    Absent,
}

/// The values a managed key takes from the agent.
#[derive(Debug, Clone, Copy)]
pub enum Values {
    /// One of these.
    OneOf(&'static [&'static str]),
    /// A comma-separated list of these.
    ListOf(&'static [&'static str]),
    /// A comma-separated list of module names among these (`-` and `_` alike).
    Modules(&'static [&'static str]),
    /// A comma-separated list of PCI ids `vendor:device[:subvendor:subdevice...]` (hex) of these
    /// vendors.
    PciIds(&'static [&'static str]),
}

/// A key the agent manages by itself, the values it writes and why it is there.
#[derive(Debug, Clone, Copy)]
pub struct Managed {
    /// The key, with `_` for `-`.
    pub key: &'static str,
    pub values: Values,
    /// What the key is for, in a few words.
    pub why: &'static str,
}

const BOOL: &[&str] = &["0", "1", "n", "y", "N", "Y"];
const ON: &[&str] = &["1", "y", "Y"];

/// The keys this project exists to manage (see the module's documentation for why each).
pub const MANAGED: &[Managed] = &[
    Managed {
        key: "iommu",
        values: Values::OneOf(&["pt", "nopt", "force"]),
        why: "the x86 IOMMU's mode",
    },
    Managed {
        key: "intel_iommu",
        values: Values::ListOf(&["on", "igfx_off", "sm_on", "sm_off"]),
        why: "turns Intel's IOMMU on, which passthrough needs",
    },
    Managed {
        key: "amd_iommu",
        values: Values::ListOf(&[
            "on",
            "force_enable",
            "force_isolation",
            "pgtbl_v1",
            "pgtbl_v2",
        ]),
        why: "AMD's IOMMU, which passthrough needs",
    },
    Managed {
        key: "iommu.passthrough",
        values: Values::OneOf(BOOL),
        why: "the IOMMU's default domain",
    },
    Managed {
        key: "iommu.strict",
        values: Values::OneOf(BOOL),
        why: "the IOMMU's TLB invalidation",
    },
    Managed {
        key: "vfio_pci.ids",
        values: Values::PciIds(&["10de"]),
        why: "the NVIDIA devices vfio-pci claims at boot",
    },
    Managed {
        key: "vfio_pci.disable_vga",
        values: Values::OneOf(BOOL),
        why: "vfio-pci's VGA access",
    },
    Managed {
        key: "vfio_pci.disable_idle_d3",
        values: Values::OneOf(BOOL),
        why: "keeps vfio-pci's idle GPUs out of D3cold",
    },
    Managed {
        key: "rd.driver.pre",
        values: Values::Modules(&["vfio", "vfio_pci", "vfio_iommu_type1"]),
        why: "loads vfio-pci early, before another driver claims the GPUs",
    },
    Managed {
        key: "pci",
        values: Values::ListOf(&["realloc", "realloc=on", "realloc=off"]),
        why: "room for large-BAR GPUs",
    },
    Managed {
        key: "kvm_amd.sev",
        values: Values::OneOf(ON),
        why: "AMD SEV in KVM, for confidential VMs",
    },
    Managed {
        key: "kvm_amd.sev_es",
        values: Values::OneOf(ON),
        why: "AMD SEV-ES in KVM, for confidential VMs",
    },
    Managed {
        key: "kvm_amd.sev_snp",
        values: Values::OneOf(ON),
        why: "AMD SEV-SNP in KVM, for confidential VMs",
    },
    Managed {
        key: "mem_encrypt",
        values: Values::OneOf(&["on"]),
        why: "memory encryption, which SEV builds on",
    },
    Managed {
        key: "nouveau.modeset",
        values: Values::OneOf(&["0"]),
        why: "keeps nouveau off the GPUs",
    },
    Managed {
        key: "modprobe.blacklist",
        values: Values::Modules(&["nouveau", "nvidiafb"]),
        why: "keeps other drivers off the GPUs (not nvidia: the nvidia slices use it)",
    },
    Managed {
        key: "rd.driver.blacklist",
        values: Values::Modules(&["nouveau", "nvidiafb"]),
        why: "keeps other drivers off the GPUs (not nvidia: the nvidia slices use it)",
    },
    Managed {
        key: "video",
        values: Values::ListOf(&["efifb:off", "vesafb:off", "simplefb:off"]),
        why: "lets a boot GPU's framebuffer go, so it can be passed through",
    },
    Managed {
        key: "initcall_blacklist",
        values: Values::OneOf(&["sysfb_init"]),
        why: "lets a boot GPU's framebuffer go, so it can be passed through",
    },
];

const BOOTS: &str = "chooses what the host boots into";
const SHELL: &str = "boots into a rescue or emergency shell";
const DEBUG: &str = "opens the kernel's debugger or magic keys to whoever has the console";
const GUARD: &str = "switches off or replaces one of the kernel's own protections";

/// Keys no opt-in opens, with what they do (see also [`never`]'s prefixes).
const NEVER: &[(&str, &str)] = &[
    ("root", BOOTS),
    ("rootflags", BOOTS),
    ("rootfstype", BOOTS),
    ("nfsroot", BOOTS),
    ("init", BOOTS),
    ("rdinit", BOOTS),
    ("resume", BOOTS),
    ("resume_offset", BOOTS),
    ("2", BOOTS),
    ("3", BOOTS),
    ("4", BOOTS),
    ("5", BOOTS),
    ("single", SHELL),
    ("s", SHELL),
    ("S", SHELL),
    ("1", SHELL),
    ("emergency", SHELL),
    ("rescue", SHELL),
    ("b", SHELL),
    ("kgdboc", DEBUG),
    ("kgdbwait", DEBUG),
    ("kgdbdbgp", DEBUG),
    ("ekgdboc", DEBUG),
    ("sysrq_always_enabled", DEBUG),
    ("security", GUARD),
    ("lsm", GUARD),
    ("selinux", GUARD),
    ("enforcing", GUARD),
    ("apparmor", GUARD),
    ("lockdown", GUARD),
    ("module.sig_enforce", GUARD),
    ("ima_appraise", GUARD),
    ("ima_policy", GUARD),
];

/// `key` as the kernel and systemd compare it: `-` and `_` alike.
pub fn normalize(key: &str) -> String {
    key.replace('-', "_")
}

/// The key of argument `a` (before the first `=`) and its value (after it; `None` without `=`).
pub fn split(a: &str) -> (&str, Option<&str>) {
    match a.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (a, None),
    }
}

/// The managed key `key` (any spelling), if it is one.
pub fn managed(key: &str) -> Option<&'static Managed> {
    let k = normalize(key);
    MANAGED.iter().find(|m| m.key == k)
}

/// Why the agent never writes an argument with key `key`, even when an admin lists it; `None`
/// when it may (with an opt-in).
pub fn never(key: &str) -> Option<String> {
    let k = normalize(key);
    if let Some((_, why)) = NEVER.iter().find(|(n, _)| *n == k) {
        return Some(format!("{key} {why}"));
    }
    if k.starts_with("systemd.") {
        return Some(format!("{key} is one of systemd's options, which choose the units that start or are masked, run programs, set init's environment, hand out credentials or open a debug shell"));
    }
    if k.starts_with("rd.") && managed(&k).is_none() {
        return Some(format!("{key} is one of the initramfs's options (rd.break, rd.shell, rd.emergency open a root shell; rd.systemd.* are systemd's)"));
    }
    if !k.contains('.') && k.chars().any(|c| c.is_ascii_uppercase()) {
        return Some(format!("{key} looks like an environment variable: the kernel hands a NAME=value it does not know to init's environment (LD_PRELOAD=... would run code in PID 1)"));
    }
    None
}

/// Checks a key an admin lists in `allowKeys`: the shape of a key (1 to 64 of letters, digits
/// and `_ . -`, no `=`), and not one [`never`] refuses.
pub fn check_allow_key(key: &str) -> Result<(), String> {
    let shown = sanitize(key, 80);
    if key.is_empty() {
        return Err(
            "an empty key; list keys such as console (the part of an argument before '=')".into(),
        );
    }
    if key.len() > gpuplane_crds::KERNEL_ARG_KEY_MAX_LEN
        || key.starts_with(['.', '-'])
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        return Err(format!(
            "{shown:?} is not a kernel argument's key: list only the part before '=', at most {} letters, digits and _ . - (e.g. console for console=ttyS0)",
            gpuplane_crds::KERNEL_ARG_KEY_MAX_LEN
        ));
    }
    if let Some(why) = never(key) {
        return Err(format!(
            "{why}: the agent never writes it, not even with allowKeys; set it by hand if the host needs it"
        ));
    }
    Ok(())
}

/// Whether the agent may write argument `a` (already one word, [`super::check_word`]) on the
/// `side` it is listed, given the keys an admin listed in `allow_keys`.
pub fn check(a: &str, side: Side, allow_keys: &[String]) -> Result<(), String> {
    let shown = sanitize(a, 80);
    let (key, value) = split(a);
    if let Some(why) = never(key) {
        return Err(format!(
            "kernel argument {shown:?}: {why}; the agent never writes or removes it, not even with spec.host.kernelArgs.allowKeys"
        ));
    }
    let k = normalize(key);
    if allow_keys.iter().any(|x| normalize(x) == k) {
        return Ok(());
    }
    let key_shown = sanitize(key, 64);
    let Some(m) = managed(key) else {
        return Err(format!(
            "kernel argument {shown:?}: {key_shown} is not among the keys the agent manages (the IOMMU, VFIO passthrough, AMD SEV, keeping other drivers off the GPUs: docs/partition.md lists them); set it on the host by hand, or list {key_shown} in spec.host.kernelArgs.allowKeys to take responsibility for it"
        ));
    };
    if side == Side::Absent {
        return Ok(());
    }
    if value.is_some_and(|v| m.values.admits(v)) {
        return Ok(());
    }
    let got = match value {
        None => "no value".to_string(),
        Some(v) => format!("{:?}", sanitize(v, 64)),
    };
    Err(format!(
        "kernel argument {shown:?}: {key_shown} ({}) takes {} from the agent, e.g. {key_shown}={}, not {got}; another value needs {key_shown} in spec.host.kernelArgs.allowKeys (the admin takes responsibility for it)",
        m.why,
        m.values.describe(),
        m.values.example()
    ))
}

impl Values {
    /// Whether `v` is a value the agent writes.
    pub fn admits(&self, v: &str) -> bool {
        let items = || v.split(',');
        match self {
            Values::OneOf(set) => set.contains(&v),
            Values::ListOf(set) => items().all(|i| set.contains(&i)),
            Values::Modules(set) => items().all(|i| set.contains(&normalize(i).as_str())),
            Values::PciIds(vendors) => items().all(|i| {
                let parts: Vec<&str> = i.split(':').collect();
                (2..=6).contains(&parts.len())
                    && parts.iter().all(|p| {
                        (1..=8).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_hexdigit())
                    })
                    && vendors.contains(&parts[0].to_ascii_lowercase().as_str())
                    && parts[1].len() == 4
            }),
        }
    }

    /// "pt, nopt or force" for messages.
    pub fn describe(&self) -> String {
        let or = |set: &[&str]| match set {
            [] => String::new(),
            [one] => one.to_string(),
            [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
        };
        match self {
            Values::OneOf(set) => or(set),
            Values::ListOf(set) | Values::Modules(set) => {
                format!("a comma-separated list of {}", or(set))
            }
            Values::PciIds(vendors) => format!(
                "a comma-separated list of PCI ids vendor:device of vendor {}",
                or(vendors)
            ),
        }
    }

    /// A valid value, for messages.
    pub fn example(&self) -> String {
        match self {
            Values::OneOf(set) | Values::ListOf(set) | Values::Modules(set) => set
                .iter()
                .find(|v| **v != "0")
                .or(set.first())
                .unwrap_or(&"")
                .to_string(),
            Values::PciIds(vendors) => format!("{}:2335", vendors.first().unwrap_or(&"10de")),
        }
    }
}

/// What a slice of the partition needs that a kernel argument can switch off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needed {
    /// The IOMMU itself: every vfio-pci slice.
    Iommu,
    /// What an SEV-SNP VM needs beyond it: a translating IOMMU with the v1 page table, SEV in
    /// KVM, memory encryption, vfio-pci's idle GPUs kept out of D3cold.
    Confidential,
}

/// What argument `a`, listed on `side`, switches off and why, if it switches off something a
/// slice needs (`Needed`). Judged on the word alone.
pub fn switches_off(a: &str, side: Side) -> Option<(Needed, &'static str)> {
    let (key, value) = split(a);
    let k = normalize(key);
    let v = value.unwrap_or_default();
    let items = || v.split(',');
    let off = ["0", "n", "N", "off"];
    let on = ["1", "y", "Y", "on"];
    match side {
        Side::Present => match k.as_str() {
            "iommu" if v == "off" => Some((Needed::Iommu, "switches the IOMMU off")),
            "amd_iommu" | "intel_iommu" if items().any(|i| i == "off") => {
                Some((Needed::Iommu, "switches the IOMMU off"))
            }
            "iommu" if v == "pt" => Some((Needed::Confidential, "puts the IOMMU in passthrough mode, and Linux turns SEV-SNP off then (drivers/iommu/amd/init.c: \"SNP: IOMMU disabled or configured in passthrough mode, SNP cannot be supported\")")),
            "iommu.passthrough" if on.contains(&v) => Some((Needed::Confidential, "puts the IOMMU in passthrough mode, and Linux turns SEV-SNP off then (drivers/iommu/amd/init.c: \"SNP: IOMMU disabled or configured in passthrough mode, SNP cannot be supported\")")),
            "amd_iommu" if items().any(|i| i == "pgtbl_v2") => Some((Needed::Confidential, "selects the AMD IOMMU's v2 page table, and SEV-SNP needs v1 (\"SNP: IOMMU is configured with V2 page table mode, SNP cannot be supported\")")),
            "kvm_amd.sev" | "kvm_amd.sev_es" | "kvm_amd.sev_snp" if off.contains(&v) => Some((Needed::Confidential, "switches AMD SEV off in KVM, which an SEV-SNP VM runs on")),
            "mem_encrypt" if v == "off" => Some((Needed::Confidential, "switches memory encryption off, which SEV builds on")),
            "vfio_pci.disable_idle_d3" if off.contains(&v) => Some((Needed::Confidential, "lets vfio-pci put idle GPUs in D3cold, from which a GPU cannot change its confidential-computing state or be reset (NVIDIA's deployment guide)")),
            _ => None,
        },
        Side::Absent => match k.as_str() {
            // vfio-pci's default is to let idle GPUs go to D3cold.
            "vfio_pci.disable_idle_d3" if on.contains(&v) => Some((Needed::Confidential, "removes what keeps vfio-pci's idle GPUs out of D3cold (the default lets them go), from which a GPU cannot change its confidential-computing state or be reset (NVIDIA's deployment guide)")),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests;
