//! The contract between the selection algorithm and its row loops: what a tile's rows hold
//! ([`Elem`]: float64, or float32 as stored), the two loops every group runs ([`Kernel`]: count,
//! collect), and their plain implementation ([`Plain`], vectorized by the compiler; the AVX-512
//! one is `avx512.rs`).

use super::super::block::Rows;

/// Columns handled per group: one 512-bit register of float32, two of float64.
pub(super) const LANES: usize = 16;
/// One value per column of a group.
pub(super) type Lane = [f64; LANES];

/// What a tile's rows hold: float64, or float32 as the uploads store them.
pub(super) trait Elem: Copy + Default + Into<f64> + Send + 'static {
    /// The value of this type that orders every value of this type as the float64 pivot `p`
    /// does: `v < p` exactly when `v < Self::pivot(p)`, and `v >= p` when `v >= Self::pivot(p)`
    /// (the least value not below `p`; NaN stays NaN, which no value is below or above).
    /// Only the AVX-512 loops compare in the values' own type; the plain ones widen each value.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn pivot(p: f64) -> Self;
    /// The calling thread's tile rows, kept from call to call (a sweep calls once per chunk):
    /// fresh memory would cost a page fault and the kernel's zeroing per page, each call. (Not
    /// a closure taking the rows: a closure would not inherit the caller's AVX-512 and its
    /// intrinsics would become calls.)
    fn take_kept_rows() -> Vec<Self>;
    /// Keeps `rows` for the calling thread's next [`Elem::take_kept_rows`].
    fn keep_rows(rows: Vec<Self>);
    /// Columns `c0..c0 + dst.len()` of row `r` of the block `x` (of `c` columns) into `dst`.
    fn fill(x: Rows<'_>, r: usize, c: usize, c0: usize, dst: &mut [Self]);
}

impl Elem for f64 {
    #[inline(always)]
    fn pivot(p: f64) -> f64 {
        p
    }

    fn take_kept_rows() -> Vec<f64> {
        ROWS64.with(|kept| kept.take())
    }

    fn keep_rows(rows: Vec<f64>) {
        ROWS64.with(|kept| kept.set(rows));
    }

    #[inline(always)]
    fn fill(x: Rows<'_>, r: usize, c: usize, c0: usize, dst: &mut [f64]) {
        x.fill(r, c, c0, dst);
    }
}

impl Elem for f32 {
    #[inline(always)]
    fn pivot(p: f64) -> f32 {
        // rounded to nearest, then up if that went below `p` (NaN and infinities map to
        // themselves; a finite `p` past float32's range to an infinity or float32's extreme)
        let q = p as f32;
        if f64::from(q) < p {
            q.next_up()
        } else {
            q
        }
    }

    fn take_kept_rows() -> Vec<f32> {
        ROWS32.with(|kept| kept.take())
    }

    fn keep_rows(rows: Vec<f32>) {
        ROWS32.with(|kept| kept.set(rows));
    }

    #[inline(always)]
    fn fill(x: Rows<'_>, r: usize, c: usize, c0: usize, dst: &mut [f32]) {
        x.fill_f32(r, c, c0, dst);
    }
}

thread_local! {
    /// Each worker's tile rows ([`super::TILE_BYTES`] at most), reused by its next call.
    static ROWS64: std::cell::Cell<Vec<f64>> = const { std::cell::Cell::new(Vec::new()) };
    static ROWS32: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The two row loops every group runs, written twice: plain code (vectorized by the compiler,
/// compiled again with AVX2 for that SIMD level) and with AVX-512 intrinsics, where compares give bit masks
/// (the plain code builds a hit mask lane by lane, the most expensive step of the pass).
/// `rows` holds `n` rows `stride` apart; the group is the sixteen columns from `g0`, inside every
/// row (the AVX-512 loops check that, `avx512::fits`, and leave a register outside untouched; the
/// plain ones read zeros there). Pivots and bounds are float64 (the values' own type compares against
/// [`Elem::pivot`] of them).
pub(super) trait Kernel<E: Elem> {
    /// Per pivot and column, how many rows hold a smaller value.
    fn count<const P: usize>(
        rows: &[E],
        stride: usize,
        g0: usize,
        n: usize,
        pivots: &[Lane; P],
    ) -> [[u64; LANES]; P];

    /// Calls `push(k, hits, values)` for each row with values inside range `k` (`lows[k] <= v <
    /// highs[k]`, `hits` the lanes' bits, `values` the row's as float64); adds the values inside
    /// `middle` into `sums` (when `sum_middle`), in float64, row after row.
    #[allow(clippy::too_many_arguments)] // one pass's bounds, each a row of sixteen columns
    fn collect(
        rows: &[E],
        stride: usize,
        g0: usize,
        n: usize,
        lows: &[Lane; 2],
        highs: &[Lane; 2],
        middle: (&Lane, &Lane),
        sums: Option<&mut Lane>,
        push: impl FnMut(usize, u32, &Lane),
    );
}

/// The plain loops.
pub(super) struct Plain;

/// Row `r`'s sixteen values from column `g0`, as float64 (zeros outside `rows`: callers check).
#[inline(always)]
fn row_at<E: Elem>(rows: &[E], stride: usize, g0: usize, r: usize) -> Lane {
    let v = rows.get(r * stride + g0..r * stride + g0 + LANES).unwrap_or_default();
    std::array::from_fn(|l| v.get(l).map_or(0.0, |&x| x.into()))
}

impl<E: Elem> Kernel<E> for Plain {
    #[inline(always)]
    fn count<const P: usize>(
        rows: &[E],
        stride: usize,
        g0: usize,
        n: usize,
        pivots: &[Lane; P],
    ) -> [[u64; LANES]; P] {
        let mut counts = [[0u64; LANES]; P];
        for r in 0..n {
            let v = row_at(rows, stride, g0, r);
            for (count, pivot) in counts.iter_mut().zip(pivots) {
                for l in 0..LANES {
                    count[l] += u64::from(v[l] < pivot[l]);
                }
            }
        }
        counts
    }

    #[inline(always)]
    fn collect(
        rows: &[E],
        stride: usize,
        g0: usize,
        n: usize,
        lows: &[Lane; 2],
        highs: &[Lane; 2],
        middle: (&Lane, &Lane),
        mut sums: Option<&mut Lane>,
        mut push: impl FnMut(usize, u32, &Lane),
    ) {
        for r in 0..n {
            let v = row_at(rows, stride, g0, r);
            if let Some(sums) = sums.as_deref_mut() {
                for l in 0..LANES {
                    sums[l] += if middle.0[l] <= v[l] && v[l] < middle.1[l] { v[l] } else { 0.0 };
                }
            }
            for k in 0..2 {
                let mut hits = 0u32;
                for l in 0..LANES {
                    hits |= u32::from((lows[k][l] <= v[l]) & (v[l] < highs[k][l])) << l;
                }
                if hits != 0 {
                    push(k, hits, &v);
                }
            }
        }
    }
}
