//! Summary statistics and a histogram of one tensor's values.
//!
//! NaN and infinities are counted, never mixed into the other numbers: minimum, maximum, mean,
//! standard deviation (population, as numpy's default `ddof=0`) and the histogram cover the finite
//! values. Bins are numpy's (`np.histogram(finite, bins, range=(min, max))`): equal widths, the
//! last bin closed, and a range of one value widened to `value ± 0.5`.

/// The statistics of a tensor's finite values and its NaN / infinity counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Number of elements (finite or not).
    pub count: usize,
    /// Number of finite elements.
    pub finite: usize,
    /// NaN elements.
    pub nan: usize,
    /// +infinity elements.
    pub pos_inf: usize,
    /// -infinity elements.
    pub neg_inf: usize,
    /// Smallest finite value (NaN when there is none).
    pub min: f64,
    /// Largest finite value (NaN when there is none).
    pub max: f64,
    /// Mean of the finite values (NaN when there is none).
    pub mean: f64,
    /// Population standard deviation of the finite values (NaN when there is none).
    pub std: f64,
    /// The histogram's edges (`bins + 1` of them; empty when there is no finite value).
    pub edges: Vec<f64>,
    /// Finite values per bin.
    pub counts: Vec<u32>,
}

/// The values to summarize: calls its argument with each value, once per pass (three passes), so
/// that a tensor is decoded a chunk at a time, never whole.
pub type Values<'a> = &'a dyn Fn(&mut dyn FnMut(f64));

/// Summarizes `values` with a histogram of `bins` bins (at least 1).
pub fn summarize(values: Values<'_>, bins: usize) -> Summary {
    let bins = bins.max(1);
    let (mut nan, mut pos_inf, mut neg_inf) = (0, 0, 0);
    let (mut min, mut max, mut sum, mut count) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0);
    values(&mut |v| {
        count += 1;
        if v.is_nan() {
            nan += 1;
        } else if v == f64::INFINITY {
            pos_inf += 1;
        } else if v == f64::NEG_INFINITY {
            neg_inf += 1;
        } else {
            min = min.min(v);
            max = max.max(v);
            sum += v;
        }
    });
    let finite = count - nan - pos_inf - neg_inf;
    if finite == 0 {
        let none = f64::NAN;
        let (edges, counts) = (Vec::new(), Vec::new());
        return Summary {
            count,
            finite,
            nan,
            pos_inf,
            neg_inf,
            min: none,
            max: none,
            mean: none,
            std: none,
            edges,
            counts,
        };
    }
    let mean = sum / finite as f64;
    // Two passes: the squared deviations from the mean, not E[x²] - mean², which cancels badly.
    let mut squares = 0.0;
    values(&mut |v| {
        if v.is_finite() {
            squares += (v - mean) * (v - mean);
        }
    });
    let std = (squares / finite as f64).sqrt();
    let (edges, counts) = histogram(values, min, max, bins);
    Summary { count, finite, nan, pos_inf, neg_inf, min, max, mean, std, edges, counts }
}

/// numpy's equal-width histogram of the finite `values` over `[lo, hi]`.
fn histogram(values: Values<'_>, lo: f64, hi: f64, bins: usize) -> (Vec<f64>, Vec<u32>) {
    let (lo, hi) = if lo == hi { (lo - 0.5, hi + 0.5) } else { (lo, hi) };
    // np.linspace: start + i * step, the last edge exactly `hi`.
    let step = (hi - lo) / bins as f64;
    let mut edges: Vec<f64> = (0..=bins).map(|i| lo + i as f64 * step).collect();
    edges[bins] = hi;
    let mut counts = vec![0u32; bins];
    let span = hi - lo;
    values(&mut |v| {
        if !v.is_finite() {
            return;
        }
        // numpy's index: the scaled position, then corrected against the edges it reports.
        let mut i = (((v - lo) / span) * bins as f64) as usize;
        if i >= bins {
            i = bins - 1;
        }
        if v < edges[i] && i > 0 {
            i -= 1;
        } else if i + 1 < bins && v >= edges[i + 1] {
            i += 1;
        }
        counts[i] = counts[i].saturating_add(1);
    });
    (edges, counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summarize(values: &[f64], bins: usize) -> Summary {
        super::summarize(&|each| values.iter().for_each(|&v| each(v)), bins)
    }

    #[test]
    fn counts_non_finite_values_apart() {
        let s = summarize(&[1.0, f64::NAN, 3.0, f64::INFINITY, f64::NEG_INFINITY, 2.0], 2);
        assert_eq!((s.count, s.finite, s.nan, s.pos_inf, s.neg_inf), (6, 3, 1, 1, 1));
        assert_eq!((s.min, s.max, s.mean), (1.0, 3.0, 2.0));
        assert!((s.std - (2.0f64 / 3.0).sqrt()).abs() < 1e-15);
        assert_eq!(s.edges, vec![1.0, 2.0, 3.0]);
        assert_eq!(s.counts, vec![1, 2]); // the last bin is closed: 2.0 and 3.0
    }

    #[test]
    fn one_value_and_no_finite_value() {
        let s = summarize(&[4.0, 4.0], 4);
        assert_eq!(s.edges, vec![3.5, 3.75, 4.0, 4.25, 4.5]);
        assert_eq!(s.counts, vec![0, 0, 2, 0]);
        let s = summarize(&[f64::NAN], 4);
        assert!(s.min.is_nan() && s.mean.is_nan() && s.counts.is_empty());
        let s = summarize(&[], 4);
        assert_eq!(s.count, 0);
    }
}
