//! The simulated host's kernel command line and bootloader: `/proc/cmdline`, the config files
//! Proxmox documents (`/etc/kernel/cmdline`, `/etc/default/grub`) as raw text edited through
//! the same editor the real backend uses, the refresh command (it copies the config into the
//! "boot entries"), and [`SimBoot::reboot`], which boots the entries as a bootloader would.

use super::{fail, SimHost};
use crate::bootloader::{self, Bootloader};
use crate::host::model::{BootConfig, BootFacts, KernelArgsRecord};
use crate::host::HostError;
use crate::step::Step;
use serde::{Deserialize, Serialize};

/// The boot side of the simulated host.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimBoot {
    /// `/proc/cmdline` of the running kernel.
    pub cmdline: String,
    /// `/proc/sys/kernel/random/boot_id`.
    #[serde(default)]
    pub boot_id: String,
    /// `/etc/kernel/cmdline` (`None`: no such file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_cmdline: Option<String>,
    /// `/etc/default/grub` (`None`: no such file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grub: Option<String>,
    /// `/etc/default/grub.d/<name>` drop-ins by name (read after `grub`, in name order).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub grub_d: std::collections::BTreeMap<String, String>,
    /// The kernel arguments the boot entries hold (what the last refresh read); `None`: the
    /// entries were made before the description starts, with the running command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<String>>,
    /// The agent's record (`/var/lib/gpuplane/kernel-args.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<KernelArgsRecord>,
    /// Each refresh command run, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refreshes: Vec<String>,
    /// How many times the agent asked for a reboot (`systemctl reboot`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reboots_asked: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl SimBoot {
    /// The config file of `b`.
    fn file(&self, b: Bootloader) -> Option<&String> {
        match b {
            Bootloader::ProxmoxBootTool => self.kernel_cmdline.as_ref(),
            Bootloader::Grub => self.grub.as_ref(),
        }
    }

    /// The kernel arguments the config of `b` gives the next boot (GRUB's with its drop-ins; up
    /// to a lone `--`), and the drop-ins' own words.
    fn args(&self, b: Bootloader, text: &str) -> Result<bootloader::grub::WithDropIns, String> {
        let (words, added) = self.words(b, text)?;
        Ok((bootloader::kernel_part(words), added))
    }

    /// Every word of the command line the config of `b` gives the next boot, init's after a
    /// `--` included (what the boot entries carry), and the drop-ins' own words.
    fn words(&self, b: Bootloader, text: &str) -> Result<bootloader::grub::WithDropIns, String> {
        match b {
            Bootloader::Grub => {
                let d: Vec<(String, String)> = self
                    .grub_d
                    .iter()
                    .filter(|(n, _)| n.ends_with(".cfg"))
                    .map(|(n, t)| (format!("{}/{n}", bootloader::grub::DROP_IN_DIR), t.clone()))
                    .collect();
                bootloader::grub::words_with_drop_ins(text, &d)
            }
            _ => b.words(text).map(|a| (a, vec![])),
        }
    }

    fn file_mut(&mut self, b: Bootloader) -> Option<&mut String> {
        match b {
            Bootloader::ProxmoxBootTool => self.kernel_cmdline.as_mut(),
            Bootloader::Grub => self.grub.as_mut(),
        }
    }

    /// What observing shows.
    pub fn observed(&self) -> BootFacts {
        let config = Bootloader::ALL.into_iter().find_map(|b| {
            let text = self.file(b)?;
            let (args, drop_ins, problem) = match self.args(b, text) {
                Ok((a, d)) => (a, d, None),
                Err(e) => (vec![], vec![], Some(e)),
            };
            Some(BootConfig {
                bootloader: b,
                path: b.config_path().into(),
                args,
                drop_ins,
                sha256: crate::digest::sha256(text),
                problem,
            })
        });
        BootFacts {
            running: Some(bootloader::running_args(&self.cmdline)),
            boot_id: Some(self.boot_id.clone()).filter(|b| !b.is_empty()),
            config,
            record: self.record.clone(),
        }
    }

    /// A reboot: the kernel comes up with the boot entries' arguments (the ones the last
    /// refresh read), with a new boot id.
    pub fn reboot(&mut self) {
        if let Some(e) = &self.entries {
            self.cmdline = e.join(" ");
        }
        self.boot_id = format!("sim-boot-{}", self.refreshes.len() + self.cmdline.len());
        if self.boot_id
            == self
                .record
                .as_ref()
                .and_then(|r| r.boot_id.clone())
                .unwrap_or_default()
        {
            self.boot_id.push_str("-next");
        }
    }
}

impl SimHost {
    fn boot_mut(&mut self, step: &Step) -> Result<&mut SimBoot, HostError> {
        self.file
            .boot
            .as_mut()
            .ok_or_else(|| fail(step, "this simulated host describes no bootloader".into()))
    }

