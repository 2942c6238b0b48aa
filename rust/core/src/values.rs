//! Reading tensor elements of every floating type as float64, and telling finite values apart:
//! the aggregation kernels and the browser viewer's statistics decode through here.
//!
//! Every conversion is exact: float16, bfloat16, float8 and float32 values are all float64 values.
//! Bytes are little-endian and need no alignment (`from_le_bytes` on each element).

use std::sync::OnceLock;

use crate::simd::avx2_dispatch;
use crate::DataType;

/// How an averaged tensor's elements are stored: the element kind, and how many float64 lanes each
/// element fills (2 for complex: real, then imaginary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lanes {
    /// float32 (one lane per element; complex64 is two of them).
    F32,
    /// float64 (complex128 is two of them).
    F64,
    /// IEEE half precision.
    F16,
    /// bfloat16: the upper half of a float32.
    Bf16,
    /// One of the four float8 formats (decoded through a 256-entry table).
    F8(F8),
}

/// The float8 formats ONNX defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F8 {
    /// E4M3, no infinities, NaN = S.1111.111.
    E4M3Fn,
    /// E4M3, bias 8, no infinities, the only NaN is 0x80 (no negative zero).
    E4M3Fnuz,
    /// E5M2, IEEE-like (infinities and NaNs at exponent 31).
    E5M2,
    /// E5M2, bias 16, no infinities, the only NaN is 0x80.
    E5M2Fnuz,
}

impl Lanes {
    /// The storage of an averageable type, `None` for every other type.
    pub fn of(data_type: DataType) -> Option<Lanes> {
        use DataType::*;
        Some(match data_type {
            Float | Complex64 => Lanes::F32,
            Double | Complex128 => Lanes::F64,
            Float16 => Lanes::F16,
            Bfloat16 => Lanes::Bf16,
            Float8E4M3Fn => Lanes::F8(F8::E4M3Fn),
            Float8E4M3Fnuz => Lanes::F8(F8::E4M3Fnuz),
            Float8E5M2 => Lanes::F8(F8::E5M2),
            Float8E5M2Fnuz => Lanes::F8(F8::E5M2Fnuz),
            _ => return None,
        })
    }

    /// Bytes per lane.
    pub fn width(self) -> usize {
        match self {
            Lanes::F32 => 4,
            Lanes::F64 => 8,
            Lanes::F16 | Lanes::Bf16 => 2,
            Lanes::F8(_) => 1,
        }
    }
}

/// The value of an IEEE half-precision number (exact).
pub fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let mant = f64::from(bits & 0x3ff);
    sign * match exp {
        0 => mant * 2f64.powi(-24),
        31 if mant == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + mant / 1024.0) * 2f64.powi(exp - 15),
    }
}

fn f8_value(format: F8, byte: u8) -> f64 {
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exp_bits, bias) = match format {
        F8::E4M3Fn => (4, 7),
        F8::E4M3Fnuz => (4, 8),
        F8::E5M2 => (5, 15),
        F8::E5M2Fnuz => (5, 16),
    };
    let mant_bits = 7 - exp_bits;
    let exp = i32::from((byte & 0x7f) >> mant_bits);
    let mant = f64::from(byte & ((1u8 << mant_bits) - 1));
    let scale = f64::from(1u8 << mant_bits);
    let nan = match format {
        F8::E4M3Fn => byte & 0x7f == 0x7f,
        F8::E4M3Fnuz | F8::E5M2Fnuz => byte == 0x80,
        F8::E5M2 => exp == 31 && mant != 0.0,
    };
    if nan {
        return f64::NAN;
    }
    if format == F8::E5M2 && exp == 31 {
        return sign * f64::INFINITY;
    }
    sign * if exp == 0 {
        mant / scale * 2f64.powi(1 - bias)
    } else {
        (1.0 + mant / scale) * 2f64.powi(exp - bias)
    }
}

/// The 256 values of a float8 format (NaN and infinities included).
pub fn f8_table(format: F8) -> &'static [f64; 256] {
    static TABLES: [OnceLock<[f64; 256]>; 4] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match format {
        F8::E4M3Fn => 0,
        F8::E4M3Fnuz => 1,
        F8::E5M2 => 2,
        F8::E5M2Fnuz => 3,
    };
    TABLES[slot].get_or_init(|| std::array::from_fn(|b| f8_value(format, b as u8)))
}

