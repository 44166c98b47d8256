//! From specs to the desired host: validation and resolution.
//!
//! `resolve_partition` and `resolve_server` check every rule a CRD schema cannot
//! express (the test API server has no CEL, and files bypass the API server
//! entirely) and resolve selectors against the observed host. Pure: no I/O.
//! Every error names the field and says what to fix.

mod kernel_args;
mod model_ref;
pub mod offline;
mod partition;
pub mod pool;
pub mod preflight;
pub mod reboot;
pub mod select;
mod server;
mod smoke_check;
pub mod tenancy;
mod unit_check;

pub use partition::resolve_partition;
pub use server::{check_servers_together, claim_key, in_claim_order, resolve_server};

use crate::host::model::{Location, UnitRef};
use crate::sglang::command::Runtime;
use gpuplane_crds::{GpuDriver, InferenceServerSpec, IommuModeExpectation, ServerPolicy};

/// One spec problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The resource the problem is in.
    pub resource: crate::resource_key::ResourceKey,
    /// JSON path of the field, `spec.slices[1].gpus`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.resource, self.field, self.message)
    }
}

/// The partition, resolved against the host.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredPartition {
    pub name: String,
    pub node_name: String,
    pub slices: Vec<ResolvedSlice>,
    pub iommu: IommuModeExpectation,
    /// The kernel driver that stands for `nvidia` on this host (`nvidia`; tests on emulated
    /// devices name their display driver, e.g. `bochs-drm`).
    pub host_driver: String,
    /// What the layout guard (`layout/guard.rs`) needs from the partition; `None`: no guard
    /// (a stand-in partition, or the cleanup of a deleted one).
    pub layout: Option<crate::layout::Terms>,
    /// `spec.host.kernelArgs`, validated; `None` when not set or empty (the agent then neither
    /// reads nor writes the bootloader's config, and reports no `RebootRequired`).
    pub kernel_args: Option<gpuplane_crds::KernelArgs>,
    /// Whether the agent may reboot for the kernel arguments now (`reboot.rs`): `Manual`, or
    /// `Auto` closed until a front door opens it ([`reboot::RebootGate::decide`]).
    pub reboot: reboot::RebootGate,
}

/// A slice with its GPUs resolved to addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedSlice {
    pub name: String,
    /// Full PCI addresses, sorted.
    pub gpus: Vec<String>,
    pub driver: GpuDriver,
    pub consumer: Option<ResolvedConsumer>,
    /// What the admin lets servers do here; `None`: no server may use the slice.
    pub servers: Option<ServerPolicy>,
}

/// A slice's consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedConsumer {
    Lxc(u32),
    Vm { vmid: u32, mapping: String },
}

impl DesiredPartition {
    pub fn slice(&self, name: &str) -> Option<&ResolvedSlice> {
        self.slices.iter().find(|s| s.name == name)
    }

    /// The sysfs driver name for a slice's driver.
    pub fn driver_name(&self, d: GpuDriver) -> &str {
        match d {
            GpuDriver::Nvidia => &self.host_driver,
            GpuDriver::VfioPci => "vfio-pci",
        }
    }
}

/// A server, validated, with its unit placed and its GPUs known.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredServer {
    /// `namespace/name`.
    pub id: String,
    pub spec: InferenceServerSpec,
    pub unit: UnitRef,
    /// The slice's GPUs (full addresses, sorted).
    pub gpus: Vec<String>,
    /// What the slice's admin decided about how it runs (user, environment, sandboxing).
    pub runtime: Runtime,
    /// The admin lets the agent take over this unit although it did not write it
    /// (`servers.adoptUnits`); otherwise a unit file without the agent's header is never
    /// written over, restarted, stopped or removed.
    pub adopt: bool,
}

impl DesiredServer {
    pub fn location(&self) -> Location {
        self.unit.location
    }
}

/// The whole desired state the planner works towards.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub partition: DesiredPartition,
    pub servers: Vec<DesiredServer>,
    /// Units of deleted servers: stopped and removed from the host.
    pub removed_units: Vec<UnitRef>,
}

pub(crate) fn err(
    resource: &crate::resource_key::ResourceKey,
    field: impl Into<String>,
    message: impl Into<String>,
) -> SpecError {
    SpecError {
        resource: resource.clone(),
        field: field.into(),
        message: message.into(),
    }
}

/// The problems found in one resource, in the order the checks found them.
struct Problems<'a> {
    resource: &'a crate::resource_key::ResourceKey,
    errors: Vec<SpecError>,
}

impl<'a> Problems<'a> {
    /// No problems yet with `resource` (`Kind/name`).
    fn new(resource: &'a crate::resource_key::ResourceKey) -> Self {
        Problems {
            resource,
            errors: Vec::new(),
        }
    }

    /// Records that `field` is wrong, after the problems recorded before.
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(err(self.resource, field, message));
    }

    /// `Ok` if nothing was recorded, else every problem in the order recorded.
    fn finish(self) -> Result<(), Vec<SpecError>> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }
}

#[cfg(test)]
mod tests;
