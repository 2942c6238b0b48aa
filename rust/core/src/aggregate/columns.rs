//! Coordinate-wise robust statistics over an `N × chunk` block of values (one row per upload,
//! row-major): the median and the trimmed mean of each column, spread over the cores. Up to
//! [`NETWORK_UP_TO`] uploads each tile of columns is sorted by a network here; beyond, the ranks
//! are selected by counting ([`super::select`]). Both speak the block's vocabulary
//! ([`super::block`]).

use super::block::{
    add_row_sums, dot, network, pruned, sort_tile, squared_distance, tiles_per_thread, RowSums, Rows,
    Statistic, TileValue,
};
use super::select::{many_tiles, Plan};
use std::cell::RefCell;

use crate::parallel::in_parallel;
use crate::simd::avx2_dispatch;
use crate::values::Lanes;
use crate::Error;

/// Up to this many uploads, columns are sorted by a sorting network run on whole rows at once
/// (branch-free min/max across a tile of columns: vectorized), not one column at a time.
pub const NETWORK_UP_TO: usize = 32;

/// Fills `dst` with row `r`'s values from column `c0` (`buf`: the thread's scratch for reads);
/// on failure, the row and why.
pub(crate) type FillRow<'a, T> =
    dyn Fn(usize, usize, &mut [T], &mut Vec<u8>) -> Result<(), (usize, Error)> + Sync + 'a;

/// Bytes of rows a thread holds per read of [`reduce_few_rows`]: about its L2 cache.
const BAND_BYTES: usize = 1 << 20;

/// [`reduce_block`] for few uploads: rows copied into a tile, the tile sorted by the network,
/// the statistic read off the sorted rows. The network is pruned to the rows the statistic
/// needs in place: the middle ones for the median, the `cut` at each end for the trimmed mean
/// (which adds the rest in their rows' order). A block stored as float32 is sorted as float32.
fn reduce_few(
    x: Rows<'_>,
    n: usize,
    stat: Statistic,
    out: &mut [f64],
    squares: &mut [f64],
    gaps: &mut [f64],
) {
    let c = out.len();
    // the block is in memory: no error can come from it
    let _ = if let Rows::Stored(_, Lanes::F32) = x {
        let fill = |r: usize, c0: usize, dst: &mut [f32], _: &mut Vec<u8>| {
            x.fill_f32(r, c, c0, dst);
            Ok(())
        };
        reduce_few_rows(&fill, n, stat, out, squares, gaps)
    } else {
        let fill = |r: usize, c0: usize, dst: &mut [f64], _: &mut Vec<u8>| {
            x.fill(r, c, c0, dst);
            Ok(())
        };
        reduce_few_rows(&fill, n, stat, out, squares, gaps)
    };
}

thread_local! {
    /// Each thread's band rows and tile of [`few_bands_of`] (about [`BAND_BYTES`] and a tile),
    /// kept between calls: allocated afresh for each tensor, they were fresh pages every time,
    /// cleared by the kernel (a huge page each: a third of a first median round's time). Bounded
    /// by the band, whatever the model.
    static SCRATCH_F64: RefCell<(Vec<f64>, Vec<f64>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    static SCRATCH_F32: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `f` with the thread's scratch of `key` (fresh vectors if it is in use: never a panic).
fn with_scratch<T: 'static, R>(
    key: &'static std::thread::LocalKey<RefCell<(Vec<T>, Vec<T>)>>,
    f: impl FnOnce(&mut Vec<T>, &mut Vec<T>) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            let (rows, tile) = &mut *scratch;
            f(rows, tile)
        }
        Err(_) => f(&mut Vec::new(), &mut Vec::new()),
    })
}

/// One thread's bands of [`reduce_few_rows`] in one value type (see [`few_bands_of`]).
type Bands<T> = fn(
    &FillRow<'_, T>,
    usize,
    Statistic,
    &[(usize, usize)],
    usize,
    Vec<(usize, &mut [f64])>,
) -> Result<RowSums, (usize, Error)>;

/// A value type [`reduce_few_rows`] sorts in (float64, or float32 for float32 uploads): its
/// bands' loop, compiled for each SIMD level.
pub(crate) trait BandValue: TileValue {
    /// The bands' loop for this type.
    const BANDS: Bands<Self>;
}