/// Calls `each(i, value)` for every lane of `bytes` (whole lanes only; `bytes.len()` is a multiple
/// of the width: the reader guarantees it for tensor ranges).
#[inline]
pub(crate) fn for_each(lanes: Lanes, bytes: &[u8], mut each: impl FnMut(usize, f64)) {
    match lanes {
        Lanes::F32 => {
            for (i, c) in bytes.chunks_exact(4).enumerate() {
                each(i, f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
            }
        }
        Lanes::F64 => {
            for (i, c) in bytes.chunks_exact(8).enumerate() {
                each(i, f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
            }
        }
        Lanes::F16 => {
            for (i, c) in bytes.chunks_exact(2).enumerate() {
                each(i, f16_to_f64(u16::from_le_bytes([c[0], c[1]])));
            }
        }
        Lanes::Bf16 => {
            for (i, c) in bytes.chunks_exact(2).enumerate() {
                each(i, f64::from(f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16)));
            }
        }
        Lanes::F8(format) => {
            let table = f8_table(format);
            for (i, &b) in bytes.iter().enumerate() {
                each(i, table[usize::from(b)]);
            }
        }
    }
}

avx2_dispatch! {
/// Whether every lane of `bytes` is finite, and the largest magnitude among them (0 when empty).
///
/// On the bit patterns: for every format here, ordering the magnitude bits (the pattern without
/// its sign) as integers orders the magnitudes, and the patterns whose exponent is all ones
/// (infinities, NaN) are exactly those at or above that exponent's pattern. So one integer
/// maximum tells both (the loop is integer-only and vectorizes); the largest pattern is decoded
/// once at the end.
pub(crate) fn scan / scan_avx2 (lanes: Lanes, bytes: &[u8]) -> (bool, f64) {
    macro_rules! top_bits {
        ($t:ty, $n:expr) => {{
            let mut top: $t = 0;
            for c in bytes.chunks_exact($n) {
                top = top.max(<$t>::from_le_bytes(c.try_into().unwrap_or([0; $n])) & !(1 << ($n * 8 - 1)));
            }
            top
        }};
    }
    match lanes {
        Lanes::F32 => {
            let top = top_bits!(u32, 4);
            (top < 0x7f80_0000, f64::from(f32::from_bits(top)))
        }
        Lanes::F64 => {
            let top = top_bits!(u64, 8);
            (top < 0x7ff0_0000_0000_0000, f64::from_bits(top))
        }
        Lanes::F16 => {
            let top = top_bits!(u16, 2);
            (top < 0x7c00, f16_to_f64(top))
        }
        Lanes::Bf16 => {
            let top = top_bits!(u16, 2);
            (top < 0x7f80, f64::from(f32::from_bits(u32::from(top) << 16)))
        }
        Lanes::F8(format) => {
            let table = f8_table(format);
            let mut finite = true;
            let mut largest = 0.0f64;
            for &b in bytes {
                let v = table[usize::from(b)];
                finite &= v.is_finite();
                largest = largest.max(v.abs());
            }
            (finite, largest)
        }
    }
}
}

avx2_dispatch! {
/// Every lane of `bytes` as float64 into `out` (as many as both have).
pub fn decode_into / decode_into_avx2 (lanes: Lanes, bytes: &[u8], out: &mut [f64]) {
    match lanes {
        Lanes::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f64::from(f32::from_le_bytes(c.try_into().unwrap_or([0; 4])));
            }
        }
        Lanes::F64 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(8)) {
                *o = f64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            }
        }
        _ => for_each(lanes, bytes, |i, v| {
            if let Some(o) = out.get_mut(i) {
                *o = v;
            }
        }),
    }
}
}

