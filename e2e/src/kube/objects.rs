//! Reading Kubernetes objects (as `kubectl -o json` prints them): conditions and whether an object
//! is Ready for its current generation.

use serde_json::Value as Json;

/// The condition of type `ty` in `status.conditions`.
pub fn condition<'a>(obj: &'a Json, ty: &str) -> Option<&'a Json> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

/// (status, reason, message) of a condition, "" when absent.
pub fn cond3(obj: &Json, ty: &str) -> (String, String, String) {
    match condition(obj, ty) {
        Some(c) => (
            c["status"].as_str().unwrap_or("").into(),
            c["reason"].as_str().unwrap_or("").into(),
            c["message"].as_str().unwrap_or("").into(),
        ),
        None => Default::default(),
    }
}

/// Ready=True for the current generation (status and condition observedGeneration both current).
pub fn ready_for_generation(obj: &Json) -> Result<(), String> {
    let generation = obj["metadata"]["generation"].as_i64();
    let observed = obj["status"]["observedGeneration"].as_i64();
    let (st, reason, msg) = cond3(obj, "Ready");
    let cond_gen = condition(obj, "Ready").and_then(|c| c["observedGeneration"].as_i64());
    if st == "True" && observed == generation && cond_gen == generation {
        Ok(())
    } else {
        Err(format!(
            "generation {generation:?}, status.observedGeneration {observed:?}, Ready {st} {reason} \
             (condition observedGeneration {cond_gen:?}): {msg}"
        ))
    }
}

/// Ready has `status` and `reason`; else Err("Ready STATUS REASON: MESSAGE").
pub fn ready_is(obj: &Json, status: &str, reason: &str) -> Result<(), String> {
    let (st, re, msg) = cond3(obj, "Ready");
    if st == status && re == reason {
        Ok(())
    } else {
        Err(format!("Ready {st} {re}: {msg}"))
    }
}

/// Whether `metadata.finalizers` holds `name`.
pub fn has_finalizer(obj: &Json, name: &str) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| f == name)
}
