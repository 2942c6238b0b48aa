//! The vocabulary of the robust reducers ([`super::columns`] for few uploads, [`super::select`] for
//! many): a block of rows (one per upload) in memory, the statistic asked of its columns, the
//! sorting network that orders a tile's columns, the per-row sums (squares, distances to the
//! result) with their partial-sum dot products, and the tiles dealt to the threads.

#[cfg(target_arch = "x86_64")]
use crate::simd::{simd_level, SimdLevel};
use crate::values::{decode_into, Lanes};

/// A coordinate-wise statistic of `reduce_block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Statistic {
    /// numpy's median: the middle value, or the mean of the two middle values for even N.
    Median,
    /// The mean without the `cut` smallest and `cut` largest values (summed in the order a pruned
    /// sorting network leaves them up to 32 uploads, ascending below 64, else in selection order:
    /// the same values as Flower/scipy, which add in partition order; rounding may differ in the
    /// last place of float64).
    TrimmedMean(usize),
}

/// Batcher's odd-even merge sort for `n` inputs (any `n`): the compare-exchange pairs, in order.
pub(super) fn network(n: usize) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    let mut p = 1;
    while p < n {
        let mut k = p;
        while k >= 1 {
            let mut j = k % p;
            while j + k < n {
                for i in 0..k.min(n - j - k) {
                    if (i + j) / (2 * p) == (i + j + k) / (2 * p) {
                        pairs.push((i + j, i + j + k));
                    }
                }
                j += 2 * k;
            }
            k /= 2;
        }
        p *= 2;
    }
    pairs
}

/// Only the comparators of `pairs` that the values of rows `keep` depend on: working backwards,
/// a comparator whose two rows are not needed later cannot change a needed row.
pub(super) fn pruned(pairs: &[(usize, usize)], n: usize, keep: &[usize]) -> Vec<(usize, usize)> {
    let mut needed = vec![false; n];
    keep.iter().for_each(|&r| needed.get_mut(r).into_iter().for_each(|k| *k = true));
    let mut kept: Vec<(usize, usize)> = Vec::with_capacity(pairs.len());
    for &(a, b) in pairs.iter().rev() {
        if needed.get(a).copied().unwrap_or(false) || needed.get(b).copied().unwrap_or(false) {
            needed.get_mut(a).into_iter().for_each(|k| *k = true);
            needed.get_mut(b).into_iter().for_each(|k| *k = true);
            kept.push((a, b));
        }
    }
    kept.reverse();
    kept
}

/// A value of a tile that the sorting network orders: float64, or float32 for uploads that store
/// float32. A network only moves values, and float32's order is that of the same values in
/// float64, so a float32 tile gives the statistic bit for bit, with twice the columns per
/// instruction and half the bytes in cache.
pub(super) trait TileValue: Copy + Default + Into<f64> + PartialOrd + Send + Sync {
    /// `(ra[i], rb[i]) = (min, max)` of the two, for finite values: compares and selects, which
    /// need none of the NaN handling `min`/`max` compile to. Of two equal values (-0.0 and 0.0
    /// among them) both rows get the second, in every version (the same bits at every SIMD level).
    fn exchange(ra: &mut [Self], rb: &mut [Self]);
}

/// The plain [`TileValue::exchange`] (every type, every level).
#[inline(always)]
fn exchange_plain<T: TileValue>(ra: &mut [T], rb: &mut [T]) {
    for (u, v) in ra.iter_mut().zip(rb.iter_mut()) {
        let (x, y) = (*u, *v);
        // `minpd`/`maxpd`'s own rule (the second operand unless the first is strictly below /
        // above it), so every level gives the same bits, zeros' signs included
        (*u, *v) = (if x < y { x } else { y }, if x > y { x } else { y });
    }
}

