//! safetensors files (Hugging Face's flat tensor format) checked before any tensor byte is used.
//!
//! The format (huggingface/safetensors): an 8-byte little-endian header length `N`, `N` bytes of
//! UTF-8 JSON — an object that starts with `{` (optionally padded with spaces), mapping each
//! tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}` plus an optional
//! `"__metadata__"` object of strings — then the data buffer. Offsets are relative to the buffer;
//! the tensors must cover it exactly, without gaps or overlaps, each range being shape × itemsize
//! bytes. The reference implementation refuses headers over 100,000,000 bytes; so do we.
//!
//! Budget: the header is parsed from the bytes in hand (no copy of it), straight into the entries
//! (no generic JSON tree), so the memory it takes is a small multiple of the header's length,
//! itself bounded by the file's size and [`SAFETENSORS_MAX_HEADER_BYTES`]. Ranks are capped at
//! [`SAFETENSORS_MAX_RANK`] (numpy's limit, where every tensor ends up).

mod dtypes;
pub(crate) mod error;
mod header;

pub use dtypes::{SafetensorsDtype, SAFETENSORS_DTYPES};
pub use error::{SafetensorsError, SafetensorsErrorKind};
pub use header::SAFETENSORS_MAX_RANK;

use std::collections::HashSet;

use crate::{wrong_kind_message, FileKind};

/// The longest JSON header read (the reference implementation's own limit).
pub const SAFETENSORS_MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor of a checked file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetensorsTensor {
    /// Its name (the header's key).
    pub name: String,
    /// Its dtype.
    pub dtype: &'static SafetensorsDtype,
    /// Its dims.
    pub shape: Vec<u64>,
    /// Where its bytes start, from the start of the file.
    pub offset: u64,
    /// How many bytes it holds: the product of `shape` × the dtype's itemsize.
    pub len: u64,
}

/// A checked safetensors file's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetensorsFile {
    /// The `__metadata__` pairs in file order (`None` when absent or null).
    pub metadata: Option<Vec<(String, String)>>,
    /// Every tensor, in the order of its bytes in the file.
    pub tensors: Vec<SafetensorsTensor>,
    /// Where the data buffer starts (8 + the header's length).
    pub data_start: u64,
}

/// Checks the safetensors file `bytes` (its whole content): the header length, the JSON header,
/// every entry, and that the tensors tile the data buffer exactly.
pub fn read_safetensors(bytes: &[u8]) -> crate::Result<SafetensorsFile> {
    Ok(check_safetensors(bytes)?)
}

/// [`read_safetensors`] with the format's own error.
fn check_safetensors(bytes: &[u8]) -> Result<SafetensorsFile, SafetensorsError> {
    let (json, data_start) = header_bytes(bytes).map_err(|e| {
        // a file of another kind (an ONNX model, a checkpoint, ...): what it is and what reads it
        match crate::sniff(bytes, bytes.len() as u64) {
            Some(found) if found != FileKind::Safetensors => SafetensorsError {
                kind: SafetensorsErrorKind::OtherFormat,
                tensor: None,
                detail: wrong_kind_message(FileKind::Safetensors, found),
            },
            _ => e,
        }
    })?;
    // serde_json's heap for the header is at most 6x its length (tests/safetensors_budget.rs)
    crate::alloc::probe(json.len().saturating_mul(6))
        .map_err(|e| SafetensorsError::malformed(None, e.to_string()))?;
    let parsed = header::parse(json)?;
    check_unique_names(&parsed.entries)?;
    let data_len = bytes.len() as u64 - data_start;
    let tensors = lay_out(parsed.entries, data_start, data_len)?;
    Ok(SafetensorsFile { metadata: parsed.metadata, tensors, data_start })
}

/// The JSON header of `bytes` and where the data starts.
fn header_bytes(bytes: &[u8]) -> Result<(&[u8], u64), SafetensorsError> {
    let fail = |detail: String| Err(SafetensorsError::malformed(None, detail));
    let Some((length, rest)) = bytes.split_first_chunk::<8>() else {
        return fail(format!("it is {} bytes long, shorter than the 8-byte header length", bytes.len()));
    };
    let size = u64::from_le_bytes(*length);
    if size > SAFETENSORS_MAX_HEADER_BYTES {
        return fail(format!(
            "its header claims {size} bytes, more than the limit of {SAFETENSORS_MAX_HEADER_BYTES}"
        ));
    }
    // size <= 100,000,000, so it fits usize.
    let Some(json) = rest.get(..size as usize) else {
        return fail(format!(
            "its header claims {size} bytes, but only {} follow the header length (truncated?)",
            rest.len()
        ));
    };
    if json.first() != Some(&b'{') {
        return fail("its header does not start with '{': it is not a JSON object".into());
    }
    Ok((json, 8 + size))
}

fn out_of_memory(entries: usize) -> SafetensorsError {
    SafetensorsError::malformed(None, format!("out of memory for the index of its {entries} tensors"))
}

fn check_unique_names(entries: &[header::Entry]) -> Result<(), SafetensorsError> {
    let mut seen = HashSet::new();
    seen.try_reserve(entries.len()).map_err(|_| out_of_memory(entries.len()))?;
    for entry in entries {
        if !seen.insert(entry.name.as_str()) {
            return Err(SafetensorsError::malformed(
                Some(entry.name.clone()),
                "its name appears twice in the header",
            ));
        }
    }
    Ok(())
}

/// Checks each entry's range against its shape and the buffer, then that the ranges, in order,
/// cover `data_len` bytes exactly.
fn lay_out(
    entries: Vec<header::Entry>,
    data_start: u64,
    data_len: u64,
) -> Result<Vec<SafetensorsTensor>, SafetensorsError> {
    let mut tensors = Vec::new();
    tensors.try_reserve(entries.len()).map_err(|_| out_of_memory(entries.len()))?;
    for header::Entry { name, dtype, shape, begin, end } in entries {
        if begin > end || end > data_len {
            return Err(SafetensorsError::malformed(
                Some(name),
                format!("its data_offsets [{begin}, {end}] are not a range of the {data_len} data bytes"),
            ));
        }
        let expected = shape.iter().try_fold(u64::from(dtype.itemsize), |n, &d| n.checked_mul(d));
        let len = end - begin;
        if expected != Some(len) {
            let wanted = expected.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string());
            return Err(SafetensorsError::malformed(
                Some(name),
                format!(
                    "it holds {len} bytes, its shape {shape:?} and dtype {} call for {wanted}",
                    dtype.code
                ),
            ));
        }
        tensors.push(SafetensorsTensor { name, dtype, shape, offset: data_start + begin, len });
    }
    tensors.sort_by_key(|t| (t.offset, t.len));
    let mut at = data_start;
    for tensor in &tensors {
        if tensor.offset != at {
            return Err(SafetensorsError::malformed(
                Some(tensor.name.clone()),
                format!(
                    "it starts at data byte {}, not at {} (overlap or gap)",
                    tensor.offset - data_start,
                    at - data_start
                ),
            ));
        }
        at += tensor.len;
    }
    if at - data_start != data_len {
        return Err(SafetensorsError::malformed(
            None,
            format!(
                "its tensors end at data byte {} but the file holds {data_len} (truncated or padded)",
                at - data_start
            ),
        ));
    }
    Ok(tensors)
}

#[cfg(test)]
mod tests;
