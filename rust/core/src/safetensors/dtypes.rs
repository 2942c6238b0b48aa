//! The safetensors dtypes an ONNX Runtime checkpoint can hold, with their numpy names.

use crate::DataType;

/// One safetensors dtype an ONNX Runtime checkpoint can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SafetensorsDtype {
    /// Its safetensors code (`"F32"`).
    pub code: &'static str,
    /// Its numpy (or ml_dtypes, for bfloat16 and float8) name (`"float32"`).
    pub name: &'static str,
    /// Bytes per element.
    pub itemsize: u8,
}

/// The dtype `code` holding values of `data_type`: its name and size are the core's
/// ([`DataType::numpy_name`], [`DataType::element_size`]).
const fn dtype(code: &'static str, data_type: DataType) -> SafetensorsDtype {
    let itemsize = match data_type.element_size() {
        Some(size) => size as u8,
        None => 0,
    };
    SafetensorsDtype { code, name: data_type.numpy_name(), itemsize }
}

/// Every safetensors dtype read and written: the ones whose ONNX Runtime checkpoint type exists.
pub const SAFETENSORS_DTYPES: &[SafetensorsDtype] = &[
    dtype("BOOL", DataType::Bool),
    dtype("U8", DataType::Uint8),
    dtype("I8", DataType::Int8),
    dtype("U16", DataType::Uint16),
    dtype("I16", DataType::Int16),
    dtype("U32", DataType::Uint32),
    dtype("I32", DataType::Int32),
    dtype("U64", DataType::Uint64),
    dtype("I64", DataType::Int64),
    dtype("F16", DataType::Float16),
    dtype("F32", DataType::Float),
    dtype("F64", DataType::Double),
    dtype("C64", DataType::Complex64),
    dtype("BF16", DataType::Bfloat16),
    dtype("F8_E4M3", DataType::Float8E4M3Fn),
    dtype("F8_E4M3FNUZ", DataType::Float8E4M3Fnuz),
    dtype("F8_E5M2", DataType::Float8E5M2),
    dtype("F8_E5M2FNUZ", DataType::Float8E5M2Fnuz),
];

pub(super) fn dtype_of(code: &str) -> Option<&'static SafetensorsDtype> {
    SAFETENSORS_DTYPES.iter().find(|d| d.code == code)
}
