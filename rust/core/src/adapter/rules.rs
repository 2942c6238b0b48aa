//! What the adapter format fixes beyond its schema, shared by the reader and the writer: the file
//! identifier and the rules ONNX Runtime applies to each parameter.

use crate::{DataType, Error, Result};

/// The flatbuffer file identifier of ORT adapter files.
pub const ADAPTER_FILE_IDENTIFIER: &[u8; 4] = b"TORT";

/// The rules ONNX Runtime applies to each adapter parameter beyond its structure (checked by
/// ORT 1.32 when it loads one): one shared check for the reader and the writer, so ortckpt writes
/// no adapter ORT refuses and accepts none.
pub(super) fn check_parameter(name: &str, data_type: DataType, dims: &[i64]) -> Result<()> {
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
