//! Conversions between core types and JavaScript values: errors, plain objects, numbers, data
//! type names and typed arrays. No checkpoint logic lives here.

use js_sys::{Array, Object, Reflect};
use ortckpt_core::DataType;
use wasm_bindgen::JsValue;

/// The largest integer a JavaScript number holds exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// The name of `data_type` as numpy / ml_dtypes spell it (what the Python API shows): the core's
/// table ([`DataType::numpy_name`]).
pub fn dtype_name(data_type: DataType) -> &'static str {
    data_type.numpy_name()
}

/// The type named `name` (numpy's spelling, or ORT's upper-case one such as `FLOAT`).
pub fn dtype_from_name(name: &str) -> Result<DataType, JsValue> {
    DataType::ALL.into_iter().find(|t| t.numpy_name() == name || t.name() == name).ok_or_else(|| {
        let known: Vec<&str> = DataType::ALL.iter().map(|t| t.numpy_name()).collect();
        error(&format!("unknown data type {name:?}; use one of {}", known.join(", ")), "InvalidSpec")
    })
}

/// A JavaScript `Error` named `CheckpointError` with `message` and a `kind` property.
pub fn error(message: &str, kind: &str) -> JsValue {
    let e = js_sys::Error::new(message);
    e.set_name("CheckpointError");
    let _ = Reflect::set(&e, &"kind".into(), &kind.into());
    e.into()
}

/// The core's error as a JavaScript exception carrying its message and kind.
pub fn core_error(e: ortckpt_core::Error) -> JsValue {
    error(&e.to_string(), &format!("{:?}", e.kind()))
}

/// A plain object with `fields`.
pub fn object(fields: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in fields {
        let _ = Reflect::set(&o, &(*k).into(), v);
    }
    o.into()
}

/// An array of `items`.
pub fn array(items: impl IntoIterator<Item = JsValue>) -> JsValue {
    items.into_iter().collect::<Array>().into()
}

/// A 64-bit integer as a number when it is exact, otherwise as a BigInt.
pub fn int(v: i64) -> JsValue {
    if (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&v) {
        JsValue::from_f64(v as f64)
    } else {
        js_sys::BigInt::from(v).into()
    }
}

/// A tensor's elements as the typed array that holds them exactly: the integer arrays by width and
/// sign (64-bit ones as BigInt arrays), `Uint8Array` of 0/1 for bool, `Float64Array` for float64,
/// and `Float32Array` for float32 and the narrower floats (float16, bfloat16, float8: every value
/// is a float32 exactly). Complex numbers are interleaved (real, imaginary) in a float array.
pub fn typed_array(data_type: DataType, bytes: &[u8]) -> JsValue {
    macro_rules! typed {
        ($t:ty, $n:expr, $array:ty) => {{
            let values: Vec<$t> = bytes
                .chunks_exact($n)
                .map(|c| {
                    let mut le = [0u8; $n];
                    le.copy_from_slice(c);
                    <$t>::from_le_bytes(le)
                })
                .collect();
            <$array>::from(values.as_slice()).into()
        }};
    }
    match data_type {
        DataType::Uint8 | DataType::Bool => js_sys::Uint8Array::from(bytes).into(),
        DataType::Int8 => typed!(i8, 1, js_sys::Int8Array),
        DataType::Uint16 => typed!(u16, 2, js_sys::Uint16Array),
        DataType::Int16 => typed!(i16, 2, js_sys::Int16Array),
        DataType::Int32 => typed!(i32, 4, js_sys::Int32Array),
        DataType::Uint32 => typed!(u32, 4, js_sys::Uint32Array),
        DataType::Int64 => typed!(i64, 8, js_sys::BigInt64Array),
        DataType::Uint64 => typed!(u64, 8, js_sys::BigUint64Array),
        DataType::Float | DataType::Complex64 => typed!(f32, 4, js_sys::Float32Array),
        DataType::Double | DataType::Complex128 => typed!(f64, 8, js_sys::Float64Array),
        DataType::String => JsValue::NULL,
        // Exact: float16, bfloat16 and float8 values are all float32 values.
        narrow => {
            let values: Vec<f32> = crate::numbers::to_f64(narrow, bytes).iter().map(|&v| v as f32).collect();
            js_sys::Float32Array::from(values.as_slice()).into()
        }
    }
}
