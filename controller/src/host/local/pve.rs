//! Proxmox: containers (`/etc/pve/lxc/*.conf` + `pct`), VMs (`/etc/pve/qemu-server/*.conf` +
//! `qm status`) and PCI mappings (`/etc/pve/mapping/pci.cfg`).

use super::error::LocalError;
use super::{LocalHost, Root};
use crate::host::model::{Container, RunState, Vm};
use crate::proxmox::lxc_conf::LxcConfig;
use crate::proxmox::pci_cfg::{MapEntry, PciCfg};
use std::collections::BTreeMap;

fn vmids(root: &Root, dir: &str) -> Vec<u32> {
    let mut v: Vec<u32> = root
        .list(dir)
        .into_iter()
        .filter_map(|f| f.strip_suffix(".conf").and_then(|n| n.parse().ok()))
        .collect();
    v.sort();
    v
}

/// `pct status` / `qm status` output as a state; the error is what the tool (or running it) said.
fn state_of(out: Result<super::exec::CmdOutput, LocalError>) -> Result<RunState, String> {
    let o = out.map_err(|e| e.to_string())?;
    if !o.ok() {
        return Err(o.stderr.trim().to_string());
    }
    Ok(if o.stdout.contains("status: running") {
        RunState::Running
    } else {
        RunState::Stopped
    })
}

/// Containers with their GPU lines and state.
pub fn containers(h: &LocalHost) -> Result<BTreeMap<u32, Container>, LocalError> {
    let mut out = BTreeMap::new();
    for vmid in vmids(&h.root, "/etc/pve/lxc") {
        let text = h
            .root
            .read(&format!("/etc/pve/lxc/{vmid}.conf"))
            .unwrap_or_default();
        let state = state_of(h.cmd(&[&h.tools.pct, "status", &vmid.to_string()]))
            .map_err(|e| LocalError::failed(format!("pct status {vmid}"), &e))?;
        let nvidia_userspace_version = if state == RunState::Running {
            userspace_version(h, vmid)
        } else {
            None
        };
        let config = LxcConfig::parse(&text);
        out.insert(
            vmid,
            Container {
                vmid,
                state,
                gpu_mounts: config.gpu_mounts(),
                nvidia_userspace_version,
                privileged: !config.unprivileged(),
            },
        );
    }
    Ok(out)
}

/// The NVIDIA userspace version inside a running container, from its `libnvidia-ml.so.<version>`.
fn userspace_version(h: &LocalHost, vmid: u32) -> Option<String> {
    let o = h
        .cmd(&[
            &h.tools.pct,
            "exec",
            &vmid.to_string(),
            "--",
            "ls",
            "/usr/lib/x86_64-linux-gnu",
        ])
        .ok()?;
    nvml_version(o.stdout.lines())
}

/// The version of the first `libnvidia-ml.so.<version>` among file names (a library directory's
/// listing). The names may be a tenant's text: a version is digits and dots only.
pub fn nvml_version<'a>(names: impl Iterator<Item = &'a str>) -> Option<String> {
    names
        .filter_map(|l| l.trim().strip_prefix("libnvidia-ml.so."))
        .find(|v| {
            v.matches('.').count() >= 1
                && v.len() <= 32
                && v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        })
        .map(str::to_string)
}

/// VMs and the mappings their `hostpciN` lines use.
pub fn vms(h: &LocalHost) -> Result<BTreeMap<u32, Vm>, LocalError> {
    let mut out = BTreeMap::new();
    for vmid in vmids(&h.root, "/etc/pve/qemu-server") {
        let text = h
            .root
            .read(&format!("/etc/pve/qemu-server/{vmid}.conf"))
            .unwrap_or_default();
        // Only the main section (before the first [snapshot] header) describes the VM now.
        let mappings = text
            .lines()
            .take_while(|l| !l.starts_with('['))
            .filter(|l| l.starts_with("hostpci"))
            .filter_map(|l| l.split_once(':').map(|(_, v)| v.trim()))
            .flat_map(|v| v.split(','))
            .filter_map(|kv| kv.strip_prefix("mapping="))
            .map(str::to_string)
            .collect();
        let state = state_of(h.cmd(&[&h.tools.qm, "status", &vmid.to_string()]))
            .unwrap_or(RunState::Stopped);
        out.insert(
            vmid,
            Vm {
                vmid,
                state,
                pci_mappings: mappings,
                amd_sev: amd_sev(&text),
            },
        );
    }
    Ok(out)
}

/// The `amd-sev:` type of a VM config's main section (`amd-sev: type=snp,allow-smt=1` or
/// `amd-sev: snp`, qemu-server's property string with `type` as its default key).
pub fn amd_sev(conf: &str) -> Option<String> {
    let v = conf
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| l.strip_prefix("amd-sev:"))?;
    v.trim()
        .split(',')
        .map(|kv| kv.trim())
        .find_map(|kv| match kv.split_once('=') {
            Some(("type", t)) => Some(t),
            Some(_) => None,
            None => Some(kv),
        })
        .filter(|t| ["std", "es", "snp"].contains(t))
        .map(str::to_string)
}

/// This node's map entries by mapping.
pub fn mappings(h: &LocalHost, node: &str) -> BTreeMap<String, Vec<MapEntry>> {
    let text = h.root.read("/etc/pve/mapping/pci.cfg").unwrap_or_default();
    PciCfg::parse(&text)
        .mappings()
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                v.into_iter().filter(|e| e.node == node).collect::<Vec<_>>(),
            )
        })
        .filter(|(_, v)| !v.is_empty())
        .collect()
}
