//! Krum's and Bulyan's pairwise squared distances, streamed: each `N × chunk` block of the
//! uploads' values adds its part of every pair's squared L2 distance into an `N × N` matrix (the
//! matrix, never N models). Each pair is computed once, spread over the cores by row.

use crate::parallel::in_parallel;

/// Adds, for every pair of rows `i`, `j` of the row-major `n × c` block `x`, the sum over columns
/// of `(x[i] - x[j])²` into `d[i * n + j]` and `d[j * n + i]` (so `d` is symmetric, zero diagonal).
pub fn add_pairwise(x: &[f64], n: usize, d: &mut [f64]) {
    if n == 0 || !x.len().is_multiple_of(n) || d.len() != n * n {
        return;
    }
    let c = x.len() / n;
    let row = |i: usize| x.get(i * c..(i + 1) * c).unwrap_or_default();
    // row i pairs with the rows after it: interleave rows so each thread gets a similar share
    // (row 0 has the most pairs, row n - 1 none: 0, n - 1, 1, n - 2, ... balances the shares)
    let rows: Vec<usize> = (0..n.div_ceil(2)).flat_map(|k| [k, n - 1 - k]).take(n).collect();
    let found = in_parallel(rows, x.len().saturating_mul(4 * n), |i| {
        let a = row(i);
        let part = ((i + 1)..n)
            .map(|j| a.iter().zip(row(j)).map(|(p, q)| (p - q) * (p - q)).sum::<f64>())
            .collect::<Vec<f64>>();
        (i, part)
    });
    for (i, part) in found {
        for (k, v) in part.into_iter().enumerate() {
            let j = i + 1 + k;
            if let Some(e) = d.get_mut(i * n + j) {
                *e += v;
            }
            if let Some(e) = d.get_mut(j * n + i) {
                *e += v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairwise_squared_distances() {
        let x = [0.0, 0.0, 3.0, 4.0, 1.0, 1.0];
        let mut d = [0.0; 9];
        add_pairwise(&x, 3, &mut d);
        assert_eq!(d, [0.0, 25.0, 2.0, 25.0, 0.0, 13.0, 2.0, 13.0, 0.0]);
    }
}
