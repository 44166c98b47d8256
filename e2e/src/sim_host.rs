//! The simulated host file (`--host sim-rw:FILE`, e.g. `examples/hosts/kpro6.yaml`): reading it,
//! editing it behind the agent's back (drift), and looking up devices, containers and units.

use serde_yaml::Value as Yaml;
use std::path::Path;

/// The host file, parsed; panics with the path when it cannot be read or parsed.
pub fn read_host(path: &Path) -> Yaml {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read host file {}: {e}", path.display()));
    serde_yaml::from_str(&text)
        .unwrap_or_else(|e| panic!("parse host file {}: {e}", path.display()))
}

/// Edits the host file behind the agent's back: read, change, write a temp file, rename over it.
pub fn edit_host(path: &Path, f: impl FnOnce(&mut Yaml)) {
    let mut v = read_host(path);
    f(&mut v);
    let tmp = path.with_extension("yaml.edit");
    std::fs::write(&tmp, serde_yaml::to_string(&v).unwrap()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// `key` of a YAML mapping key as a string (YAML `129:` vs `"129":`); None for other key types.
fn key_str(k: &Yaml) -> Option<String> {
    match k {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A mapping entry whose key is `key` as a string or as a number (YAML `129:` vs `"129":`).
pub fn entry<'a>(v: &'a Yaml, key: &str) -> Option<&'a Yaml> {
    v.as_mapping()?
        .iter()
        .find_map(|(k, val)| (key_str(k)? == key).then_some(val))
}

/// [`entry`], mutable.
pub fn entry_mut<'a>(v: &'a mut Yaml, key: &str) -> Option<&'a mut Yaml> {
    v.as_mapping_mut()?
        .iter_mut()
        .find_map(|(k, val)| (key_str(k)? == key).then_some(val))
}

/// The `pciDevices` entry with `address`; panics when there is none.
pub fn pci_device<'a>(host: &'a Yaml, address: &str) -> &'a Yaml {
    host["pciDevices"]
        .as_sequence()
        .expect("pciDevices")
        .iter()
        .find(|d| d["address"].as_str() == Some(address))
        .unwrap_or_else(|| panic!("no PCI device {address} in the host file"))
}

/// The driver a device is bound to ("none" when unbound).
pub fn driver(host: &Yaml, address: &str) -> String {
    pci_device(host, address)["driver"]
        .as_str()
        .unwrap_or("none")
        .to_string()
}

/// Rebinds a device in the host file (drift: nothing else changes).
pub fn set_driver(host: &mut Yaml, address: &str, drv: &str) {
    let dev = host["pciDevices"]
        .as_sequence_mut()
        .expect("pciDevices")
        .iter_mut()
        .find(|d| d["address"].as_str() == Some(address))
        .expect("device");
    dev["driver"] = Yaml::String(drv.into());
}

/// The LXC config of container `vmid`; panics when there is none.
pub fn container_config(host: &Yaml, vmid: &str) -> String {
    entry(&host["containers"], vmid)
        .and_then(|c| c["config"].as_str())
        .unwrap_or_else(|| panic!("no containers.{vmid}.config in the host file"))
        .to_string()
}

/// The file of unit `key` (`CONTAINER/NAME.service`), "" when there is no such unit.
pub fn unit_file_of(host: &Yaml, key: &str) -> String {
    entry(&host["units"], key)
        .and_then(|u| u["file"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Gives container 129 of the simulated host `path` the static address `ip` (its config's
/// `ip=dhcp` becomes `ip=IP/24`): where the agent reaches a server in it that listens on a
/// wildcard.
pub fn set_container_ip(path: &Path, ip: &impl std::fmt::Display) {
    edit_host(path, |h| {
        let ct = entry_mut(&mut h["containers"], "129").expect("container 129");
        let text = ct["config"]
            .as_str()
            .unwrap_or("")
            .replace("ip=dhcp", &format!("ip={ip}/24"));
        ct["config"] = Yaml::from(text);
    });
}
