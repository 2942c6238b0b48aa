//! Coordinate-wise robust statistics over an `N × chunk` block of values (one row per upload,
//! row-major): the median and the trimmed mean of each column, spread over the cores.

use super::select::{many_tiles, Plan};
use super::simd::avx2_dispatch;
use super::values::{decode_into, Lanes};
use crate::parallel::in_parallel;
use crate::Error;

/// Columns per piece of parallel work.
const COLUMNS: usize = 4096;

fn per_column(x: &[f64], n: usize, out: &mut [f64], stat: impl Fn(&mut [f64]) -> f64 + Sync) {
    let c = out.len();
    let work: Vec<(usize, &mut [f64])> = out.chunks_mut(COLUMNS).enumerate().collect();
    let stat = &stat;
    in_parallel(work, x.len() * 8, |(piece, cols)| {
        let mut column = vec![0.0f64; n];
        for (j, o) in cols.iter_mut().enumerate() {
            let col = piece * COLUMNS + j;
            for (row, v) in column.iter_mut().enumerate() {
                *v = x.get(row * c + col).copied().unwrap_or(f64::NAN);
            }
            *o = stat(&mut column);
        }
    });
}

/// numpy's median of each column: the middle value, or the mean of the two middle values.
pub fn median_columns(x: &[f64], n: usize, out: &mut [f64]) {
    if n == 0 {
        return;
    }
    per_column(x, n, out, |column| {
        column.sort_unstable_by(f64::total_cmp);
        let hi = column.get(n / 2).copied().unwrap_or(f64::NAN);
        if n % 2 == 1 {
            hi
        } else {
            let lo = column.get(n / 2 - 1).copied().unwrap_or(f64::NAN);
            (lo + hi) / 2.0
        }
    });
}

/// The mean of each column without its `cut` smallest and `cut` largest values, added in
/// ascending order (Flower/scipy add them in partition order: the same values, rounding may
/// differ in the last place of float64).
pub fn trimmed_mean_columns(x: &[f64], n: usize, cut: usize, out: &mut [f64]) {
    if n <= 2 * cut {
        out.fill(f64::NAN);
        return;
    }
    let kept = (n - 2 * cut) as f64;
    per_column(x, n, out, |column| {
        column.sort_unstable_by(f64::total_cmp);
        column.get(cut..n - cut).unwrap_or_default().iter().sum::<f64>() / kept
    });
}

/// A coordinate-wise statistic of [`reduce_block`].
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

/// Up to this many uploads, columns are sorted by a sorting network run on whole rows at once
/// (branch-free min/max across a tile of columns: vectorized), not one column at a time.
pub const NETWORK_UP_TO: usize = 32;

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
fn pruned(pairs: &[(usize, usize)], n: usize, keep: &[usize]) -> Vec<(usize, usize)> {
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

/// Sorts each column of the row-major `rows × w` tile (finite values) with `pairs`.
#[inline(always)]
pub(super) fn sort_tile(tile: &mut [f64], w: usize, pairs: &[(usize, usize)]) {
    for &(a, b) in pairs {
        let (head, tail) = tile.split_at_mut(b * w);
        let (Some(ra), Some(rb)) = (head.get_mut(a * w..(a + 1) * w), tail.get_mut(..w)) else { continue };
        exchange(ra, rb);
    }
}

/// `(ra[i], rb[i]) = (min, max)` of the two, for finite values: a compare and two selects, which
/// need none of the NaN handling `f64::min`/`max` compile to (baseline x86-64: minpd/maxpd).
#[inline(always)]
fn exchange(ra: &mut [f64], rb: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (just checked), all `exchange_avx2` requires.
        return unsafe { exchange_avx2(ra, rb) };
    }
    for (u, v) in ra.iter_mut().zip(rb.iter_mut()) {
        let (x, y) = (*u, *v);
        let lower = x < y;
        (*u, *v) = (if lower { x } else { y }, if lower { y } else { x });
    }
}

