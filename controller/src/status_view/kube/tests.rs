use super::*;
use gpuplane_crds::condition::{Condition, Time};

fn condition(type_: &str, status: &str, reason: &str, at: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: format!("{type_} is {status}"),
        last_transition_time: Time(at.parse().unwrap()),
        observed_generation: Some(1),
    }
}

/// The cluster's objects print as the status files do: the GPU table with consumers from
/// the partition's spec and its node, the conditions of every object with ages.
#[test]
fn objects_print_like_the_status_files() {
    let mut p: GpuPartition =
        serde_yaml::from_str(include_str!("../../../../examples/kpro6/partition.yaml")).unwrap();
    let gpu =
        |a: &str, slot: &str, driver: &str, owner: &str, missing: bool| gpuplane_crds::GpuStatus {
            address: a.into(),
            slot: Some(slot.into()),
            numa: 1,
            driver: driver.into(),
            owner: Some(owner.into()),
            missing,
            health: Some(if missing {
                gpuplane_crds::GpuHealthState::Lost
            } else {
                gpuplane_crds::GpuHealthState::Healthy
            }),
            ..Default::default()
        };
    p.status = Some(gpuplane_crds::GpuPartitionStatus {
        conditions: vec![
            condition("Ready", "False", "GpuMissing", "2026-12-03T14:00:00Z"),
            condition("Stalled", "True", "GpuMissing", "2026-12-03T14:00:00Z"),
        ],
        gpus: vec![
            gpu("0000:81:00.0", "5", "vfio-pci", "confidential-vm", false),
            gpu("0000:f1:00.0", "8", "none", "confidential-vm", true),
        ],
        layout_hash: Some("0b1c2d3e4f50".into()),
        ..Default::default()
    });
    let mut s: InferenceServer =
        serde_yaml::from_str(include_str!("../../../../examples/kpro6/server.yaml")).unwrap();
    s.status = Some(gpuplane_crds::InferenceServerStatus {
        conditions: vec![condition(
            "Ready",
            "True",
            "ServerReady",
            "2026-12-02T15:00:00Z",
        )],
        ..Default::default()
    });
    // An object never reconciled has no status: listed, with no conditions.
    let mut fresh = s.clone();
    fresh.metadata.name = Some("fresh".into());
    fresh.status = None;
    let (docs, specs) = docs_of(&[p], &[s, fresh]);
    let now = "2026-12-03T15:00:00Z".parse().unwrap();
    let f = crate::status_view::frame(&docs, &specs, crate::status_view::Format::Table, now);
    assert_eq!(
        crate::status_view::render::print(&f, false),
        "GpuPartition/kpro6 (node kpro6, layout 0b1c2d3e4f50)
ADDRESS        SLOT   NUMA   DRIVER      HEALTH    OWNER             CONSUMER              HOLDER
0000:81:00.0   5      1      vfio-pci    Healthy   confidential-vm   vm 200 (pro6000-vm)   -
0000:f1:00.0   8      1      (missing)   Lost      confidential-vm   vm 200 (pro6000-vm)   -

RESOURCE                              TYPE      STATUS   REASON        AGE
GpuPartition/kpro6                    Ready     False    GpuMissing    60m
GpuPartition/kpro6                    Stalled   True     GpuMissing    60m
InferenceServer/default/qwen35-122b   Ready     True     ServerReady   24h
InferenceServer/default/fresh         -         -        -             -
"
    );
}
