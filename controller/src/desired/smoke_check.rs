//! A smoke test that can never pass is refused at validation, with the field: otherwise it
//! would fail on every start, and with `rollback: Auto` roll back a server that is fine.

use super::Problems;
use gpuplane_crds::InferenceServerSpec;

/// Each request's expectations must be reachable: a tool call needs the tool offered and a
/// tool-call parser (SGLang returns no parsed `tool_calls` without one); reasoning needs a
/// reasoning parser (no `reasoning_content` without one); `answerContains` must say something.
pub(super) fn check(pr: &mut Problems, spec: &InferenceServerSpec) {
    let Some(t) = &spec.smoke_test else {
        return;
    };
    for (i, r) in t.requests.iter().enumerate() {
        let at = |f: &str| format!("spec.smokeTest.requests[{i}].{f}");
        if let Some(want) = &r.expect.tool_call {
            if r.tools.is_empty() {
                pr.add(
                    at("expect.toolCall"),
                    format!("expects a call of {want:?}, but the request offers no tools; add it to requests[{i}].tools"),
                );
            } else if !r.tools.iter().any(|tool| &tool.name == want) {
                let offered: Vec<&str> = r.tools.iter().map(|t| t.name.as_str()).collect();
                pr.add(
                    at("expect.toolCall"),
                    format!("expects a call of {want:?}, which the request does not offer (it offers: {})", offered.join(", ")),
                );
            }
            if spec.tool_call_parser.is_none() {
                pr.add(
                    at("expect.toolCall"),
                    "expects a parsed tool call, but the server has no toolCallParser (SGLang returns tool calls only through one); set spec.toolCallParser",
                );
            }
        }
        if r.expect.reasoning == Some(true) && spec.reasoning_parser.is_none() {
            pr.add(
                at("expect.reasoning"),
                "expects reasoning content, but the server has no reasoningParser (SGLang separates reasoning only through one); set spec.reasoningParser",
            );
        }
        if r.expect
            .answer_contains
            .as_deref()
            .is_some_and(|a| a.trim().is_empty())
        {
            pr.add(
                at("expect.answerContains"),
                "is empty: every answer contains it, so it tests nothing; give the text the answer must contain, or leave it out",
            );
        }
    }
}
