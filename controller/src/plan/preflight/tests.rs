//! The reference story (examples/: kpro6 twin, tp-8 server in LXC 129, split to tp 4 + a VM)
//! with what preflight must catch before anything is torn down.

use crate::converge::{converge, Report, Stop};
use crate::desired::Desired;
use crate::host::sim::{SimHost, SimModel};
use crate::host::Host;
use crate::testutil::{desired, manifests, twin};

const SERVER: &str = "InferenceServer/default/qwen35-122b";
const MODEL: &str = "/shared/models/Qwen3.5-122B-A10B";

/// The twin's model directory.
fn model(h: &mut SimHost) -> &mut SimModel {
    h.file
        .files
        .as_mut()
        .unwrap()
        .models
        .get_mut(MODEL)
        .unwrap()
}

/// Runs the reference story after `edit`, with preflight watched as the agent does.
fn story(edit: impl FnOnce(&mut SimHost, &mut Desired)) -> (Report, SimHost, Desired) {
    let mut h = twin();
    let mut d = desired(&mut h, &manifests());
    edit(&mut h, &mut d);
    h.watch_units(&d.servers.iter().map(|s| s.unit.clone()).collect::<Vec<_>>());
    h.watch_preflight(&crate::desired::preflight::requests(&d));
    let mut door = crate::door::Door::new(&mut h);
    let r = converge(&d, &mut door, &Default::default());
    (r, h, d)
}

/// Asserts the story stopped before its first write with `PreflightFailed` naming `cause`, the
/// old tp-8 server still serving, and the server's status `Stalled`.
fn blocked_before_any_write(r: &Report, h: &mut SimHost, d: &Desired, cause: &str) -> String {
    assert_eq!(r.writes, 0, "nothing may change: {:?}", r.applied);
    let Some(Stop::Blocked { blockers }) = &r.stop else {
        panic!("not blocked: {:?}", r.stop)
    };
    let b = &blockers[0];
    assert_eq!(
        (b.resource.to_string(), b.reason.as_str()),
        (SERVER.to_string(), "PreflightFailed")
    );
    assert!(b.message.contains(cause), "{cause:?} not in {}", b.message);
    let st = h.observe().unwrap();
    let u = st.unit(&d.servers[0].unit).unwrap();
    assert_eq!(u.active_state, "active");
    let info = &u.server.as_ref().unwrap().server_info;
    assert_eq!(
        info.get("tp_size").map(String::as_str),
        Some("8"),
        "the old tp-8 server runs"
    );
    assert!(st.containers[&129].state == crate::host::model::RunState::Running);
    let status = crate::status::compute(d, r, &Default::default(), &crate::clock::now());
    let c = |t: &str| {
        status[&crate::testutil::key(SERVER)]
            .condition(t)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (c("Stalled").status.as_str(), c("Stalled").reason.as_str()),
        ("True", "PreflightFailed")
    );
    assert_eq!(c("PreflightPassed").status, "False");
    b.message.clone()
}

#[test]
fn the_reference_story_passes_preflight_and_reports_versions_and_headroom() {
    let (r, _, d) = story(|_, _| {});
    assert!(r.converged(), "{:?}", r.stop);
    let status = crate::status::compute(&d, &r, &Default::default(), &crate::clock::now());
    let c = status[&crate::testutil::key(SERVER)]
        .condition("PreflightPassed")
        .unwrap();
    assert_eq!(c.status, "True");
    println!("PreflightPassed: {}", c.message);
    for want in [
        "sglang 0.5.23",
        "torch 2.9.1+cu130",
        "CUDA 13.0",
        "39 shards",
        "54.5 GiB per GPU at tp 4",
        "KV cache headroom about 26.8 GiB",
    ] {
        assert!(c.message.contains(want), "{want:?} not in {}", c.message);
    }
}

#[test]
fn a_truncated_shard_blocks_before_the_old_server_is_stopped() {
    let (r, mut h, d) = story(|h, _| {
        model(h)
            .truncated
            .insert("model-00007-of-00039.safetensors".into(), 1_000_000);
    });
    let m = blocked_before_any_write(&r, &mut h, &d, "model-00007-of-00039.safetensors: 5999000");
    assert!(m.contains("truncated"), "{m}");
    println!("{m}");
}

