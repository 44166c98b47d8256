//! What a command works on: the host backend (`--host`) and the validated manifests (`-f`).

use super::args::{HostArgs, InputArgs};
use super::failure::Failure;
use crate::desired::Desired;
use crate::host::sim::SimHost;
use crate::host::Host;
use crate::manifests::Manifests;

/// Opens the host backend named by `--host`.
pub fn open_host(args: &HostArgs) -> Result<Box<dyn Host + Send>, Failure> {
    let spec = args.host.as_str();
    if spec == "local" {
        let mut h = crate::host::local::LocalHost::new(&args.host_root, &args.gpu_vendor);
        h.node_name = args.node_name.clone();
        return Ok(Box::new(h));
    }
    match spec.split_once(':') {
        Some(("sim", "embedded")) => Ok(Box::new(
            SimHost::from_yaml(crate::EMBEDDED_HOST, "embedded examples/hosts/kpro6.yaml")
                .map_err(|e| Failure::input(e.to_string()))?,
        )),
        // The file is the host: every write lands in it as it happens.
        Some(("sim", path)) => Ok(Box::new(
            SimHost::open(path).map_err(|e| Failure::input(e.to_string()))?,
        )),
        _ => Err(Failure::input(format!(
            "--host {spec:?}: use sim:FILE, sim:embedded or local"
        ))),
    }
}

/// Reads the manifests, picks the partition for the host's node and validates everything.
pub fn load_desired(input: &InputArgs, host: &mut dyn Host) -> Result<Desired, Failure> {
    let manifests = match &input.file {
        Some(p) => Manifests::load(p).map_err(|e| Failure::input(e.to_string()))?,
        None => {
            let mut m = Manifests::default();
            for (name, text) in crate::EMBEDDED_MANIFESTS {
                m.add_text(text, name)
                    .map_err(|e| Failure::input(e.to_string()))?;
            }
            m
        }
    };
    desired_for_host(
        &manifests,
        host,
        &input.host.gpu_vendor,
        &input.host.gpu_driver,
    )
}

/// Picks the partition for the host's node from `manifests` and validates everything against
/// the observed host: the one decision made before any host write. Watches the servers' units.
pub fn desired_for_host(
    manifests: &Manifests,
    host: &mut dyn Host,
    gpu_vendor: &str,
    gpu_driver: &str,
) -> Result<Desired, Failure> {
    let observed = host.observe()?;
    let desired = crate::desired::select::for_host(manifests, &observed, gpu_vendor, gpu_driver)
        .map_err(|e| Failure::input(e.to_string()))?;
    let units: Vec<_> = desired.servers.iter().map(|s| s.unit.clone()).collect();
    host.watch_units(&units);
    host.watch_preflight(&crate::desired::preflight::requests(&desired));
    Ok(desired)
}
