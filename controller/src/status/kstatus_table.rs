//! The kstatus oracle run over the statuses simulated converges produce: each scenario's
//! resources must read Current, InProgress or Failed exactly where they belong.

use super::{compute, ResourceStatus};
use crate::converge::{converge, Options};
use crate::desired::Desired;
use crate::host::sim::SimHost;
use crate::testutil::{desired, manifests, twin};
use gpuplane_crds::kstatus::{self, Kstatus};
use std::collections::BTreeMap;

const PART: &str = "GpuPartition/kpro6";
const SERVER: &str = "InferenceServer/default/qwen35-122b";

/// An object as the API server would show it: generation, observedGeneration, conditions.
fn object(
    st: &ResourceStatus,
    generation: i64,
    observed: i64,
    deleting: bool,
) -> serde_json::Value {
    let mut o = serde_json::json!({
        "metadata": { "name": "x", "generation": generation },
        "status": { "observedGeneration": observed, "conditions": st.conditions },
    });
    if deleting {
        o["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z".into();
    }
    o
}

/// Converges `d` on `h` with `opts` and computes every status for generation 1.
fn statuses(
    h: &mut SimHost,
    d: &Desired,
    opts: &Options,
) -> BTreeMap<crate::resource_key::ResourceKey, ResourceStatus> {
    let r = converge(d, &mut crate::door::Door::new(h), opts);
    let g: BTreeMap<_, i64> = [
        (crate::testutil::key(PART), 1),
        (crate::testutil::key(SERVER), 1),
    ]
    .into();
    compute(d, &r, &g, &crate::clock::now())
}

/// One row: scenario, resource, expected verdict and reason, the status it is read from, and
/// (generation, observedGeneration, deleting).
type Row = (
    &'static str,
    &'static str,
    Kstatus,
    &'static str,
    ResourceStatus,
    (i64, i64, bool),
);

/// A scenario's statuses, read at (generation, observedGeneration, deleting).
struct Scenario<'a>(
    &'static str,
    &'a BTreeMap<crate::resource_key::ResourceKey, ResourceStatus>,
    (i64, i64, bool),
);

impl Scenario<'_> {
    /// The row of resource `res`: expected `want` with `reason`.
    fn row(&self, res: &'static str, want: Kstatus, reason: &'static str) -> Row {
        let status = self.1[&crate::testutil::key(res)].clone();
        (self.0, res, want, reason, status, self.2)
    }
}

fn scenarios() -> Vec<Row> {
    use Kstatus::{Current, Failed, InProgress, Terminating};
    let mut rows: Vec<Row> = vec![];
    let controller = Options {
        block_on_ready: false,
        ..Options::default()
    };
    // The reference split, converged by the CLI (waits for readiness).
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let st = statuses(&mut h, &d, &Options::default());
    let same = (1, 1, false);
    rows.push(Scenario("reference split, converged", &st, same).row(PART, Current, "Ready"));
    rows.push(Scenario("reference split, converged", &st, same).row(SERVER, Current, "Ready"));
    rows.push(
        Scenario("spec edited, not yet observed", &st, (2, 1, false)).row(
            PART,
            InProgress,
            "LatestGenerationNotObserved",
        ),
    );
    rows.push(Scenario("being deleted", &st, (1, 1, true)).row(
        SERVER,
        Terminating,
        "DeletionTimestamp",
    ));
    // One reconcile of the agent: the host is split, the server is starting.
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let st = statuses(&mut h, &d, &controller);
    rows.push(Scenario("first reconcile, server starting", &st, same).row(PART, Current, "Ready"));
    rows.push(Scenario("first reconcile, server starting", &st, same).row(
        SERVER,
        InProgress,
        "Launching",
    ));
    // Stopped after two steps: host steps remain.
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    let st = statuses(
        &mut h,
        &d,
        &Options {
            max_steps: 2,
            ..controller.clone()
        },
    );
    rows.push(Scenario("steps remain", &st, same).row(PART, InProgress, "Applying"));
    // A process holds a GPU that must move: blocked, Failed in one reconcile.
    let mut h = twin();
    let d = desired(&mut h, &manifests());
    h.hold("0000:91:00.0", 777, "nvidia-persistenced");
    let st = statuses(&mut h, &d, &controller);
    rows.push(Scenario("GPU held by a process", &st, same).row(PART, Failed, "GpuInUse"));
    rows.push(Scenario("GPU held by a process", &st, same).row(SERVER, Failed, "WaitingForGpus"));
    // A foreign device shares a moving GPU's IOMMU group.
    let mut h = twin();
    h.file.pci_devices.push(crate::host::sim::SimDevice {
        address: "0000:92:00.0".into(),
        vendor: "15b3".into(),
        device: "1017".into(),
        class: "020000".into(),
        subsystem: None,
        numa_node: 1,
        iommu_group: Some(15),
        driver: Some("mlx5_core".into()),
        driver_override: None,
        default_driver: Some("mlx5_core".into()),
        minor: None,
        identity: Default::default(),
        health: Default::default(),
    });
    h.file.pci_drivers.insert("mlx5_core".into());
    let d = desired(&mut h, &manifests());
    let st = statuses(&mut h, &d, &controller);
    rows.push(Scenario("IOMMU group shared with a NIC", &st, same).row(
        PART,
        Failed,
        "IommuGroupShared",
    ));
    rows.extend(server_failures());
    rows
}

