//! The safetensors dtypes an ONNX Runtime checkpoint can hold, with their numpy names.

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

const fn dtype(code: &'static str, name: &'static str, itemsize: u8) -> SafetensorsDtype {
    SafetensorsDtype { code, name, itemsize }
}

/// Every safetensors dtype read and written: the ones whose ONNX Runtime checkpoint type exists.
pub const SAFETENSORS_DTYPES: &[SafetensorsDtype] = &[
    dtype("BOOL", "bool", 1),
    dtype("U8", "uint8", 1),
    dtype("I8", "int8", 1),
    dtype("U16", "uint16", 2),
    dtype("I16", "int16", 2),
    dtype("U32", "uint32", 4),
    dtype("I32", "int32", 4),
    dtype("U64", "uint64", 8),
    dtype("I64", "int64", 8),
    dtype("F16", "float16", 2),
    dtype("F32", "float32", 4),
    dtype("F64", "float64", 8),
    dtype("C64", "complex64", 8),
    dtype("BF16", "bfloat16", 2),
    dtype("F8_E4M3", "float8_e4m3fn", 1),
    dtype("F8_E4M3FNUZ", "float8_e4m3fnuz", 1),
    dtype("F8_E5M2", "float8_e5m2", 1),
    dtype("F8_E5M2FNUZ", "float8_e5m2fnuz", 1),
];

pub(super) fn dtype_of(code: &str) -> Option<&'static SafetensorsDtype> {
    SAFETENSORS_DTYPES.iter().find(|d| d.code == code)
}
