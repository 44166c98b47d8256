//! What a command works on: the host backend (`--host`) and the validated manifests (`-f`).

use super::args::{HostArgs, InputArgs};
use super::failure::Failure;
use crate::desired::Desired;
use crate::host::sim::SimHost;
use crate::host::Host;
use crate::manifests::Manifests;
use crate::pass::select::{from_manifests, Selected};
use crate::pass::watch::Watching;
use crate::pass::Pass;

/// The file of `--host sim:FILE`: a simulated host read from a file and never written.
pub fn read_only_sim_file(args: &HostArgs) -> Option<&str> {
    match args.host.split_once(':') {
        Some(("sim", "embedded")) => None,
        Some(("sim", path)) => Some(path),
        _ => None,
    }
}

/// Opens the host backend named by `--host`.
pub fn open_host(args: &HostArgs) -> Result<Box<dyn Host + Send>, Failure> {
    let spec = args.host.as_str();
    if spec == "local" {
        let mut h = crate::host::local::LocalHost::new(&args.host_root, &args.gpu_vendor);
        h.node_name = args.node_name.clone();
        h.lock_timeout = std::time::Duration::from_secs(args.lock_timeout);
        return Ok(Box::new(h));
    }
    match spec.split_once(':') {
        Some(("sim", "embedded")) => Ok(Box::new(
            SimHost::from_yaml(crate::EMBEDDED_HOST, "embedded examples/hosts/kpro6.yaml")
                .map_err(|e| Failure::input(e.to_string()))?,
        )),
        // Read-only: the run works on a copy in memory; the file is never written.
        Some(("sim", path)) => Ok(Box::new(
            SimHost::load(path).map_err(|e| Failure::input(e.to_string()))?,
        )),
        // The file is the host: every write lands in it as it happens (crash tests).
        Some(("sim-rw", path)) => Ok(Box::new(
            SimHost::open(path).map_err(|e| Failure::input(e.to_string()))?,
        )),
        _ => Err(Failure::input(format!(
            "--host {spec:?}: use sim:FILE (read-only), sim-rw:FILE (the file is the host), sim:embedded or local"
        ))),
    }
}

/// Reads the manifests, picks the partition for the host's node and validates everything.
pub fn load_desired(input: &InputArgs, host: &mut dyn Host) -> Result<Desired, Failure> {
    load_selected(input, host, &Pass::begin()).map(|s| s.desired)
}

/// [`load_desired`] for `pass`, with the observation it chose the GPUs on when that is
/// complete for the converge loop (`pass::watch`): the loop's first look.
pub fn load_selected(
    input: &InputArgs,
    host: &mut dyn Host,
    pass: &Pass,
) -> Result<Selected, Failure> {
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
    let gpu = (
        input.host.gpu_vendor.as_str(),
        input.host.gpu_driver.as_str(),
    );
    let selected = from_manifests(
        pass,
        &manifests,
        host,
        &mut Watching::default(),
        gpu,
        |_| {},
    )?;
    if let Some(note) = pool_note(&manifests, &selected.desired) {
        eprintln!("note: {note}");
    }
    Ok(selected)
}

/// What a pool means to this command, when the host's partition is a member of one: a pool's
/// slots are asked through the API server, and one host converged from the command line asks
/// none (the pool itself, when in the input, was checked like every resource).
pub fn pool_note(manifests: &Manifests, desired: &Desired) -> Option<String> {
    let p = manifests.partition(&desired.partition.name)?;
    let pool = gpuplane_crds::pool_of(p)?;
    let read = if manifests
        .pools
        .iter()
        .any(|x| x.metadata.name.as_deref() == Some(pool))
    {
        " (read from the input and checked)"
    } else {
        ""
    };
    Some(format!(
        "GpuPartition/{} is a member of GpuNodePool/{pool}{read}: a pool's disruption slots are asked through the API server by the Kubernetes agent (gpuplane run); this command changes this one host and asks for none",
        desired.partition.name
    ))
}

/// Picks the partition for the host's node from `manifests` and validates everything against
/// the observed host: the one decision made before any host write. Watches the servers' units.
pub fn desired_for_host(
    manifests: &Manifests,
    host: &mut dyn Host,
    gpu_vendor: &str,
    gpu_driver: &str,
) -> Result<Desired, Failure> {
    let gpu = (gpu_vendor, gpu_driver);
    let mut watching = Watching::default();
    Ok(from_manifests(&Pass::begin(), manifests, host, &mut watching, gpu, |_| {})?.desired)
}
