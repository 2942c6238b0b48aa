//! Coordinate-wise robust statistics over an `N × chunk` block of values (one row per upload,
//! row-major): the median and the trimmed mean of each column, spread over the cores.

use super::kernel::in_parallel;

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
    /// The mean without the `cut` smallest and `cut` largest values (summed in selection order:
    /// the same values as Flower/scipy, rounding may differ in the last place of float64).
    TrimmedMean(usize),
}

/// Bytes of the column-major scratch tile each thread transposes into (fits the core's L2).
const TILE_BYTES: usize = 256 << 10;

fn statistic(column: &mut [f64], stat: Statistic) -> f64 {
    let n = column.len();
    match stat {
        Statistic::Median => {
            if n == 0 {
                return f64::NAN;
            }
            let (left, hi, _) = column.select_nth_unstable_by(n / 2, f64::total_cmp);
            let hi = *hi;
            if n % 2 == 1 {
                hi
            } else {
                let lo = left.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (lo + hi) / 2.0
            }
        }
        Statistic::TrimmedMean(cut) => {
            if n <= 2 * cut {
                return f64::NAN;
            }
            if cut > 0 {
                column.select_nth_unstable_by(cut, f64::total_cmp);
                if let Some(upper) = column.get_mut(cut..) {
                    upper.select_nth_unstable_by(n - 2 * cut - 1, f64::total_cmp);
                }
            }
            let kept = column.get(cut..n - cut).unwrap_or_default();
            kept.iter().sum::<f64>() / kept.len() as f64
        }
    }
}

/// The statistic of each column of the row-major `n × c` block `x` into `out` (`c` values), and
/// per row (upload) the sum of its squared values into `squares` and of its squared distances
/// to the result into `gaps` (added to what they hold). Columns are gathered a tile at a time
/// into column-major scratch (rows read in order: no stride of a row per value), tiles spread
/// over the cores; per column a selection (`select_nth_unstable`), not a sort.
pub fn reduce_block(x: &[f64], n: usize, stat: Statistic, out: &mut [f64], squares: &mut [f64], gaps: &mut [f64]) {
    let c = out.len();
    if n == 0 || c == 0 || x.len() != n * c || squares.len() != n || gaps.len() != n {
        out.fill(f64::NAN);
        return;
    }
    let tile = (TILE_BYTES / 8 / n).clamp(1, c);
    let work: Vec<(usize, &mut [f64])> = out.chunks_mut(tile).enumerate().collect();
    let share = work.len().div_ceil(super::kernel::threads()).max(1);
    let mut groups: Vec<Vec<(usize, &mut [f64])>> = Vec::new();
    let mut work = work.into_iter();
    loop {
        let group: Vec<_> = work.by_ref().take(share).collect();
        if group.is_empty() {
            break;
        }
        groups.push(group);
    }
    let partials = in_parallel(groups, x.len() * 8, |group| {
        let mut sq = vec![0.0f64; n];
        let mut gp = vec![0.0f64; n];
        let mut scratch = vec![0.0f64; tile * n];
        for (t, cols) in group {
            let c0 = t * tile;
            let w = cols.len();
            for (row, s) in sq.iter_mut().enumerate() {
                let values = x.get(row * c + c0..row * c + c0 + w).unwrap_or_default();
                for (j, &v) in values.iter().enumerate() {
                    *s += v * v;
                    if let Some(slot) = scratch.get_mut(j * n + row) {
                        *slot = v;
                    }
                }
            }
            for (j, o) in cols.iter_mut().enumerate() {
                *o = scratch.get_mut(j * n..(j + 1) * n).map_or(f64::NAN, |col| statistic(col, stat));
            }
            for (row, g) in gp.iter_mut().enumerate() {
                let values = x.get(row * c + c0..row * c + c0 + w).unwrap_or_default();
                for (&v, &a) in values.iter().zip(cols.iter()) {
                    *g += (v - a) * (v - a);
                }
            }
        }
        (sq, gp)
    });
    for (sq, gp) in partials {
        for (s, v) in squares.iter_mut().zip(sq) {
            *s += v;
        }
        for (g, v) in gaps.iter_mut().zip(gp) {
            *g += v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