/// [`TileValue`] for one type: the AVX2 exchange, a vector of columns at a time, where the CPU
/// has it, else the plain one. Written with the intrinsics: with AVX2 enabled, the compiler turns
/// the plain loop's selects into masked stores (`vmaskmovpd`), a third of the speed of
/// `vminpd`/`vmaxpd` here.
macro_rules! tile_value {
    ($t:ty, $avx2:ident, $lanes:literal, $load:ident, $store:ident, $min:ident, $max:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn $avx2(ra: &mut [$t], rb: &mut [$t]) {
            use std::arch::x86_64::{$load, $max, $min, $store};
            let mut ca = ra.chunks_exact_mut($lanes);
            let mut cb = rb.chunks_exact_mut($lanes);
            for (u, v) in (&mut ca).zip(&mut cb) {
                // SAFETY: `u` and `v` are one vector of consecutive values each
                // (chunks_exact_mut), so the pointers are valid for an unaligned 32-byte load and
                // store; they do not overlap (two &mut slices).
                unsafe {
                    let (x, y) = ($load(u.as_ptr()), $load(v.as_ptr()));
                    $store(u.as_mut_ptr(), $min(x, y));
                    $store(v.as_mut_ptr(), $max(x, y));
                }
            }
            exchange_plain(ca.into_remainder(), cb.into_remainder());
        }

        impl TileValue for $t {
            #[inline(always)]
            fn exchange(ra: &mut [$t], rb: &mut [$t]) {
                #[cfg(target_arch = "x86_64")]
                if simd_level() >= SimdLevel::Avx2 {
                    // SAFETY: the level is AVX2 or higher only when the CPU has AVX2, all the
                    // function requires.
                    return unsafe { $avx2(ra, rb) };
                }
                exchange_plain(ra, rb)
            }
        }
    };
}

tile_value!(f64, exchange_f64_avx2, 4, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_min_pd, _mm256_max_pd);
tile_value!(f32, exchange_f32_avx2, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_min_ps, _mm256_max_ps);

/// Sorts each column of the row-major `rows × w` tile (finite values) with `pairs`.
#[inline(always)]
pub(super) fn sort_tile<T: TileValue>(tile: &mut [T], w: usize, pairs: &[(usize, usize)]) {
    for &(a, b) in pairs {
        let (head, tail) = tile.split_at_mut(b * w);
        let (Some(ra), Some(rb)) = (head.get_mut(a * w..(a + 1) * w), tail.get_mut(..w)) else { continue };
        T::exchange(ra, rb);
    }
}

/// `out` cut into tiles of `tile` columns (numbered from 0), dealt in runs to one group per thread.
pub(super) fn tiles_per_thread(out: &mut [f64], tile: usize) -> Vec<Vec<(usize, &mut [f64])>> {
    let work: Vec<(usize, &mut [f64])> = out.chunks_mut(tile).enumerate().collect();
    let share = work.len().div_ceil(crate::parallel::threads()).max(1);
    let mut groups = Vec::new();
    let mut work = work.into_iter();
    loop {
        let group: Vec<_> = work.by_ref().take(share).collect();
        if group.is_empty() {
            return groups;
        }
        groups.push(group);
    }
}