/// [`reduce_few`] over rows given by `fill` (read from the uploads by [`super::reduce_rows`]):
/// each thread takes bands of columns, fills the band's rows (about [`BAND_BYTES`], so they stay
/// in cache) and reduces it tile by tile, so no `N × columns` block is ever written to memory.
pub(crate) fn reduce_few_rows<T: BandValue>(
    fill: &FillRow<'_, T>,
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
    let width = std::mem::size_of::<T>();
    let band = (BAND_BYTES / width / n.max(1) / FEW_TILE).max(1) * FEW_TILE;
    let bytes = out.len().saturating_mul(n).saturating_mul(width);
    let groups = tiles_per_thread(out, band);
    let partials = in_parallel(groups, bytes, |group| (T::BANDS)(fill, n, stat, &pairs, band, group));
    add_row_sums(partials.into_iter().collect::<Result<Vec<_>, _>>()?, squares, gaps);
    Ok(())
}

/// Columns per tile sorted at once by [`few_bands_of`] (16 float64 rows: 64 KiB, in L2; smaller
/// tiles, within L1, measured slower: the network's per-row overhead then dominates).
const FEW_TILE: usize = 512;

/// One thread's bands of [`reduce_few_rows`] (`band` columns each): each band's rows filled,
/// their squares summed, then tile by tile copied, sorted and reduced; the rows' squared
/// distances to the result summed last.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn few_bands_of<T: TileValue>(
    fill: &FillRow<'_, T>,
    n: usize,
    stat: Statistic,
    pairs: &[(usize, usize)],
    band: usize,
    group: Vec<(usize, &mut [f64])>,
    rows: &mut Vec<T>,
    tile: &mut Vec<T>,
) -> Result<RowSums, (usize, Error)> {
    let (mut sq, mut gp) = (vec![0.0f64; n], vec![0.0f64; n]);
    let width = FEW_TILE;
    // every lane used is written before it is read (a row by `fill`, a tile by its copy)
    for (v, len) in [(&mut *rows, n * band), (&mut *tile, n * width)] {
        if v.len() < len {
            v.resize(len, T::default());
        }
    }
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

/// [`BandValue`] for one type: [`few_bands_of`] with the thread's scratch of that type, compiled
/// for each SIMD level.
macro_rules! band_value {
    ($t:ty, $scratch:ident, $plain:ident, $fast:ident) => {
        avx2_dispatch! {
        /// [`few_bands_of`] for this type.
        fn $plain / $fast (
            fill: &FillRow<'_, $t>,
            n: usize,
            stat: Statistic,
            pairs: &[(usize, usize)],
            band: usize,
            group: Vec<(usize, &mut [f64])>,
        ) -> Result<RowSums, (usize, Error)> {
            with_scratch(&$scratch, |rows, tile| few_bands_of(fill, n, stat, pairs, band, group, rows, tile))
        }
        }

        impl BandValue for $t {
            const BANDS: Bands<$t> = $plain;
        }
    };
}

band_value!(f64, SCRATCH_F64, few_bands_f64, few_bands_f64_avx2);
band_value!(f32, SCRATCH_F32, few_bands_f32, few_bands_f32_avx2);

/// The statistic of each column of the sorted row-major `n × w` tile into `out`.
#[inline(always)]
fn statistic_of_sorted<T: TileValue>(tile: &[T], n: usize, w: usize, stat: Statistic, out: &mut [f64]) {
    let sorted = |r: usize| tile.get(r * w..(r + 1) * w).unwrap_or_default();
    match stat {
        Statistic::Median if n % 2 == 1 => {
            for (o, &v) in out.iter_mut().zip(sorted(n / 2)) {
                *o = v.into();
            }
        }
        Statistic::Median => {
            for ((o, &lo), &hi) in out.iter_mut().zip(sorted(n / 2 - 1)).zip(sorted(n / 2)) {
                *o = (lo.into() + hi.into()) / 2.0;
            }
        }
        Statistic::TrimmedMean(cut) if n <= 2 * cut => out.fill(f64::NAN),
        Statistic::TrimmedMean(cut) => {
            out.fill(0.0);
            for r in cut..n - cut {
                for (o, &v) in out.iter_mut().zip(sorted(r)) {
                    *o += v.into();
                }
            }
            let kept = (n - 2 * cut) as f64;
            out.iter_mut().for_each(|o| *o /= kept);
        }
    }
}

/// The statistic of each column of the row-major `n × c` block `x` into `out` (`c` values), and
/// per row (upload) the sum of its squared values into `squares` and of its squared distances
/// to the result into `gaps` (added to what they hold). Up to [`NETWORK_UP_TO`] rows, each tile
/// of columns is sorted by a network; beyond, the wanted ranks are found by counting
/// (`super::select`); tiles spread over the cores.
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

    // Column by column, by a sort: the oracles the reducers are compared with.
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
    fn median_columns(x: &[f64], n: usize, out: &mut [f64]) {
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
    fn trimmed_mean_columns(x: &[f64], n: usize, cut: usize, out: &mut [f64]) {
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
