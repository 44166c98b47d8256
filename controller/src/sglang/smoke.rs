//! The smoke test's chat requests and how their answers are judged, in the shape of SGLang's
//! OpenAI-compatible API (`python/sglang/srt/entrypoints/openai/protocol.py`, 0.5.23):
//! `choices[0].message` has `content`, `reasoning_content` (filled by `--reasoning-parser`) and
//! `tool_calls` (`[{id, index, type: "function", function: {name, arguments}}]`, filled by
//! `--tool-call-parser`). Pure.
//!
//! # Guarantees
//! Judging never panics on any answer; failure messages quote the answer only cut to a few
//! dozen characters, one line.

use gpuplane_crds::SmokeRequest;
use serde_json::{json, Value};

/// The request body for `req` to the server serving `model`.
pub fn request_body(model: &str, req: &SmokeRequest) -> String {
    let mut body = json!({
        "model": model,
        "messages": [{"role": "user", "content": req.prompt}],
        "max_tokens": req.max_tokens,
        "temperature": 0,
        "stream": false,
    });
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let props: serde_json::Map<String, Value> = t
                    .parameters
                    .iter()
                    .map(|p| (p.clone(), json!({"type": "string"})))
                    .collect();
                json!({"type": "function", "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": {"type": "object", "properties": props, "required": t.parameters},
                }})
            })
            .collect();
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = json!("auto");
    }
    body.to_string()
}

/// Judges one answer (HTTP status and body): `Err` says what the spec expected and what came.
pub fn judge(req: &SmokeRequest, status: u16, body: &str) -> Result<(), String> {
    let name = &req.name;
    let cut = |s: &str| crate::text::sanitize(s, 80);
    if status != 200 {
        return Err(format!("{name}: HTTP {status}: {}", cut(body)));
    }
    let v: Value =
        serde_json::from_str(body).map_err(|e| format!("{name}: the answer is not JSON: {e}"))?;
    let msg = &v["choices"][0]["message"];
    if !msg.is_object() {
        return Err(format!("{name}: the answer has no choices[0].message"));
    }
    let content = msg["content"].as_str().unwrap_or("");
    let mut failed = vec![];
    if let Some(want) = &req.expect.answer_contains {
        if !content.contains(want.as_str()) {
            failed.push(format!(
                "content does not contain {want:?} (got {:?})",
                cut(content)
            ));
        }
    }
    if let Some(want) = req.expect.reasoning {
        let has = msg["reasoning_content"]
            .as_str()
            .is_some_and(|r| !r.trim().is_empty());
        if has != want {
            failed.push(if want {
                "no reasoning_content (is --reasoning-parser set?)".to_string()
            } else {
                "reasoning_content present, none expected".to_string()
            });
        }
    }
    if let Some(want) = &req.expect.tool_call {
        let names: Vec<String> = msg["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["function"]["name"].as_str())
            .map(cut)
            .collect();
        if !names.iter().any(|n| n == want) {
            failed.push(if names.is_empty() {
                format!("no tool call, expected {want} (is --tool-call-parser set?)")
            } else {
                format!("tool calls {}, expected {want}", names.join(", "))
            });
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: {}", failed.join("; ")))
    }
}

#[cfg(test)]
mod tests;