avx2_dispatch! {
/// `acc[i] += weight × lane i of bytes` for every lane (`acc` and `bytes` cover the same lanes).
pub(crate) fn add_scaled / add_scaled_avx2 (lanes: Lanes, bytes: &[u8], acc: &mut [f64], weight: f64) {
    match lanes {
        Lanes::F32 => {
            for (a, c) in acc.iter_mut().zip(bytes.chunks_exact(4)) {
                *a += weight * f64::from(f32::from_le_bytes(c.try_into().unwrap_or([0; 4])));
            }
        }
        Lanes::F64 => {
            for (a, c) in acc.iter_mut().zip(bytes.chunks_exact(8)) {
                *a += weight * f64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            }
        }
        Lanes::Bf16 => {
            for (a, c) in acc.iter_mut().zip(bytes.chunks_exact(2)) {
                let bits = u32::from(u16::from_le_bytes(c.try_into().unwrap_or([0; 2]))) << 16;
                *a += weight * f64::from(f32::from_bits(bits));
            }
        }
        Lanes::F16 | Lanes::F8(_) => for_each(lanes, bytes, |i, v| {
            if let Some(a) = acc.get_mut(i) {
                *a += weight * v;
            }
        }),
    }
}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_and_float8_values() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x7bff), 65504.0);
        assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
        assert!(f16_to_f64(0x7c00).is_infinite() && f16_to_f64(0x7e00).is_nan());
        let e4m3 = f8_table(F8::E4M3Fn);
        assert_eq!(e4m3[0x7e], 448.0);
        assert!(e4m3[0x7f].is_nan() && e4m3[0xff].is_nan());
        assert_eq!(e4m3[0x01], 2f64.powi(-9));
        let e5m2 = f8_table(F8::E5M2);
        assert_eq!(e5m2[0x7b], 57344.0);
        assert!(e5m2[0x7c].is_infinite() && e5m2[0x7d].is_nan());
        assert!(f8_table(F8::E4M3Fnuz)[0x80].is_nan() && f8_table(F8::E5M2Fnuz)[0x80].is_nan());
        assert_eq!(f8_table(F8::E4M3Fnuz)[0x7f], 240.0);
        assert_eq!(f8_table(F8::E5M2Fnuz)[0x7f], 57344.0);
        assert_eq!(scan(Lanes::F32, &1.5f32.to_le_bytes()), (true, 1.5));
        assert!(!scan(Lanes::F32, &f32::NAN.to_le_bytes()).0);
    }

    #[test]
    fn scan_tells_the_largest_finite_from_infinities_and_nans() {
        // (format, largest finite, +inf, a NaN) as little-endian patterns; negatives by sign bit
        type Case = (Lanes, Vec<u8>, Vec<u8>, Vec<u8>, f64);
        let cases: [Case; 4] = [
            (
                Lanes::F32,
                f32::MAX.to_le_bytes().to_vec(),
                f32::INFINITY.to_le_bytes().to_vec(),
                f32::NAN.to_le_bytes().to_vec(),
                f64::from(f32::MAX),
            ),
            (
                Lanes::F64,
                f64::MAX.to_le_bytes().to_vec(),
                f64::INFINITY.to_le_bytes().to_vec(),
                f64::NAN.to_le_bytes().to_vec(),
                f64::MAX,
            ),
            (
                Lanes::F16,
                0x7bffu16.to_le_bytes().to_vec(),
                0x7c00u16.to_le_bytes().to_vec(),
                0x7c01u16.to_le_bytes().to_vec(),
                65504.0,
            ),
            (
                Lanes::Bf16,
                0x7f7fu16.to_le_bytes().to_vec(),
                0x7f80u16.to_le_bytes().to_vec(),
                0x7fc0u16.to_le_bytes().to_vec(),
                f64::from(f32::from_bits(0x7f7f_0000)),
            ),
        ];
        for (lanes, max, inf, nan, want) in cases {
            let width = lanes.width();
            let negative = |b: &[u8]| {
                let mut b = b.to_vec();
                b[width - 1] |= 0x80;
                b
            };
            // many lanes, so the vectorized loop and its tail both see the odd value
            for at in [0, 5, 37] {
                let mut bytes = vec![0u8; 40 * width];
                bytes[at * width..(at + 1) * width].copy_from_slice(&negative(&max));
                assert_eq!(scan(lanes, &bytes), (true, want), "{lanes:?}");
                for bad in [&inf, &negative(&inf), &nan, &negative(&nan)] {
                    bytes[at * width..(at + 1) * width].copy_from_slice(bad);
                    assert!(!scan(lanes, &bytes).0, "{lanes:?} at {at}");
                }
            }
        }
        assert_eq!(scan(Lanes::F32, &[]), (true, 0.0));
    }
}
