//! A tensor's little-endian element bytes as float64 numbers, for statistics and diffs.
//!
//! Floating types go through the core's exact conversions (`ortckpt_core::values`: float16, bfloat16
//! and float8 are float64 values exactly); integers and booleans are converted here (64-bit
//! integers beyond 2^53 round to the nearest float64, which statistics and diffs accept).

use ortckpt_core::values::{decode_into, Lanes};
use ortckpt_core::DataType;

/// Whether `data_type` has numbers to summarize (every type but strings and complex numbers).
pub fn is_real(data_type: DataType) -> bool {
    !matches!(data_type, DataType::String | DataType::Complex64 | DataType::Complex128)
}

/// Every element of `bytes` as float64 (whole elements only; the reader guarantees that tensor
/// ranges hold a whole number of elements). Empty for strings and complex numbers.
pub fn to_f64(data_type: DataType, bytes: &[u8]) -> Vec<f64> {
    macro_rules! ints {
        ($t:ty, $n:expr) => {
            bytes
                .chunks_exact($n)
                .map(|c| {
                    let mut le = [0u8; $n];
                    le.copy_from_slice(c);
                    <$t>::from_le_bytes(le) as f64
                })
                .collect()
        };
    }
    if !is_real(data_type) {
        return Vec::new();
    }
    if let Some(lanes) = Lanes::of(data_type) {
        let mut out = vec![0.0; bytes.len() / lanes.width()];
        decode_into(lanes, bytes, &mut out);
        return out;
    }
    match data_type {
        DataType::Uint8 | DataType::Bool => bytes.iter().map(|&b| f64::from(b)).collect(),
        DataType::Int8 => ints!(i8, 1),
        DataType::Uint16 => ints!(u16, 2),
        DataType::Int16 => ints!(i16, 2),
        DataType::Int32 => ints!(i32, 4),
        DataType::Uint32 => ints!(u32, 4),
        DataType::Int64 => ints!(i64, 8),
        DataType::Uint64 => ints!(u64, 8),
        _ => Vec::new(),
    }
}

/// Elements decoded at a time: statistics and diffs never hold a whole tensor as float64.
const CHUNK_ELEMENTS: usize = 8192;

/// The whole-element chunks of `bytes`, each of at most [`CHUNK_ELEMENTS`] elements.
pub fn chunks(data_type: DataType, bytes: &[u8]) -> std::slice::Chunks<'_, u8> {
    let size = data_type.element_size().unwrap_or(1).max(1) as usize;
    bytes.chunks(CHUNK_ELEMENTS * size)
}

/// Calls `each(value)` for every element of `bytes` as float64, a chunk at a time.
pub fn for_each(data_type: DataType, bytes: &[u8], each: &mut dyn FnMut(f64)) {
    for piece in chunks(data_type, bytes) {
        to_f64(data_type, piece).into_iter().for_each(&mut *each);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_floats_and_halves_convert_exactly() {
        assert_eq!(to_f64(DataType::Int16, &(-3i16).to_le_bytes()), vec![-3.0]);
        assert_eq!(to_f64(DataType::Uint64, &7u64.to_le_bytes()), vec![7.0]);
        assert_eq!(to_f64(DataType::Bool, &[0, 1]), vec![0.0, 1.0]);
        assert_eq!(to_f64(DataType::Float, &1.5f32.to_le_bytes()), vec![1.5]);
        // bfloat16 0x3fc0 is 1.5; float16 0x3e00 is 1.5
        assert_eq!(to_f64(DataType::Bfloat16, &0x3fc0u16.to_le_bytes()), vec![1.5]);
        assert_eq!(to_f64(DataType::Float16, &0x3e00u16.to_le_bytes()), vec![1.5]);
        assert!(to_f64(DataType::Complex64, &[0; 8]).is_empty());
        let many: Vec<u8> = (0..20_000u16).flat_map(|v| v.to_le_bytes()).collect();
        let mut seen = Vec::new();
        for_each(DataType::Uint16, &many, &mut |v| seen.push(v));
        assert_eq!(seen, (0..20_000).map(f64::from).collect::<Vec<_>>());
    }
}
