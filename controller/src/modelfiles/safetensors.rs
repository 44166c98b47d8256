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

/// The header length from a shard's first 8 bytes.
pub fn header_len(first8: &[u8]) -> Result<u64, String> {
    let b: [u8; 8] = first8
        .get(..8)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("only {} bytes: no safetensors header", first8.len()))?;
    let n = u64::from_le_bytes(b);
    if n < 2 {
        return Err(format!("header length {n}: not a safetensors file"));
    }
    if n > HEADER_MAX {
        return Err(format!(
            "header length {n} is more than {HEADER_MAX}: not a safetensors file"
        ));
    }
    Ok(n)
}

/// Parses the header JSON (the bytes after the length).
pub fn parse_header(bytes: &[u8]) -> Result<Header, String> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("header is not valid JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or("header is not a JSON object".to_string())?;
    let mut h = Header {
        tensors: 0,
        data_end: 0,
    };
    for (name, t) in obj {
        if name == "__metadata__" {
            continue;
        }
        let name = crate::text::sanitize(name, 120);
        let off = t
            .get("data_offsets")
            .and_then(|o| o.as_array())
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
        h.tensors += 1;
        h.data_end = h.data_end.max(e);
    }
    Ok(h)
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
