//! ONNX Runtime adapter files (`.onnx_adapter`, flatbuffer identifier `TORT`, ORT >= 1.20): the
//! Multi-LoRA format ORT, onnxruntime-web and onnxruntime-genai load to swap a model's weights per
//! request. A flat list of named tensors with two user version numbers; no optimizer state.
//!
//! * [`index_adapter`] checks an adapter held in memory in one pass (every number checked when it
//!   is read, no allocation sized by an unchecked value) and returns an [`AdapterIndex`].
//! * [`serialize_adapter`] writes one from [`AdapterParameterSpec`]s, in the layout ORT expects
//!   (tensor bytes 8-byte aligned, as the schema's `force_align` asks).
//! * [`read_adapter_file`] opens (regular files only) and reads a file, then indexes it.

#[cfg(any(test, feature = "test-support"))]
pub mod oracle;
mod read;
mod schema;
mod write;

use crate::{DataType, Error, Result};

pub use read::{index_adapter, AdapterIndex, AdapterParameter};
#[cfg(feature = "fs")]
pub use read::{read_adapter_file, AdapterFile};
pub use write::{serialize_adapter, AdapterParameterSpec};

/// The flatbuffer file identifier of ORT adapter files.
pub const ADAPTER_FILE_IDENTIFIER: &[u8; 4] = b"TORT";

/// The adapter format version ORT writes and the only one it reads (ORT 1.20 to today).
pub const ADAPTER_FORMAT_VERSION: i32 = 1;

/// The rules ONNX Runtime applies to each adapter parameter beyond its structure (checked by
/// ORT 1.32 when it loads one): one shared check for the reader and the writer, so ortckpt writes
/// no adapter ORT refuses and accepts none.
fn check_parameter(name: &str, data_type: DataType, dims: &[i64]) -> Result<()> {
    let detail = match data_type {
        DataType::String => "holds strings, which an adapter cannot store (raw_data only)",
        DataType::Bool | DataType::Complex64 | DataType::Complex128 => {
            "has a data type ONNX Runtime refuses in adapters (bool, complex64 and complex128 are refused)"
        }
        _ if dims.is_empty() => "is a scalar, which ONNX Runtime refuses in adapters; give it the shape [1]",
        _ => return Ok(()),
    };
    Err(Error::WrongStorage { tensor: name.to_owned(), detail })
}

#[cfg(test)]
mod tests;