/// Servers that cannot start: P2P on under a translating IOMMU (hangs after loading), a crash.
fn server_failures() -> Vec<Row> {
    use Kstatus::Failed;
    let same = (1, 1, false);
    let mut rows: Vec<Row> = vec![];
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    d.servers[0].spec.p2p = gpuplane_crds::P2pPolicy::Enabled;
    let st = statuses(&mut h, &d, &Options::default());
    rows.push(Scenario("p2p Enabled under SEV-SNP: hangs", &st, same).row(
        SERVER,
        Failed,
        "StartupStalled",
    ));
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    d.servers[0].spec.env.push(gpuplane_crds::EnvVar {
        name: "SIM_CRASH_AT".into(),
        value: "load".into(),
    });
    let st = statuses(&mut h, &d, &Options::default());
    rows.push(Scenario("server dies while loading", &st, same).row(SERVER, Failed, "Crashed"));
    rows
}

/// Prints the oracle's table and asserts every row.
#[test]
fn kstatus_reads_every_simulated_status_as_it_should() {
    let mut bad = vec![];
    println!(
        "{:<34} {:<15} {:<42} {:<42} ok",
        "scenario", "resource", "expected", "kstatus"
    );
    for (scenario, res, want, reason, st, (g, og, del)) in scenarios() {
        let v = kstatus::compute(&object(&st, g, og, del));
        let ok = v.status == want && v.reason == reason;
        let kind = res.split('/').next().unwrap_or(res);
        println!(
            "{scenario:<34} {kind:<15} {:<42} {:<42} {}",
            format!("{}({reason})", want.as_str()),
            format!("{}({})", v.status.as_str(), v.reason),
            if ok { "yes" } else { "NO" }
        );
        if !ok {
            bad.push(format!(
                "{scenario} {res}: want {want:?}({reason}), got {v:?}"
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The abnormal-true pair never says both: kstatus would then depend on the list's order.
#[test]
fn reconciling_and_stalled_are_never_both_true() {
    for (scenario, res, _, _, st, _) in scenarios() {
        let t = |k: &str| st.condition(k).is_some_and(|c| c.status == "True");
        assert!(!(t("Reconciling") && t("Stalled")), "{scenario} {res}");
        assert!(
            st.condition("Reconciling").is_some() && st.condition("Stalled").is_some(),
            "{scenario} {res}"
        );
    }
}

/// Every reason of the closed list that names a standing reads in kstatus as its standing says
/// (`gpuplane_crds::reason`): the conditions are written by the status's own `rows`, so a
/// reason moved to another standing, or a change of how a standing is written, fails here.
#[test]
fn every_reason_reads_in_kstatus_as_its_standing_says() {
    use super::{Reason, Row, Rows};
    use gpuplane_crds::reason::Standing;
    let now = gpuplane_crds::condition::Time("2026-12-05T00:00:00Z".parse().unwrap());
    let mut checked = 0;
    for r in Reason::ALL.iter().copied() {
        let Some(want) = r.standing().kstatus() else {
            continue;
        };
        let mut st = ResourceStatus::default();
        let done = r.standing() == Standing::Done;
        let working = r.standing() == Standing::Working;
        let rows = Rows {
            ready: Row(done, r, format!("{r}: message")),
            progressing: Row(working, r, "progress".into()),
            standing: (r, format!("{r}: message")),
        };
        st.rows(rows, &now, Some(1));
        let v = kstatus::compute(&object(&st, 1, 1, false));
        assert_eq!(v.status, want, "{r}: {v:?}");
        checked += 1;
    }
    assert!(checked > 40, "only {checked} reasons name a standing");
}