/// A row-major `n × c` block of values in memory: float64, or as the uploads store them (one
/// element kind for the whole block, decoded to float64 as rows are copied into a tile).
#[derive(Clone, Copy)]
pub(super) enum Rows<'a> {
    /// float64 values.
    F64(&'a [f64]),
    /// Stored values: their bytes and how to read them.
    Stored(&'a [u8], Lanes),
}

impl Rows<'_> {
    /// Columns `c0..c0 + dst.len()` of row `r` (of `c` columns) as float64 into `dst`; NaN for a
    /// range outside the block (callers check the block's size first).
    #[inline]
    pub(super) fn fill(&self, r: usize, c: usize, c0: usize, dst: &mut [f64]) {
        let (first, w) = (r * c + c0, dst.len());
        match *self {
            Rows::F64(x) => match x.get(first..first + w) {
                Some(row) => dst.copy_from_slice(row),
                None => dst.fill(f64::NAN),
            },
            Rows::Stored(bytes, lanes) => {
                let k = lanes.width();
                match bytes.get(first * k..(first + w) * k) {
                    Some(row) => decode_into(lanes, row, dst),
                    None => dst.fill(f64::NAN),
                }
            }
        }
    }

    /// Asks the CPU to bring columns `c0..c0 + w` of row `r` (of `c` columns) into cache, for a
    /// [`Rows::fill`] soon after: the block is larger than the caches and its rows lie far apart,
    /// so without it each row's copy waits for memory (a sixth of a median over 1,000 uploads).
    #[inline(always)]
    pub(super) fn prefetch(&self, r: usize, c: usize, c0: usize, w: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            let (bytes, k): (&[u8], usize) = match *self {
                Rows::F64(x) => (bytemuck_f64(x), 8),
                Rows::Stored(bytes, lanes) => (bytes, lanes.width()),
            };
            let (first, end) = ((r * c + c0) * k, ((r * c + c0 + w) * k).min(bytes.len()));
            let mut at = first;
            while at < end {
                // SAFETY: a prefetch is only a hint: it never faults and changes no data; the
                // address is inside `bytes` (`at < end <= bytes.len()`).
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        bytes.as_ptr().add(at).cast(),
                    )
                };
                at += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (r, c, c0, w);
    }

    /// [`Rows::fill`] as float32, for a block stored as float32 (NaN otherwise: callers pick
    /// float32 tiles only for those).
    #[inline]
    pub(super) fn fill_f32(&self, r: usize, c: usize, c0: usize, dst: &mut [f32]) {
        let (first, w) = (r * c + c0, dst.len());
        match *self {
            Rows::Stored(bytes, Lanes::F32) => match bytes.get(first * 4..(first + w) * 4) {
                Some(row) => {
                    for (o, v) in dst.iter_mut().zip(row.chunks_exact(4)) {
                        *o = f32::from_le_bytes(v.try_into().unwrap_or([0; 4]));
                    }
                }
                None => dst.fill(f32::NAN),
            },
            _ => dst.fill(f32::NAN),
        }
    }
}

/// The bytes of float64 values (for [`Rows::prefetch`]'s addresses only).
#[cfg(target_arch = "x86_64")]
fn bytemuck_f64(x: &[f64]) -> &[u8] {
    // SAFETY: any f64 is 8 initialized bytes, u8 has no alignment, and the length covers the
    // same memory; the slice borrows `x` for as long.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

/// Per-thread sums of the reductions: each row's squares and squared gaps.
pub(super) type RowSums = (Vec<f64>, Vec<f64>);

/// Independent partial sums of [`dot`] and [`squared_distance`]: one serial float sum waits
/// for each addition before the next (4 cycles a value); several run side by side and vectorize.
/// The order differs from a serial sum in rounding only (these are the report's diagnostics).
const PARTIALS: usize = 8;

/// `Σ aᵢ·bᵢ` over the common length.
#[inline(always)]
pub(super) fn dot<T: Copy + Into<f64>>(a: &[T], b: &[T]) -> f64 {
    let mut part = [0.0f64; PARTIALS];
    let (ca, cb) = (a.chunks_exact(PARTIALS), b.chunks_exact(PARTIALS));
    let tail: f64 = ca.remainder().iter().zip(cb.remainder()).map(|(&x, &y)| x.into() * y.into()).sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..PARTIALS {
            part[k] += x[k].into() * y[k].into();
        }
    }
    part.iter().sum::<f64>() + tail
}

/// `Σ (aᵢ - bᵢ)²` over the common length.
#[inline(always)]
pub(super) fn squared_distance<T: Copy + Into<f64>>(a: &[T], b: &[f64]) -> f64 {
    let mut part = [0.0f64; PARTIALS];
    let (ca, cb) = (a.chunks_exact(PARTIALS), b.chunks_exact(PARTIALS));
    let tail: f64 =
        ca.remainder().iter().zip(cb.remainder()).map(|(&x, y)| (x.into() - y) * (x.into() - y)).sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..PARTIALS {
            let d = x[k].into() - y[k];
            part[k] += d * d;
        }
    }
    part.iter().sum::<f64>() + tail
}

/// Adds the threads' [`RowSums`] into `squares` and `gaps`.
pub(super) fn add_row_sums(partials: Vec<RowSums>, squares: &mut [f64], gaps: &mut [f64]) {
    for (sq, gp) in partials {
        squares.iter_mut().zip(sq).for_each(|(s, v)| *s += v);
        gaps.iter_mut().zip(gp).for_each(|(g, v)| *g += v);
    }
}