#[test]
fn a_missing_shard_blocks_and_is_named() {
    let (r, mut h, d) = story(|h, _| {
        model(h)
            .missing
            .push("model-00039-of-00039.safetensors".into());
    });
    let m = blocked_before_any_write(
        &r,
        &mut h,
        &d,
        "/shared/models/Qwen3.5-122B-A10B/model-00039-of-00039.safetensors: missing (named in weight_map)",
    );
    println!("{m}");
}

#[test]
fn nextn_on_a_model_without_mtp_layers_blocks() {
    let (r, mut h, d) = story(|h, _| {
        let cfg = &mut model(h).config;
        cfg["text_config"]
            .as_object_mut()
            .unwrap()
            .remove("mtp_num_hidden_layers");
    });
    let m = blocked_before_any_write(&r, &mut h, &d, "speculative NEXTN drafts with the model's own MTP layers, but /shared/models/Qwen3.5-122B-A10B/config.json declares none");
    println!("{m}");
}

#[test]
fn weights_too_large_for_the_slice_block() {
    // The same model in FP32: 468 GB, 109 GiB per GPU at tp 4 against 95.6 GiB × 0.85.
    let (r, mut h, d) = story(|h, _| model(h).shard_bytes = 12_000_000_000);
    let m = blocked_before_any_write(
        &r,
        &mut h,
        &d,
        "weights need 109.0 GiB per GPU at tensorParallelSize 4",
    );
    assert!(
        m.contains("95.6 GiB × memFractionStatic 0.85 = 81.3 GiB"),
        "{m}"
    );
    println!("{m}");
}

#[test]
fn heads_that_do_not_divide_by_tp_block() {
    let (r, mut h, d) =
        story(|h, _| model(h).config["text_config"]["num_attention_heads"] = 30.into());
    blocked_before_any_write(
        &r,
        &mut h,
        &d,
        "num_attention_heads 30 is not divisible by tensorParallelSize 4",
    );
}

#[test]
fn an_interpreter_without_sglang_or_a_missing_cuda_home_blocks() {
    let (r, mut h, d) = story(|h, _| {
        let f = h.file.files.as_mut().unwrap();
        f.interpreters
            .get_mut("/root/ml-env/bin/python3")
            .unwrap()
            .sglang = None;
        f.paths.remove("/usr/local/cuda-13.0");
    });
    let m = blocked_before_any_write(&r, &mut h, &d, "No module named 'sglang'");
    assert!(m.contains("CUDA_HOME=/usr/local/cuda-13.0 (named in the unit's environment) does not exist on container 129"), "{m}");
}

#[test]
fn a_converged_server_is_left_alone_when_its_files_break_later() {
    let (r, mut h, d) = story(|_, _| {});
    assert!(r.converged());
    model(&mut h)
        .truncated
        .insert("model-00001-of-00039.safetensors".into(), 1);
    let p = crate::plan::plan(&d, &h.observe().unwrap());
    assert!(p.steps.is_empty() && p.blockers.is_empty(), "{p:?}");
    assert!(p.notes.iter().any(|n| n.message.contains("left alone") && n.message.contains("model-00001-of-00039")), "{:?}", p.notes);
}

#[test]
fn a_container_userspace_that_is_not_the_host_module_blocks_before_the_old_server_stops() {
    let (r, mut h, d) = story(|h, _| {
        h.file
            .containers
            .get_mut(&129)
            .unwrap()
            .nvidia_userspace_version = Some("565.57.01".into())
    });
    let m = blocked_before_any_write(&r, &mut h, &d, "container 129 has the NVIDIA userspace 565.57.01 (libnvidia-ml.so.565.57.01) but the host's kernel module is 590.44.01");
    assert!(
        m.contains("install the 590.44.01 userspace libraries in the container"),
        "{m}"
    );
}

#[test]
fn a_host_server_after_a_driver_upgrade_without_reboot_waits_for_the_reboot() {
    let (r, _h, _d) = story(|h, d| {
        h.file.nvidia.userspace_version = Some("595.10.02".into());
        let s = &mut d.servers[0];
        s.unit.location = crate::host::model::Location::Host;
    });
    assert_eq!(r.writes, 0, "{:?}", r.applied);
    let Some(Stop::Blocked { blockers }) = &r.stop else {
        panic!("not blocked: {:?}", r.stop)
    };
    assert_eq!(blockers[0].reason, "RebootRequired", "{blockers:?}");
    assert!(
        blockers[0].message.contains(
            "the host's NVIDIA userspace is 595.10.02 but the loaded kernel module is 590.44.01"
        ),
        "{}",
        blockers[0].message
    );
}