/// [`exchange`] with AVX2, four columns at a time. Written with the intrinsics: with AVX2
/// enabled, the compiler turns the plain loop's selects into masked stores (`vmaskmovpd`), a
/// third of the speed of `vminpd`/`vmaxpd` here. Of two equal values (-0.0 and 0.0 among them)
/// both rows get the second: the same numbers, zeros' signs aside.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn exchange_avx2(ra: &mut [f64], rb: &mut [f64]) {
    use std::arch::x86_64::{_mm256_loadu_pd, _mm256_max_pd, _mm256_min_pd, _mm256_storeu_pd};
    let mut ca = ra.chunks_exact_mut(4);
    let mut cb = rb.chunks_exact_mut(4);
    for (u, v) in (&mut ca).zip(&mut cb) {
        // SAFETY: `u` and `v` are 4 consecutive f64 each (chunks_exact_mut(4)), so the pointers are
        // valid for an unaligned 32-byte load and store; they do not overlap (two &mut slices).
        unsafe {
            let (x, y) = (_mm256_loadu_pd(u.as_ptr()), _mm256_loadu_pd(v.as_ptr()));
            _mm256_storeu_pd(u.as_mut_ptr(), _mm256_min_pd(x, y));
            _mm256_storeu_pd(v.as_mut_ptr(), _mm256_max_pd(x, y));
        }
    }
    for (u, v) in ca.into_remainder().iter_mut().zip(cb.into_remainder().iter_mut()) {
        let (x, y) = (*u, *v);
        (*u, *v) = (if x < y { x } else { y }, if x < y { y } else { x });
    }
}