    /// `Step::SetKernelArgs`: the record, then the file (as the real backend orders them).
    pub(super) fn set_kernel_args(
        &mut self,
        step: &Step,
        b: Bootloader,
        present: &[String],
        absent: &[String],
    ) -> Result<(), HostError> {
        let boot = self.boot_mut(step)?;
        let text = boot
            .file(b)
            .ok_or_else(|| fail(step, format!("{} does not exist", b.config_path())))?;
        let new = b
            .edit(text, present, absent)
            .map_err(|e| fail(step, format!("{}: {e}", b.config_path())))?;
        let old = boot.record.take();
        boot.record = Some(KernelArgsRecord {
            path: b.config_path().into(),
            written: crate::digest::sha256(&new),
            refreshed: old.as_ref().and_then(|r| r.refreshed.clone()),
            boot_id: old.as_ref().and_then(|r| r.boot_id.clone()),
            reboot_from: old.and_then(|r| r.reboot_from),
        });
        if let Some(f) = boot.file_mut(b) {
            *f = new;
        }
        Ok(())
    }

    /// `Step::RefreshBootloader`: the entries take the config's arguments; the record says so.
    pub(super) fn refresh_bootloader(
        &mut self,
        step: &Step,
        b: Bootloader,
    ) -> Result<(), HostError> {
        let boot = self.boot_mut(step)?;
        let text = boot
            .file(b)
            .ok_or_else(|| fail(step, format!("{} does not exist", b.config_path())))?
            .clone();
        let args = boot.words(b, &text).map_err(|e| fail(step, e))?.0;
        let entries = match b {
            // proxmox-boot-tool's entries carry the file's words as they are.
            Bootloader::ProxmoxBootTool => args,
            // GRUB's default entry: its own BOOT_IMAGE and root, then the variables' words.
            Bootloader::Grub => {
                let keep: Vec<String> = bootloader::running_args(&boot.cmdline)
                    .into_iter()
                    .filter(|w| w.starts_with("BOOT_IMAGE=") || w.starts_with("root="))
                    .collect();
                keep.into_iter().chain(args).collect()
            }
        };
        boot.entries = Some(entries);
        boot.refreshes.push(b.refresh_command().join(" "));
        let old = boot.record.take().unwrap_or_default();
        boot.record = Some(KernelArgsRecord {
            path: b.config_path().into(),
            written: if old.path == b.config_path() {
                old.written
            } else {
                String::new()
            },
            refreshed: Some(crate::digest::sha256(&text)),
            boot_id: Some(boot.boot_id.clone()),
            reboot_from: old.reboot_from,
        });
        Ok(())
    }

    /// `Step::Reboot`: as the real backend, only from the boot the plan was made in; records
    /// the ask and counts it. The reboot itself is [`SimHost::reboot_host`], which a test calls
    /// (the agent ends with the boot: nothing after the ask runs in this one).
    pub(super) fn ask_reboot(&mut self, step: &Step, boot_id: &str) -> Result<(), HostError> {
        let boot = self.boot_mut(step)?;
        if boot.boot_id != boot_id {
            return Err(fail(
                step,
                format!(
                    "the reboot was planned in boot {boot_id}, this is boot {}: not rebooting",
                    boot.boot_id
                ),
            ));
        }
        boot.record.get_or_insert_with(Default::default).reboot_from = Some(boot_id.into());
        boot.reboots_asked += 1;
        Ok(())
    }

    /// The host reboots: the kernel comes up with the boot entries' arguments and a new boot
    /// id ([`SimBoot::reboot`]), every unit and container is stopped (the simulated host has no
    /// autostart: the agent starts what the spec wants). GPU bindings are kept, as early
    /// binding (`gpuplane-early-bind`) does at boot on a real host.
    pub fn reboot_host(&mut self) {
        if let Some(b) = self.file.boot.as_mut() {
            b.reboot();
        }
        for u in self.file.units.values_mut() {
            u.stop();
        }
        for c in self.file.containers.values_mut() {
            c.state = crate::host::model::RunState::Stopped;
            c.started_with = None;
        }
    }

    /// A boot without early binding: the NVIDIA module probes every GPU in address order, so
    /// each is on `nvidia` with its minor numbered by that order (a GPU gone or added moves the
    /// minors of the others). What the layout tests replay after changing the bus.
    pub fn boot_every_gpu_on_nvidia(&mut self) {
        let mut order: Vec<usize> = (0..self.file.pci_devices.len()).collect();
        order.sort_by_key(|i| self.file.pci_devices[*i].address.clone());
        for (minor, i) in order.into_iter().enumerate() {
            let d = &mut self.file.pci_devices[i];
            d.driver = Some("nvidia".into());
            d.driver_override = None;
            d.minor = Some(minor as u32);
        }
    }
}
