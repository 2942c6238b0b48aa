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
    }
}
