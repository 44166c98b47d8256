//! Speculative decoding checks, the way SGLang 0.5.23 resolves its flags.
//!
//! SGLang accepts some combinations only to crash later (`num_steps` without
//! `eagle_topk` is a `TypeError` at startup) or silently rewrites them (with topk 1
//! it sets draft tokens to steps + 1). The agent rejects both up front, so the spec
//! says exactly what runs.

use gpuplane_crds::SpeculativeSpec;

/// Algorithms SGLang knows without plugins (any letter case; NEXTN is an alias of EAGLE).
pub const ALGORITHMS: &[&str] = &[
    "EAGLE",
    "EAGLE3",
    "NEXTN",
    "STANDALONE",
    "NGRAM",
    "DFLASH",
    "DSPARK",
    "UNO",
    "FROZEN_KV_MTP",
];

/// Largest `numDraftTokens` accepted (SGLang's default `mamba_track_interval`).
pub const MAX_DRAFT_TOKENS: u32 = 256;

/// One problem: the field (relative to `spec.speculative`) and what to fix.
pub type Problem = (&'static str, String);

/// Checks a speculative spec; returns every problem found.
pub fn check(s: &SpeculativeSpec) -> Vec<Problem> {
    let mut out = Vec::new();
    let algo = s.algorithm.to_ascii_uppercase();
    if !ALGORITHMS.contains(&algo.as_str()) {
        out.push((
            "algorithm",
            format!(
                "unknown speculative algorithm {:?}; use one of {} (NEXTN is MTP)",
                s.algorithm,
                ALGORITHMS.join(", ")
            ),
        ));
        return out;
    }
    let eagle_family = matches!(algo.as_str(), "EAGLE" | "EAGLE3" | "NEXTN" | "STANDALONE");
    if eagle_family {
        match (s.num_steps, s.eagle_topk, s.num_draft_tokens) {
            (None, Some(_), _) | (None, _, Some(_)) => out.push((
                "numSteps",
                "numSteps is required when eagleTopk or numDraftTokens is set (SGLang asserts on it); \
                 set numSteps, or remove all three to let SGLang choose"
                    .to_string(),
            )),
            (Some(_), None, _) => out.push((
                "eagleTopk",
                "eagleTopk is required with numSteps (SGLang 0.5.23 crashes at startup without it); set eagleTopk: 1 for MTP"
                    .to_string(),
            )),
            (Some(steps), Some(1), Some(draft)) if draft != steps + 1 => out.push((
                "numDraftTokens",
                format!(
                    "with eagleTopk 1 SGLang forces numDraftTokens to numSteps + 1 = {}; set numDraftTokens: {} (or raise eagleTopk)",
                    steps + 1,
                    steps + 1
                ),
            )),
            _ => {}
        }
    }
    if algo == "NGRAM" && s.eagle_topk.is_some() {
        out.push((
            "eagleTopk",
            "NGRAM ignores eagleTopk: SGLang sets it from --speculative-ngram-max-bfs-breadth (default 10); remove eagleTopk (set the breadth in extraArgs if needed)"
                .to_string(),
        ));
    }
    if s.num_draft_tokens.is_some_and(|d| d > MAX_DRAFT_TOKENS) {
        out.push((
            "numDraftTokens",
            format!(
                "at most {MAX_DRAFT_TOKENS}: SGLang rejects more for hybrid (Mamba) models such as Qwen3.5 (mamba_track_interval), and no model gains from it"
            ),
        ));
    }
    if algo == "STANDALONE" && s.draft_model_path.is_none() {
        out.push((
            "draftModelPath",
            "STANDALONE needs draftModelPath (a smaller draft model)".to_string(),
        ));
    }
    if algo == "DFLASH" && s.draft_model_path.is_none() {
        out.push(("draftModelPath", "DFLASH needs draftModelPath".to_string()));
    }
    if matches!(algo.as_str(), "DFLASH" | "DSPARK") {
        for (field, v) in [("numSteps", s.num_steps), ("eagleTopk", s.eagle_topk)] {
            if v.is_some_and(|v| v != 1) {
                out.push((
                    field,
                    format!("{algo} forces {field} to 1; remove it or set 1"),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
