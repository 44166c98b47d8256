//! The safetensors header: 8 bytes of little-endian header length, then that many bytes of JSON
//! mapping tensor names to `{dtype, shape, data_offsets: [begin, end]}` (offsets relative to the
//! end of the header), plus an optional `__metadata__` object of strings.
//!
//! # Guarantees
//! Never panics; a header longer than [`HEADER_MAX`] is refused before it is read; offsets are
//! checked (`begin <= end`, no overflow).

/// Largest header read, in bytes (the safetensors library's own limit is 100 MB).
pub const HEADER_MAX: u64 = 100_000_000;

/// What a header declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Tensors declared.
    pub tensors: usize,
    /// The largest `data_offsets` end: the data section's length.
    pub data_end: u64,
}

/// The header length from a shard's first 8 bytes. The bytes themselves are never echoed: the
/// file may be anything a link points at, and its first bytes are not for a status message.
pub fn header_len(first8: &[u8]) -> Result<u64, String> {
    let b: [u8; 8] = first8
        .get(..8)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("only {} bytes: no safetensors header", first8.len()))?;
    let n = u64::from_le_bytes(b);
    if n < 2 {
        return Err("its first 8 bytes declare an empty header: not a safetensors file".into());
    }
    if n > HEADER_MAX {
        return Err(format!(
            "its first 8 bytes declare a header longer than {HEADER_MAX} bytes: not a safetensors file"
        ));
    }
    Ok(n)
}

/// One tensor's entry as far as the check needs it; `dtype`, `shape` and anything else are
/// skipped without being kept.
#[derive(serde::Deserialize)]
struct Tensor {
    #[serde(default)]
    data_offsets: Option<Vec<serde_json::Number>>,
}

/// The header, streamed: one tensor entry at a time, so memory is one entry, not the tree of a
/// 100 MB header (a `serde_json::Value` of one took about 3 GB).
struct Streamed(Result<Header, String>);

impl<'de> serde::Deserialize<'de> for Streamed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Streamed, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Streamed;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object of tensors")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Streamed, A::Error> {
                let mut h = Header {
                    tensors: 0,
                    data_end: 0,
                };
                let mut first_problem = None;
                while let Some(name) = m.next_key::<String>()? {
                    if name == "__metadata__" {
                        m.next_value::<serde::de::IgnoredAny>()?;
                        continue;
                    }
                    let t: Tensor = m.next_value()?;
                    if first_problem.is_some() {
                        continue;
                    }
                    match offsets(&name, &t) {
                        Ok((_, e)) => {
                            h.tensors += 1;
                            h.data_end = h.data_end.max(e);
                        }
                        Err(p) => first_problem = Some(p),
                    }
                }
                Ok(Streamed(first_problem.map_or(Ok(h), Err)))
            }
        }
        d.deserialize_map(V)
    }
}

/// A tensor's `[begin, end]`, checked.
fn offsets(name: &str, t: &Tensor) -> Result<(u64, u64), String> {
    let name = crate::text::sanitize(name, 120);
    let off = t
        .data_offsets
        .as_ref()
        .filter(|a| a.len() == 2)
        .ok_or_else(|| format!("tensor {name}: no data_offsets [begin, end]"))?;
    let (Some(b), Some(e)) = (off[0].as_u64(), off[1].as_u64()) else {
        return Err(format!("tensor {name}: data_offsets are not numbers"));
    };
    if b > e {
        return Err(format!(
            "tensor {name}: data_offsets [{b}, {e}] end before they begin"
        ));
    }
    Ok((b, e))
}

/// Parses the header JSON (the bytes after the length), one entry at a time.
pub fn parse_header(bytes: &[u8]) -> Result<Header, String> {
    let Streamed(h) = serde_json::from_slice::<Streamed>(bytes).map_err(|e| {
        if e.is_data() && e.to_string().starts_with("invalid type") {
            "header is not a JSON object of tensors".to_string()
        } else {
            format!("header is not valid JSON: {e}")
        }
    })?;
    h
}

/// A valid shard holding one `U8` tensor of `data` bytes (tests and the simulated host).
pub fn shard_bytes_header(name: &str, data: u64) -> Vec<u8> {
    let json = serde_json::json!({
        "__metadata__": {"format": "pt"},
        name: {"dtype": "U8", "shape": [data], "data_offsets": [0, data]},
    })
    .to_string();
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out
}
