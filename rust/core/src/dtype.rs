//! ORT's `TensorDataType` enum as a closed Rust enum: the one table of the types, their codes,
//! ORT's and numpy's names and their element sizes, which the Python binding (`DATA_TYPES`) and
//! the browser viewer read rather than keep their own.

/// A tensor element type, numbered as ORT's `TensorDataType` (and ONNX's `TensorProto.DataType`).
/// `UNDEFINED` (0) is not a valid tensor type and has no variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum DataType {
    /// 32-bit IEEE float.
    Float = 1,
    /// Unsigned 8-bit integer.
    Uint8 = 2,
    /// Signed 8-bit integer.
    Int8 = 3,
    /// Unsigned 16-bit integer.
    Uint16 = 4,
    /// Signed 16-bit integer.
    Int16 = 5,
    /// Signed 32-bit integer.
    Int32 = 6,
    /// Signed 64-bit integer.
    Int64 = 7,
    /// UTF-8 string (stored as `string_data`, not `raw_data`).
    String = 8,
    /// Boolean, one byte.
    Bool = 9,
    /// 16-bit IEEE float.
    Float16 = 10,
    /// 64-bit IEEE float.
    Double = 11,
    /// Unsigned 32-bit integer.
    Uint32 = 12,
    /// Unsigned 64-bit integer.
    Uint64 = 13,
    /// Complex of two 32-bit floats.
    Complex64 = 14,
    /// Complex of two 64-bit floats.
    Complex128 = 15,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    Bfloat16 = 16,
    /// 8-bit float E4M3, finite only (no infinities).
    Float8E4M3Fn = 17,
    /// 8-bit float E4M3, finite only, no negative zero.
    Float8E4M3Fnuz = 18,
    /// 8-bit float E5M2.
    Float8E5M2 = 19,
    /// 8-bit float E5M2, finite only, no negative zero.
    Float8E5M2Fnuz = 20,
}

impl DataType {
    /// Every variant, in code order.
    pub const ALL: [DataType; 20] = [
        DataType::Float,
        DataType::Uint8,
        DataType::Int8,
        DataType::Uint16,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::String,
        DataType::Bool,
        DataType::Float16,
        DataType::Double,
        DataType::Uint32,
        DataType::Uint64,
        DataType::Complex64,
        DataType::Complex128,
        DataType::Bfloat16,
        DataType::Float8E4M3Fn,
        DataType::Float8E4M3Fnuz,
        DataType::Float8E5M2,
        DataType::Float8E5M2Fnuz,
    ];

    /// The type with ORT code `code`, or `None` for 0 (UNDEFINED) and unknown codes.
    pub fn from_code(code: i32) -> Option<DataType> {
        // `ALL` is in code order from 1 (tested below).
        let position = usize::try_from(code).ok()?.checked_sub(1)?;
        DataType::ALL.get(position).copied()
    }

    /// ORT's (and ONNX's) numeric code of the type.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// Bytes per element, or `None` for strings (stored as `string_data`, not `raw_data`).
    pub const fn element_size(self) -> Option<u64> {
        use DataType::*;
        match self {
            String => None,
            Uint8 | Int8 | Bool | Float8E4M3Fn | Float8E4M3Fnuz | Float8E5M2 | Float8E5M2Fnuz => Some(1),
            Uint16 | Int16 | Float16 | Bfloat16 => Some(2),
            Float | Int32 | Uint32 => Some(4),
            Int64 | Double | Uint64 | Complex64 => Some(8),
            Complex128 => Some(16),
        }
    }

    /// The type's name as numpy spells it (ml_dtypes for bfloat16 and the float8 types), what the
    /// Python API and the viewer show: `float32`, `bfloat16`, `float8_e4m3fn`; `string` for strings
    /// (which numpy holds as objects).
    pub const fn numpy_name(self) -> &'static str {
        use DataType::*;
        match self {
            Float => "float32",
            Uint8 => "uint8",
            Int8 => "int8",
            Uint16 => "uint16",
            Int16 => "int16",
            Int32 => "int32",
            Int64 => "int64",
            String => "string",
            Bool => "bool",
            Float16 => "float16",
            Double => "float64",
            Uint32 => "uint32",
            Uint64 => "uint64",
            Complex64 => "complex64",
            Complex128 => "complex128",
            Bfloat16 => "bfloat16",
            Float8E4M3Fn => "float8_e4m3fn",
            Float8E4M3Fnuz => "float8_e4m3fnuz",
            Float8E5M2 => "float8_e5m2",
            Float8E5M2Fnuz => "float8_e5m2fnuz",
        }
    }

    /// ORT's spelling of the type, as in the schema.
    pub const fn name(self) -> &'static str {
        use DataType::*;
        match self {
            Float => "FLOAT",
            Uint8 => "UINT8",
            Int8 => "INT8",
            Uint16 => "UINT16",
            Int16 => "INT16",
            Int32 => "INT32",
            Int64 => "INT64",
            String => "STRING",
            Bool => "BOOL",
            Float16 => "FLOAT16",
            Double => "DOUBLE",
            Uint32 => "UINT32",
            Uint64 => "UINT64",
            Complex64 => "COMPLEX64",
            Complex128 => "COMPLEX128",
            Bfloat16 => "BFLOAT16",
            Float8E4M3Fn => "FLOAT8E4M3FN",
            Float8E4M3Fnuz => "FLOAT8E4M3FNUZ",
            Float8E5M2 => "FLOAT8E5M2",
            Float8E5M2Fnuz => "FLOAT8E5M2FNUZ",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::fbs::TensorDataType;

    #[test]
    fn codes_match_the_generated_schema_enum() {
        for t in DataType::ALL {
            let generated = TensorDataType(t.code());
            assert_eq!(generated.variant_name(), Some(t.name()));
        }
        assert_eq!(DataType::from_code(0), None);
        assert_eq!(DataType::from_code(21), None);
        assert_eq!(DataType::from_code(-1), None);
        assert_eq!(TensorDataType::ENUM_MAX, 20);
        for (i, t) in DataType::ALL.iter().enumerate() {
            assert_eq!(t.code() as usize, i + 1);
            assert_eq!(DataType::from_code(t.code()), Some(*t));
        }
    }

    #[test]
    fn numpy_names_are_unique_and_lower_case() {
        let names: std::collections::HashSet<&str> = DataType::ALL.iter().map(|t| t.numpy_name()).collect();
        assert_eq!(names.len(), DataType::ALL.len());
        for t in DataType::ALL {
            assert_eq!(t.numpy_name(), t.numpy_name().to_ascii_lowercase());
        }
        assert_eq!(DataType::Double.numpy_name(), "float64");
        assert_eq!(DataType::Float8E5M2Fnuz.numpy_name(), "float8_e5m2fnuz");
    }

    #[test]
    fn element_sizes() {
        assert_eq!(DataType::Float.element_size(), Some(4));
        assert_eq!(DataType::Complex128.element_size(), Some(16));
        assert_eq!(DataType::Bfloat16.element_size(), Some(2));
        assert_eq!(DataType::String.element_size(), None);
    }
}
