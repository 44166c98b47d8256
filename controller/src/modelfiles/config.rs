//! What `config.json` declares that preflight judges: attention heads, KV heads, layers SGLang's
//! speculative decoding can draft with (MTP), the architecture.
//!
//! The MTP keys are those SGLang 0.5.23's model code reads (`python/sglang/srt/models/*`,
//! `srt/configs/*`) or Hugging Face configs declare for models SGLang drafts from themselves:
//! `num_nextn_predict_layers` (DeepSeek V3/V4, GLM-4.5+, MiMo, Longcat, Bailing, ...),
//! `mtp_num_hidden_layers` (Qwen3-Next, Qwen3.5), `num_mtp_modules` (MiniMax M2/M3),
//! `mtp_hybrid_override_pattern` (Nemotron-H), `mtp_local_layer_ids` (Inkling). Multimodal
//! models keep them in `text_config`, which is read too.

use serde::{Deserialize, Serialize};

/// Keys that declare MTP layers, in the order they are looked for.
pub const MTP_KEYS: &[&str] = &[
    "num_nextn_predict_layers",
    "mtp_num_hidden_layers",
    "num_mtp_modules",
    "mtp_hybrid_override_pattern",
    "mtp_local_layer_ids",
];

/// The facts of one `config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigFacts {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub architectures: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_attention_heads: Option<u64>,
    /// `num_key_value_heads` (absent: as many as attention heads, SGLang's rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_key_value_heads: Option<u64>,
    /// The MTP key found and its value (`mtp_num_hidden_layers=1`); `None`: no MTP layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtp: Option<String>,
}

impl ConfigFacts {
    /// Reads the facts from a parsed `config.json` (top level first, then `text_config`).
    pub fn from_json(v: &serde_json::Value) -> ConfigFacts {
        let scopes = [Some(v), v.get("text_config")];
        let find = |k: &str| scopes.iter().flatten().find_map(|s| s.get(k));
        let num = |k: &str| find(k).and_then(|x| x.as_u64());
        let mtp = MTP_KEYS.iter().find_map(|k| {
            let x = find(k)?;
            let declared = match x {
                serde_json::Value::Number(n) => n.as_u64().is_some_and(|n| n > 0),
                serde_json::Value::String(s) => !s.is_empty(),
                serde_json::Value::Array(a) => !a.is_empty(),
                _ => false,
            };
            declared.then(|| format!("{k}={}", crate::text::sanitize(&x.to_string(), 80)))
        });
        ConfigFacts {
            architectures: find("architectures")
                .and_then(|a| a.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str())
                        .take(4)
                        .map(|s| crate::text::sanitize(s, 100))
                        .collect()
                })
                .unwrap_or_default(),
            num_attention_heads: num("num_attention_heads"),
            num_key_value_heads: num("num_key_value_heads"),
            mtp,
        }
    }
}