/// `out` cut into tiles of `tile` columns (numbered from 0), dealt in runs to one group per thread.
fn tiles_per_thread(out: &mut [f64], tile: usize) -> Vec<Vec<(usize, &mut [f64])>> {
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

/// Fills `dst` with row `r`'s values from column `c0` (`buf`: the thread's scratch for reads);
/// on failure, the row and why.
pub(crate) type FillRow<'a> =
    dyn Fn(usize, usize, &mut [f64], &mut Vec<u8>) -> Result<(), (usize, Error)> + Sync + 'a;

/// Bytes of float64 rows a thread holds per read of [`reduce_few_rows`]: about its L2 cache.
const BAND_BYTES: usize = 1 << 20;

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

/// [`reduce_block`] for few uploads: rows copied into a tile, the tile sorted by the network,
/// the statistic read off the sorted rows. The network is pruned to the rows the statistic
/// needs in place: the middle ones for the median, the `cut` at each end for the trimmed mean
/// (which adds the rest in their rows' order).
fn reduce_few(
    x: Rows<'_>,
    n: usize,
    stat: Statistic,
    out: &mut [f64],
    squares: &mut [f64],
    gaps: &mut [f64],
) {
    let c = out.len();
    let fill = |r: usize, c0: usize, dst: &mut [f64], _: &mut Vec<u8>| {
        x.fill(r, c, c0, dst);
        Ok(())
    };
    // the block is in memory: no error can come from it
    let _ = reduce_few_rows(&fill, n, stat, out, squares, gaps);
}

/// [`reduce_few`] over rows given by `fill` (read from the uploads by [`super::reduce_rows`]):
/// each thread takes bands of columns, fills the band's rows (about [`BAND_BYTES`], so they stay
/// in cache) and reduces it tile by tile, so no `N × columns` block is ever written to memory.
pub(crate) fn reduce_few_rows(
    fill: &FillRow<'_>,
    n: usize,
    stat: Statistic,
    out: &mut [f64],
    squares: &mut [f64],
    gaps: &mut [f64],
) -> Result<(), (usize, Error)> {
    // A pruned sorting network is still a permutation of each column: the rows it does not
    // finish hold the other values in some order. The median needs its middle rows; the trimmed
    // mean only the `cut` smallest and largest in their rows (the kept ones are then the rest).
    let pairs = match stat {
        Statistic::Median => pruned(&network(n), n, &[(n - 1) / 2, n / 2]),
        Statistic::TrimmedMean(cut) => {
            let ends: Vec<usize> = (0..cut.min(n)).chain(n.saturating_sub(cut)..n).collect();
            pruned(&network(n), n, &ends)
        }
    };
    let band = (BAND_BYTES / 8 / n.max(1) / FEW_TILE).max(1) * FEW_TILE;
    let bytes = out.len().saturating_mul(n).saturating_mul(8);
    let groups = tiles_per_thread(out, band);
    let partials = in_parallel(groups, bytes, |group| few_bands(fill, n, stat, &pairs, band, group));
    add_row_sums(partials.into_iter().collect::<Result<Vec<_>, _>>()?, squares, gaps);
    Ok(())
}

/// Columns per tile sorted at once by [`few_bands`] (16 rows: 64 KiB, in L2; smaller tiles,
/// within L1, measured slower: the network's per-row overhead then dominates).
const FEW_TILE: usize = 512;

avx2_dispatch! {
/// One thread's bands of [`reduce_few_rows`] (`band` columns each).
fn few_bands / few_bands_avx2 (
    fill: &FillRow<'_>,
    n: usize,
    stat: Statistic,
    pairs: &[(usize, usize)],
    band: usize,
    group: Vec<(usize, &mut [f64])>,
) -> Result<RowSums, (usize, Error)> {
    let (mut sq, mut gp) = (vec![0.0f64; n], vec![0.0f64; n]);
    let mut rows = vec![0.0f64; n * band];
    let width = FEW_TILE;
    let mut tile = vec![0.0f64; n * width];
    let mut buf = Vec::new();
    for (b, cols) in group {
        let (c0, w) = (b * band, cols.len());
        for (r, s) in sq.iter_mut().enumerate() {
            let row = rows.get_mut(r * w..(r + 1) * w).unwrap_or_default();
            fill(r, c0, row, &mut buf)?;
            *s += dot(row, row);
        }
        let row = |r: usize, range: std::ops::Range<usize>| {
            rows.get(r * w + range.start..r * w + range.end).unwrap_or_default()
        };
        for (k, part) in cols.chunks_mut(width).enumerate() {
            let (t0, tw) = (k * width, part.len());
            for r in 0..n {
                if let Some(dst) = tile.get_mut(r * tw..(r + 1) * tw) {
                    dst.copy_from_slice(row(r, t0..t0 + tw));
                }
            }
            let tile = tile.get_mut(..n * tw).unwrap_or_default();
            sort_tile(tile, tw, pairs);
            statistic_of_sorted(tile, n, tw, stat, part);
        }
        for (r, g) in gp.iter_mut().enumerate() {
            *g += squared_distance(row(r, 0..w), cols);
        }
    }
    Ok((sq, gp))
}
}

/// The statistic of each column of the sorted row-major `n × w` tile into `out`.
#[inline(always)]
fn statistic_of_sorted(tile: &[f64], n: usize, w: usize, stat: Statistic, out: &mut [f64]) {
    let sorted = |r: usize| tile.get(r * w..(r + 1) * w).unwrap_or_default();
    match stat {
        Statistic::Median if n % 2 == 1 => out.copy_from_slice(sorted(n / 2)),
        Statistic::Median => {
            for ((o, lo), hi) in out.iter_mut().zip(sorted(n / 2 - 1)).zip(sorted(n / 2)) {
                *o = (lo + hi) / 2.0;
            }
        }
        Statistic::TrimmedMean(cut) if n <= 2 * cut => out.fill(f64::NAN),
        Statistic::TrimmedMean(cut) => {
            out.fill(0.0);
            for r in cut..n - cut {
                for (o, v) in out.iter_mut().zip(sorted(r)) {
                    *o += v;
                }
            }
            let kept = (n - 2 * cut) as f64;
            out.iter_mut().for_each(|o| *o /= kept);
        }
    }
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
fn add_row_sums(partials: Vec<RowSums>, squares: &mut [f64], gaps: &mut [f64]) {
    for (sq, gp) in partials {
        squares.iter_mut().zip(sq).for_each(|(s, v)| *s += v);
        gaps.iter_mut().zip(gp).for_each(|(g, v)| *g += v);
    }
}

/// The statistic of each column of the row-major `n × c` block `x` into `out` (`c` values), and
/// per row (upload) the sum of its squared values into `squares` and of its squared distances
/// to the result into `gaps` (added to what they hold). Up to [`NETWORK_UP_TO`] rows, each tile
/// of columns is sorted by a network; beyond, the wanted ranks are found by counting
/// ([`super::select`]); tiles spread over the cores.
pub fn reduce_block(
    x: &[f64],
    n: usize,
    stat: Statistic,
    out: &mut [f64],
    squares: &mut [f64],
    gaps: &mut [f64],
) {
    if x.len() != n * out.len() {
        out.fill(f64::NAN);
        return;
    }
    reduce_rows_of(Rows::F64(x), n, stat, out, squares, gaps);
}

/// [`reduce_block`] of a block of stored values (`bytes`: `n × out.len()` elements stored as
/// `lanes`), decoded as its rows are copied into the tiles (no float64 block).
pub fn reduce_stored_block(
    bytes: &[u8],
    lanes: Lanes,
    n: usize,
    stat: Statistic,
    out: &mut [f64],
    squares: &mut [f64],
    gaps: &mut [f64],
) {
    if bytes.len() != n * out.len() * lanes.width() {
        out.fill(f64::NAN);
        return;
    }
    reduce_rows_of(Rows::Stored(bytes, lanes), n, stat, out, squares, gaps);
}

fn reduce_rows_of(
    x: Rows<'_>,
    n: usize,
    stat: Statistic,
    out: &mut [f64],
    squares: &mut [f64],
    gaps: &mut [f64],
) {
    let c = out.len();
    if n == 0 || c == 0 || squares.len() != n || gaps.len() != n {
        out.fill(f64::NAN);
        return;
    }
    if n <= NETWORK_UP_TO {
        return reduce_few(x, n, stat, out, squares, gaps);
    }
    let Some(plan) = Plan::new(n, stat, x) else {
        out.fill(f64::NAN);
        return;
    };
    let groups = tiles_per_thread(out, plan.width);
    let partials = in_parallel(groups, n * c * 8, |group| many_tiles(x, c, &plan, group));
    add_row_sums(partials, squares, gaps);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The float64 as an integer of the same order (every float64 but NaN: the values were checked
    /// finite), so selections compare integers (inlined, vectorized) rather than call a comparator.
    #[inline]
    fn key(v: f64) -> i64 {
        let i = v.to_bits() as i64;
        i ^ ((((i >> 63) as u64) >> 1) as i64)
    }

    #[inline]
    fn value(k: i64) -> f64 {
        f64::from_bits((k ^ ((((k >> 63) as u64) >> 1) as i64)) as u64)
    }

    /// Below this many uploads a column is sorted (small sorts of integers are networks), above it
    /// only selected.
    const SORT_BELOW: usize = 64;

    fn statistic(column: &mut [i64], stat: Statistic) -> f64 {
        let n = column.len();
        if n == 0 {
            return f64::NAN;
        }
        let sorted = n < SORT_BELOW;
        if sorted {
            column.sort_unstable();
        }
        match stat {
            Statistic::Median => {
                let hi = if sorted {
                    column.get(n / 2).copied()
                } else {
                    Some(*column.select_nth_unstable(n / 2).1)
                };
                let hi = value(hi.unwrap_or_default());
                if n % 2 == 1 {
                    return hi;
                }
                let lo = if sorted {
                    column.get(n / 2 - 1).copied()
                } else {
                    column.get(..n / 2).and_then(|left| left.iter().copied().max())
                };
                (value(lo.unwrap_or_default()) + hi) / 2.0
            }
            Statistic::TrimmedMean(cut) => {
                if n <= 2 * cut {
                    return f64::NAN;
                }
                if !sorted && cut > 0 {
                    column.select_nth_unstable(cut);
                    if let Some(upper) = column.get_mut(cut..) {
                        upper.select_nth_unstable(n - 2 * cut - 1);
                    }
                }
                let kept = column.get(cut..n - cut).unwrap_or_default();
                kept.iter().map(|&k| value(k)).sum::<f64>() / kept.len() as f64
            }
        }
    }

    #[test]
    fn medians_and_trimmed_means() {
        // 4 uploads x 2 columns
        let x = [1.0, 10.0, 4.0, -1.0, 2.0, 5.0, 100.0, 7.0];
        let mut out = [0.0; 2];
        median_columns(&x, 4, &mut out);
        assert_eq!(out, [3.0, 6.0]);
        trimmed_mean_columns(&x, 4, 1, &mut out);
        assert_eq!(out, [3.0, 6.0]);
        median_columns(&x[..6], 3, &mut out);
        assert_eq!(out, [2.0, 5.0]);
        let (mut sq, mut gaps) = ([0.0; 4], [0.0; 4]);
        for (stat, want) in [(Statistic::Median, [3.0, 6.0]), (Statistic::TrimmedMean(1), [3.0, 6.0])] {
            reduce_block(&x, 4, stat, &mut out, &mut sq, &mut gaps);
            assert_eq!(out, want);
        }
        assert_eq!(sq, [2.0 * 101.0, 2.0 * 17.0, 2.0 * 29.0, 2.0 * 10049.0]);
        assert_eq!(gaps, [2.0 * 20.0, 2.0 * 50.0, 2.0 * 2.0, 2.0 * 9410.0]);
        median_columns(&x[..6], 3, &mut out);
        let mut three = [0.0; 2];
        reduce_block(&x[..6], 3, Statistic::Median, &mut three, &mut [0.0; 3], &mut [0.0; 3]);
        assert_eq!(three, out);
        // the network against a sort, for every small n
        for n in 1..=NETWORK_UP_TO {
            let cols = 3;
            let x: Vec<f64> = (0..n * cols).map(|i| ((i * 7919) % 101) as f64 - 50.0).collect();
            for stat in [Statistic::Median, Statistic::TrimmedMean(n / 5)] {
                let (mut got, mut want) = (vec![0.0; cols], vec![0.0; cols]);
                reduce_few(Rows::F64(&x), n, stat, &mut got, &mut vec![0.0; n], &mut vec![0.0; n]);
                for (j, w) in want.iter_mut().enumerate() {
                    let mut col: Vec<i64> = (0..n).map(|r| key(x[r * cols + j])).collect();
                    *w = statistic(&mut col, stat);
                }
                assert_same(&got, &want, stat, &format!("n = {n}"));
            }
        }
        for v in [-2.5, -0.0, 0.0, 1e-300, 7.0, f64::MAX, f64::MIN] {
            assert_eq!(value(key(v)).to_bits(), v.to_bits());
        }
        assert!(key(-1.0) < key(-0.5) && key(-0.0) < key(0.0) && key(0.0) < key(1e-300));
    }

    /// Medians exactly; trimmed means to the rounding of a sum in another order.
    fn assert_same(got: &[f64], want: &[f64], stat: Statistic, what: &str) {
        assert_eq!(got.len(), want.len());
        for (j, (g, w)) in got.iter().zip(want).enumerate() {
            match stat {
                Statistic::Median => assert_eq!(g, w, "{what}, column {j}, {stat:?}"),
                Statistic::TrimmedMean(_) => {
                    assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{what}, column {j}: {g} vs {w}")
                }
            }
        }
    }

    #[test]
    fn many_uploads_by_selection_equal_a_sort() {
        // row counts past the network (and not multiples of 4), columns spanning several tiles
        for n in [33usize, 37, 64, 101] {
            let cols = 3 * Plan::new(n, Statistic::Median, Rows::F64(&[])).map_or(64, |p| p.width) + 5;
            let x: Vec<f64> =
                (0..n * cols).map(|i| ((i * 7919 + 3 * n) % 2003) as f64 / 7.0 - 140.0).collect();
            for stat in [Statistic::Median, Statistic::TrimmedMean(n / 5)] {
                let mut got = vec![f64::NAN; cols];
                let (mut sq, mut gaps) = (vec![0.0; n], vec![0.0; n]);
                reduce_block(&x, n, stat, &mut got, &mut sq, &mut gaps);
                let want: Vec<f64> = (0..cols)
                    .map(|j| {
                        let mut col: Vec<f64> = (0..n).map(|r| x[r * cols + j]).collect();
                        col.sort_by(f64::total_cmp);
                        match stat {
                            Statistic::Median if n % 2 == 1 => col[n / 2],
                            Statistic::Median => (col[n / 2 - 1] + col[n / 2]) / 2.0,
                            Statistic::TrimmedMean(cut) => {
                                col[cut..n - cut].iter().sum::<f64>() / (n - 2 * cut) as f64
                            }
                        }
                    })
                    .collect();
                assert_same(&got, &want, stat, &format!("n = {n}"));
                for r in 0..n {
                    let row = &x[r * cols..(r + 1) * cols];
                    let want_sq: f64 = row.iter().map(|v| v * v).sum();
                    assert!((sq[r] - want_sq).abs() <= 1e-9 * want_sq, "squares of row {r}");
                }
            }
        }
    }

    #[test]
    fn bands_and_tiles_cover_every_column() {
        // several bands per thread and a partial band and tile at the end, for a few row counts
        for n in [2usize, 5, 16, 32] {
            let band = (BAND_BYTES / 8 / n / FEW_TILE).max(1) * FEW_TILE;
            let cols = 2 * band + 777;
            let x: Vec<f64> = (0..n * cols).map(|i| ((i * 7919 + n) % 1009) as f64 - 500.0).collect();
            for stat in [Statistic::Median, Statistic::TrimmedMean(n / 4)] {
                let mut got = vec![f64::NAN; cols];
                let (mut sq, mut gaps) = (vec![0.0; n], vec![0.0; n]);
                reduce_few(Rows::F64(&x), n, stat, &mut got, &mut sq, &mut gaps);
                let want: Vec<f64> = (0..cols)
                    .map(|j| statistic(&mut (0..n).map(|r| key(x[r * cols + j])).collect::<Vec<i64>>(), stat))
                    .collect();
                assert_same(&got, &want, stat, &format!("n = {n}"));
                for r in 0..n {
                    let row = &x[r * cols..(r + 1) * cols];
                    let want_sq: f64 = row.iter().map(|v| v * v).sum();
                    let want_gap: f64 = row.iter().zip(&got).map(|(v, a)| (v - a) * (v - a)).sum();
                    assert!((sq[r] - want_sq).abs() <= 1e-9 * want_sq, "squares of row {r}");
                    assert!((gaps[r] - want_gap).abs() <= 1e-9 * want_gap.max(1.0), "gaps of row {r}");
                }
            }
        }
    }
}
