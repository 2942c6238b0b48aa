//! The coordinate-wise median and trimmed mean of many uploads (more than a sorting network
//! serves), without sorting a column or transposing the block.
//!
//! Per column only one or two ranks matter (the middle ones; or the first and last value the
//! trimmed mean keeps). Each is bracketed by counting how many values lie below a few pivots: row
//! after row, one register of columns at once (eight float64 or sixteen float32), one vector
//! compare and add per pivot, on the rows as they lie in memory. Pivots come from a sample of rows
//! sorted by a network across the columns; the first count uses sample values spread around each
//! rank's expected place in the sample, the second sample values inside the bracket the first one
//! found. A last pass collects only the values inside the final brackets (their number is known
//! from the counts: about n / 50 on data without structure) and orders those. Ranks are exact on
//! any data; a misleading sample only widens a bracket (more values collected), and a bracket
//! holding a single repeated value (constant columns) is recognized by its counts and never
//! collected.
//!
//! Uploads stored as float32 are compared as float32 (sixteen columns to a 512-bit register
//! instead of eight, half the bytes in cache, no widening of the block): every pivot is turned
//! into the float32 that orders every float32 as the pivot does ([`Elem::pivot`]), so the counts,
//! brackets and results are those of the same values widened to float64, bit for bit.

use super::columns::{dot, network, sort_tile, squared_distance, RowSums, Rows, Statistic};
use super::values::Lanes;

/// Columns handled per group: one 512-bit register of float32, two of float64.
const LANES: usize = 16;
type Lane = [f64; LANES];

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
    /// Each worker's tile rows ([`TILE_BYTES`] at most), reused by its next call.
    static ROWS64: std::cell::Cell<Vec<f64>> = const { std::cell::Cell::new(Vec::new()) };
    static ROWS32: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}
/// Pivots per bracketed place and pass.
const PIVOTS: usize = 4;
/// Where the first pass's pivots sit around a rank's expected place in the sample, in standard
/// deviations of that place: a rank falls outside them in about 1% of columns.
const SPREAD: [f64; PIVOTS] = [-2.5, -0.8, 0.8, 2.5];
/// Bytes of one tile's rows copied together (within the core's L2 cache, which every pass
/// reads them from).
const TILE_BYTES: usize = 512 << 10;
/// Rows ahead of the one being copied into a tile whose values are asked into cache.
const FILL_AHEAD: usize = 8;
/// Up to this many collected values are sorted; more are selected.
const SORT_UP_TO: usize = 32;

/// What one call shares across its tiles: the sample's rows and network, the ranks wanted,
/// and where the first pass's pivots lie in the sorted sample.
pub(super) struct Plan {
    n: usize,
    stat: Statistic,
    /// The rank pairs to bracket: per place, its lowest and highest rank.
    places: Vec<(usize, usize)>,
    sample_rows: Vec<usize>,
    pairs: Vec<(usize, usize)>,
    /// Per place, `PIVOTS` ranks into the sorted sample.
    first_ranks: Vec<usize>,
    /// Columns per tile (a multiple of [`LANES`]).
    pub(super) width: usize,
}

impl Plan {
    /// The plan for `n` rows (more than the networks serve) of the block `x` and `stat`; `None`
    /// for no rows or a trimmed mean keeping nothing (the caller's NaN).
    pub(super) fn new(n: usize, stat: Statistic, x: Rows<'_>) -> Option<Plan> {
        if n == 0 {
            return None;
        }
        let places = match stat {
            Statistic::Median => vec![(n.saturating_sub(1) / 2, n / 2)],
            Statistic::TrimmedMean(cut) if n <= 2 * cut => return None,
            Statistic::TrimmedMean(cut) => vec![(cut, cut), (n - 1 - cut, n - 1 - cut)],
        };
        let s = if n >= 128 { 64 } else { 32 }.min(n);
        let sample_rows: Vec<usize> = (0..s).map(|i| (2 * i + 1) * n / (2 * s)).collect();
        let mut first_ranks = Vec::with_capacity(places.len() * PIVOTS);
        for &(lo, hi) in &places {
            let p = (lo + hi + 1) as f64 / 2.0 / n as f64;
            let expected = p * s as f64 - 0.5;
            let sd = (s as f64 * p * (1.0 - p)).sqrt().max(1.0);
            for k in SPREAD {
                first_ranks.push((expected + k * sd).round().clamp(0.0, (s - 1) as f64) as usize);
            }
        }
        let bytes = if let Rows::Stored(_, Lanes::F32) = x { 4 } else { 8 };
        let width = ((TILE_BYTES / bytes / n.max(1)) / LANES * LANES).clamp(LANES, 8 * LANES);
        Some(Plan { n, stat, places, sample_rows, pairs: network(s), first_ranks, width })
    }
}

/// A bracket of one rank in one column: the values `v` with `lo <= v < hi`, of which `below`
/// values lie under `lo` and `count` inside.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bracket {
    lo: f64,
    hi: f64,
    below: usize,
    count: usize,
}

impl Bracket {
    /// All values inside are equal (to `lo`): nothing to collect.
    fn single(&self) -> bool {
        self.lo.is_finite() && self.hi == self.lo.next_up()
    }

    /// The tightest bracket of `rank` among pivots with their counts (`#{v < pivot}`).
    fn of(rank: usize, n: usize, pivots: impl Iterator<Item = (f64, usize)>) -> Bracket {
        let (mut lo, mut below, mut hi, mut upto) = (f64::NEG_INFINITY, 0, f64::INFINITY, n);
        for (q, c) in pivots {
            if c <= rank && q > lo {
                (lo, below) = (q, c);
            } else if c > rank && q < hi {
                (hi, upto) = (q, c);
            }
        }
        Bracket { lo, hi, below, count: upto.saturating_sub(below) }
    }
}

/// The two row loops every group runs, written twice: plain code (vectorized by the compiler,
/// with AVX2 where the CPU has it) and with AVX-512 intrinsics, where compares give bit masks
/// (the plain code builds a hit mask lane by lane, the most expensive step of the pass).
/// `rows` holds `n` rows `stride` apart; the group is the sixteen columns from `g0`, inside every
/// row (the AVX-512 loops check that, [`fits`], and leave a register outside untouched; the plain
/// ones read zeros there). Pivots and bounds are float64 (the values' own type compares against
/// [`Elem::pivot`] of them).
trait Kernel<E: Elem> {
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
struct Plain;

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

/// Whether `width` columns from `g0` of every row lie inside `rows` (every AVX-512 load relies
/// on it).
#[cfg(target_arch = "x86_64")]
fn fits<E>(rows: &[E], stride: usize, g0: usize, width: usize, n: usize) -> bool {
    g0 + width <= stride && rows.len() >= n.saturating_mul(stride)
}

/// The AVX-512 loops (only run where the CPU reports AVX-512F).
#[cfg(target_arch = "x86_64")]
struct Avx512;

/// A tile's values as one 512-bit register holds them: the operations the AVX-512 loops need,
/// so that the loops are written once for float64 (eight columns to a register) and float32
/// (sixteen). Every function is only reached from functions compiled with AVX-512F, run when
/// the CPU has it.
#[cfg(target_arch = "x86_64")]
trait Register: Elem {
    /// Columns per register.
    const WIDTH: usize;
    type V: Copy;
    /// `WIDTH` values from `p`.
    ///
    /// # Safety
    /// `WIDTH` values from `p` are readable.
    unsafe fn load(p: *const Self) -> Self::V;
    /// Bits of the lanes where `v < bound`.
    fn below(v: Self::V, bound: Self::V) -> u32;
    /// Bits of the lanes where `lo <= v < hi`.
    fn within(lo: Self::V, v: Self::V, hi: Self::V) -> u32;
    /// `counts` plus one in the lanes of `bits` (64-bit counters for float64, 32-bit for
    /// float32: a counter counts at most `n` rows, and `n` uploads fit in 32 bits, each an open
    /// file).
    fn count(counts: std::arch::x86_64::__m512i, bits: u32) -> std::arch::x86_64::__m512i;
    /// The counters of `counts` into `dst` (its first `WIDTH`).
    fn store_counts(counts: std::arch::x86_64::__m512i, dst: &mut [u64]);
    /// `v` as float64: its first eight lanes, then (float32) its last eight.
    fn widen(v: Self::V) -> [std::arch::x86_64::__m512d; 2];
}

#[cfg(target_arch = "x86_64")]
impl Register for f64 {
    const WIDTH: usize = 8;
    type V = std::arch::x86_64::__m512d;

    #[inline(always)]
    unsafe fn load(p: *const f64) -> Self::V {
        // SAFETY: the caller's (8 values readable; AVX-512F, see the trait)
        unsafe { std::arch::x86_64::_mm512_loadu_pd(p) }
    }

    #[inline(always)]
    fn below(v: Self::V, bound: Self::V) -> u32 {
        use std::arch::x86_64::*;
        // SAFETY: register operations only; AVX-512F (see the trait)
        u32::from(unsafe { _mm512_cmp_pd_mask::<_CMP_LT_OQ>(v, bound) })
    }

    #[inline(always)]
    fn within(lo: Self::V, v: Self::V, hi: Self::V) -> u32 {
        use std::arch::x86_64::*;
        // SAFETY: as in `below`
        u32::from(unsafe {
            _mm512_mask_cmp_pd_mask::<_CMP_LT_OQ>(_mm512_cmp_pd_mask::<_CMP_LE_OQ>(lo, v), v, hi)
        })
    }

    #[inline(always)]
    fn count(counts: std::arch::x86_64::__m512i, bits: u32) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        // SAFETY: as in `below`
        unsafe { _mm512_mask_add_epi64(counts, bits as u8, counts, _mm512_set1_epi64(1)) }
    }

    #[inline(always)]
    fn store_counts(counts: std::arch::x86_64::__m512i, dst: &mut [u64]) {
        let mut got = [0u64; 8];
        // SAFETY: stores 8 counters into an array of 8; AVX-512F (see the trait)
        unsafe { std::arch::x86_64::_mm512_storeu_si512(got.as_mut_ptr().cast(), counts) };
        dst.iter_mut().zip(got).for_each(|(d, g)| *d = g);
    }

    #[inline(always)]
    fn widen(v: Self::V) -> [std::arch::x86_64::__m512d; 2] {
        // SAFETY: as in `below`
        [v, unsafe { std::arch::x86_64::_mm512_setzero_pd() }]
    }
}

#[cfg(target_arch = "x86_64")]
impl Register for f32 {
    const WIDTH: usize = 16;
    type V = std::arch::x86_64::__m512;

    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self::V {
        // SAFETY: the caller's (16 values readable; AVX-512F, see the trait)
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
    }

    #[inline(always)]
    fn below(v: Self::V, bound: Self::V) -> u32 {
        use std::arch::x86_64::*;
        // SAFETY: register operations only; AVX-512F (see the trait)
        u32::from(unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, bound) })
    }

    #[inline(always)]
    fn within(lo: Self::V, v: Self::V, hi: Self::V) -> u32 {
        use std::arch::x86_64::*;
        // SAFETY: as in `below`
        u32::from(unsafe {
            _mm512_mask_cmp_ps_mask::<_CMP_LT_OQ>(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(lo, v), v, hi)
        })
    }

    #[inline(always)]
    fn count(counts: std::arch::x86_64::__m512i, bits: u32) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        // SAFETY: as in `below`
        unsafe { _mm512_mask_add_epi32(counts, bits as u16, counts, _mm512_set1_epi32(1)) }
    }

    #[inline(always)]
    fn store_counts(counts: std::arch::x86_64::__m512i, dst: &mut [u64]) {
        let mut got = [0u32; 16];
        // SAFETY: stores 16 counters into an array of 16; AVX-512F (see the trait)
        unsafe { std::arch::x86_64::_mm512_storeu_si512(got.as_mut_ptr().cast(), counts) };
        dst.iter_mut().zip(got).for_each(|(d, g)| *d = u64::from(g));
    }

    #[inline(always)]
    fn widen(v: Self::V) -> [std::arch::x86_64::__m512d; 2] {
        use std::arch::x86_64::*;
        // SAFETY: as in `below`
        unsafe {
            [
                _mm512_cvtps_pd(_mm512_castps512_ps256(v)),
                _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)))),
            ]
        }
    }
}

/// Columns `at..at + W::WIDTH` of a row of bounds as `W` ([`Elem::pivot`]), in an array long
/// enough for any register.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn bounds_of<W: Register>(lane: &Lane, at: usize) -> [W; LANES] {
    std::array::from_fn(|l| W::pivot(lane.get(at + l).copied().unwrap_or(f64::NAN)))
}

/// [`Kernel::count`] of the register of columns from `g0 + at`, into those columns of `counts`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn count_register<W: Register, const P: usize>(
    rows: &[W],
    stride: usize,
    (g0, at): (usize, usize),
    n: usize,
    pivots: &[Lane; P],
    counts: &mut [[u64; LANES]; P],
) {
    use std::arch::x86_64::*;
    if !fits(rows, stride, g0 + at, W::WIDTH, n) {
        return;
    }
    let pivots: [[W; LANES]; P] = std::array::from_fn(|p| bounds_of(&pivots[p], at));
    // SAFETY: only called from functions compiled with AVX-512F, run when the CPU has it; every
    // load reads `WIDTH` values at `r * stride + g0 + at <= n * stride - WIDTH`, inside `rows`
    // (checked by `fits`), or from the pivot arrays (longer than any register).
    unsafe {
        let pv: [W::V; P] = std::array::from_fn(|p| W::load(pivots[p].as_ptr()));
        let mut cv: [__m512i; P] = [_mm512_setzero_si512(); P];
        let base = rows.as_ptr().add(g0 + at);
        for r in 0..n {
            let v = W::load(base.add(r * stride));
            for p in 0..P {
                cv[p] = W::count(cv[p], W::below(v, pv[p]));
            }
        }
        for (count, c) in counts.iter_mut().zip(cv) {
            W::store_counts(c, count.get_mut(at..).unwrap_or_default());
        }
    }
}

/// [`Kernel::collect`] of the register of columns from `g0 + at` (`hits` bits and the values
/// pushed at those columns; `sums` of those columns).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)] // as Kernel::collect
fn collect_register<W: Register>(
    rows: &[W],
    stride: usize,
    (g0, at): (usize, usize),
    n: usize,
    lows: &[Lane; 2],
    highs: &[Lane; 2],
    middle: (&Lane, &Lane),
    sums: Option<&mut Lane>,
    push: &mut impl FnMut(usize, u32, &Lane),
) {
    use std::arch::x86_64::*;
    // the register's columns inside every row, and inside the group's sixteen (`wide`, `total`)
    if !fits(rows, stride, g0 + at, W::WIDTH, n) || at + W::WIDTH > LANES {
        return;
    }
    let (lows, highs) = (lows.map(|b| bounds_of::<W>(&b, at)), highs.map(|b| bounds_of::<W>(&b, at)));
    let (mid_lo, mid_hi) = (bounds_of::<W>(middle.0, at), bounds_of::<W>(middle.1, at));
    // the row's values as float64 at their columns (NaN in the others, never pushed as hits)
    let mut wide = [f64::NAN; LANES];
    let mut total = [0.0f64; LANES];
    // SAFETY: as in `count_register`; `wide` holds `WIDTH` float64 from column `at` (checked
    // above: `at + WIDTH <= 16`), `total` 16.
    unsafe {
        let lo = [W::load(lows[0].as_ptr()), W::load(lows[1].as_ptr())];
        let hi = [W::load(highs[0].as_ptr()), W::load(highs[1].as_ptr())];
        let (mlo, mhi) = (W::load(mid_lo.as_ptr()), W::load(mid_hi.as_ptr()));
        // float64 sums of the register's columns (the first eight, then the last), in row order
        let mut sum = [_mm512_setzero_pd(); 2];
        let summing = sums.is_some();
        let base = rows.as_ptr().add(g0 + at);
        for r in 0..n {
            let v = W::load(base.add(r * stride));
            if summing {
                let inside = W::within(mlo, v, mhi);
                if inside != 0 {
                    let halves = W::widen(v);
                    sum[0] = _mm512_mask_add_pd(sum[0], inside as u8, sum[0], halves[0]);
                    sum[1] = _mm512_mask_add_pd(sum[1], (inside >> 8) as u8, sum[1], halves[1]);
                }
            }
            let hits = [W::within(lo[0], v, hi[0]), W::within(lo[1], v, hi[1])];
            // widened only for a hit (most rows of a median have none)
            if hits != [0, 0] {
                let halves = W::widen(v);
                _mm512_storeu_pd(wide.as_mut_ptr().add(at), halves[0]);
                if W::WIDTH > 8 {
                    _mm512_storeu_pd(wide.as_mut_ptr().add(at + 8), halves[1]);
                }
                for (k, &bits) in hits.iter().enumerate() {
                    if bits != 0 {
                        push(k, bits << at, &wide);
                    }
                }
            }
        }
        _mm512_storeu_pd(total.as_mut_ptr(), sum[0]);
        _mm512_storeu_pd(total.as_mut_ptr().add(8), sum[1]);
    }
    if let Some(sums) = sums {
        let columns = sums.get_mut(at..at + W::WIDTH).unwrap_or_default();
        columns.iter_mut().zip(total).for_each(|(s, t)| *s += t);
    }
}

/// Each register of the group in its own pass (float64: two; both at once would spill the
/// registers). Per column the rows still come in order, so what each column counts, collects
/// and sums is what one pass over all sixteen would give.
#[cfg(target_arch = "x86_64")]
impl<W: Register> Kernel<W> for Avx512 {
    #[inline(always)]
    fn count<const P: usize>(
        rows: &[W],
        stride: usize,
        g0: usize,
        n: usize,
        pivots: &[Lane; P],
    ) -> [[u64; LANES]; P] {
        let mut counts = [[0u64; LANES]; P];
        for at in (0..LANES).step_by(W::WIDTH) {
            count_register::<W, P>(rows, stride, (g0, at), n, pivots, &mut counts);
        }
        counts
    }

    #[inline(always)]
    fn collect(
        rows: &[W],
        stride: usize,
        g0: usize,
        n: usize,
        lows: &[Lane; 2],
        highs: &[Lane; 2],
        middle: (&Lane, &Lane),
        mut sums: Option<&mut Lane>,
        mut push: impl FnMut(usize, u32, &Lane),
    ) {
        for at in (0..LANES).step_by(W::WIDTH) {
            collect_register(rows, stride, (g0, at), n, lows, highs, middle, sums.as_deref_mut(), &mut push);
        }
    }
}

/// `PIVOTS` pivots per place, each a row of the group's sixteen columns.
#[inline(always)]
fn counts_of<E: Elem, K: Kernel<E>>(
    rows: &[E],
    stride: usize,
    g0: usize,
    n: usize,
    pivots: &[Lane],
) -> Vec<[u64; LANES]> {
    match pivots.len() {
        4 => K::count::<4>(rows, stride, g0, n, pivots.try_into().unwrap_or(&[[0.0; LANES]; 4])).to_vec(),
        8 => K::count::<8>(rows, stride, g0, n, pivots.try_into().unwrap_or(&[[0.0; LANES]; 8])).to_vec(),
        _ => pivots.iter().map(|p| K::count::<1>(rows, stride, g0, n, &[*p])[0]).collect(),
    }
}

/// Sample values strictly inside `(lo, hi)` of one sorted sample column, `PIVOTS` of them spread
/// evenly; when the sample has fewer there, those and `lo`'s successor (so that a bracket of one
/// repeated value is recognized), padded with a bound.
fn inner_pivots(sample: &[f64], lo: f64, hi: f64) -> [f64; PIVOTS] {
    let first = sample.partition_point(|&v| v <= lo);
    let inside = sample.get(first..).unwrap_or_default();
    let inside = inside.get(..inside.partition_point(|&v| v < hi)).unwrap_or_default();
    let fill = if lo.is_finite() { lo } else { hi };
    let mut out = [fill; PIVOTS];
    if inside.len() >= PIVOTS {
        for (k, o) in out.iter_mut().enumerate() {
            *o = inside.get((k + 1) * inside.len() / (PIVOTS + 1)).copied().unwrap_or(fill);
        }
    } else {
        for (o, v) in out.iter_mut().zip(inside) {
            *o = *v;
        }
        if lo.is_finite() {
            if let Some(o) = out.get_mut(inside.len()) {
                *o = lo.next_up();
            }
        }
    }
    out
}

/// One column's collected values of a bracket (`single` brackets: never collected).
fn values_of<'a>(b: &Bracket, collected: &'a mut [f64], repeated: &'a mut Vec<f64>) -> &'a mut [f64] {
    if b.single() {
        repeated.clear();
        repeated.resize(b.count, b.lo);
        return repeated;
    }
    collected
}

/// The values at ranks `first..=last` (global ranks, inside bracket `b`) of `values`, the bracket's
/// values in any order, ascending; reorders `values`.
fn ranked<'a>(values: &'a mut [f64], b: &Bracket, first: usize, last: usize) -> &'a [f64] {
    let (i, j) = (first.saturating_sub(b.below), (last.saturating_sub(b.below) + 1).min(values.len()));
    if i >= j {
        return &[];
    }
    if values.len() <= SORT_UP_TO {
        values.sort_unstable_by(f64::total_cmp);
    } else {
        values.select_nth_unstable_by(i, f64::total_cmp);
        if let Some(rest) = values.get_mut(i + 1..) {
            if j > i + 1 {
                rest.select_nth_unstable_by(j - i - 2, f64::total_cmp);
                if let Some(part) = rest.get_mut(..j - i - 1) {
                    part.sort_unstable_by(f64::total_cmp);
                }
            }
        }
    }
    values.get(i..j).unwrap_or_default()
}

/// One thread's tiles of [`super::columns::reduce_block`] for many uploads: per tile of
/// `plan.width` columns of the row-major `n × c` block `x`, its rows copied together, the
/// statistic of each column into the tile's part of the result, and per row the sums of squares
/// and squared distances to the result. The loops run with AVX-512 or AVX2 where the CPU has
/// them (the wheels target baseline x86-64).
pub(super) fn many_tiles(x: Rows<'_>, c: usize, plan: &Plan, group: Vec<(usize, &mut [f64])>) -> RowSums {
    if let Rows::Stored(_, Lanes::F32) = x {
        return many_tiles_of::<f32>(x, c, plan, group);
    }
    many_tiles_of::<f64>(x, c, plan, group)
}

/// [`many_tiles`] with tiles of `E`, on the best loops the CPU runs.
fn many_tiles_of<E: Elem>(x: Rows<'_>, c: usize, plan: &Plan, group: Vec<(usize, &mut [f64])>) -> RowSums
where
    Plain: Kernel<E>,
    Avx512Where: Kernel<E>,
{
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (just checked), all `tiles_avx512` requires.
            return unsafe { tiles_avx512::<E>(x, c, plan, group) };
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (just checked), all `tiles_avx2` requires.
            return unsafe { tiles_avx2::<E>(x, c, plan, group) };
        }
    }
    tiles::<E, Plain>(x, c, plan, group)
}

/// The AVX-512 loops where the target has them, else the plain ones (never run: other
/// architectures dispatch to [`Plain`]); names the bound [`many_tiles_of`] needs on every target.
#[cfg(target_arch = "x86_64")]
type Avx512Where = Avx512;
#[cfg(not(target_arch = "x86_64"))]
type Avx512Where = Plain;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tiles_avx512<E: Elem>(
    x: Rows<'_>,
    c: usize,
    plan: &Plan,
    group: Vec<(usize, &mut [f64])>,
) -> RowSums
where
    Avx512: Kernel<E>,
{
    tiles::<E, Avx512>(x, c, plan, group)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tiles_avx2<E: Elem>(
    x: Rows<'_>,
    c: usize,
    plan: &Plan,
    group: Vec<(usize, &mut [f64])>,
) -> RowSums {
    tiles::<E, Plain>(x, c, plan, group)
}

/// [`many_tiles`]' body, for tiles of `E` and the loops of `K`.
#[inline(always)]
fn tiles<E: Elem, K: Kernel<E>>(
    x: Rows<'_>,
    c: usize,
    plan: &Plan,
    group: Vec<(usize, &mut [f64])>,
) -> RowSums {
    let mut rows = E::take_kept_rows();
    let (n, width) = (plan.n, plan.width);
    let (mut sq, mut gp) = (vec![0.0f64; n], vec![0.0f64; n]);
    rows.resize(n * width, E::default());
    let s = plan.sample_rows.len();
    let mut sample = vec![0.0f64; s * width];
    let mut column = vec![0.0f64; s];
    let (mut collected, mut repeated) = (Vec::new(), Vec::new());
    for (t, cols) in group {
        let (c0, w) = (t * width, cols.len());
        for (r, s) in sq.iter_mut().enumerate() {
            x.prefetch(r + FILL_AHEAD, c, c0, w);
            let Some(dst) = rows.get_mut(r * width..r * width + w) else { continue };
            E::fill(x, r, c, c0, dst);
            *s += dot(dst, dst);
            rows.get_mut(r * width + w..(r + 1) * width).unwrap_or_default().fill(E::default());
        }
        for (i, &r) in plan.sample_rows.iter().enumerate() {
            if let (Some(dst), Some(src)) =
                (sample.get_mut(i * width..(i + 1) * width), rows.get(r * width..(r + 1) * width))
            {
                dst.iter_mut().zip(src).for_each(|(d, &v)| *d = v.into());
            }
        }
        sort_tile(&mut sample, width, &plan.pairs);
        for (g, part) in cols.chunks_mut(LANES).enumerate() {
            let g0 = g * LANES;
            group_statistic::<E, K>(
                plan,
                &rows,
                &sample,
                g0,
                part,
                &mut column,
                &mut collected,
                &mut repeated,
            );
        }
        for (r, g) in gp.iter_mut().enumerate() {
            *g += squared_distance(rows.get(r * width..r * width + w).unwrap_or_default(), cols);
        }
    }
    E::keep_rows(rows);
    (sq, gp)
}

/// The statistic of the sixteen columns from `g0` of the tile's `rows` into `out` (its first
/// `out.len()` columns are real; the others padding), `sample` the tile's sorted sample rows.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // one group's scratch, reused across groups
fn group_statistic<E: Elem, K: Kernel<E>>(
    plan: &Plan,
    rows: &[E],
    sample: &[f64],
    g0: usize,
    out: &mut [f64],
    column: &mut [f64],
    collected: &mut Vec<f64>,
    repeated: &mut Vec<f64>,
) {
    let (n, width) = (plan.n, plan.width);
    let at = |rank: usize, l: usize| sample.get(rank * width + g0 + l).copied().unwrap_or(0.0);
    // pass 1: pivots around each place's expected sample rank
    let first: Vec<Lane> = plan.first_ranks.iter().map(|&k| std::array::from_fn(|l| at(k, l))).collect();
    let counts1 = counts_of::<E, K>(rows, width, g0, n, &first);
    let mut all: Vec<(Lane, [u64; LANES])> = first.iter().copied().zip(counts1).collect();
    // pass 2: sample values inside each place's bracket
    let mut second: Vec<Lane> = vec![[0.0; LANES]; plan.places.len() * PIVOTS];
    for l in 0..LANES {
        for (i, v) in column.iter_mut().enumerate() {
            *v = at(i, l);
        }
        for (p, &(low, high)) in plan.places.iter().enumerate() {
            let pivots = all.iter().map(|(q, c)| (q[l], c[l] as usize));
            let (a, b) = (Bracket::of(low, n, pivots.clone()), Bracket::of(high, n, pivots));
            for (k, v) in inner_pivots(column, a.lo, b.hi).into_iter().enumerate() {
                if let Some(q) = second.get_mut(p * PIVOTS + k) {
                    q[l] = v;
                }
            }
        }
    }
    let counts2 = counts_of::<E, K>(rows, width, g0, n, &second);
    all.extend(second.into_iter().zip(counts2));
    // the final brackets of the wanted ranks: up to two per column (a trimmed mean's ends, or
    // the two middle ranks of an even count)
    let (low_rank, high_rank) = match (plan.places.first(), plan.places.last()) {
        (Some(a), Some(b)) => (a.0, b.1),
        _ => return,
    };
    let mut brackets = [[Bracket { lo: f64::NAN, hi: f64::NAN, below: 0, count: 0 }; 2]; LANES];
    for (l, pair) in brackets.iter_mut().enumerate() {
        let pivots = all.iter().map(|(q, c)| (q[l], c[l] as usize));
        pair[0] = Bracket::of(low_rank, n, pivots.clone());
        pair[1] = Bracket::of(high_rank, n, pivots);
    }
    // pass 3: collect the values of the brackets that are neither repeated values nor the same
    // as the first; add up what lies between a trimmed mean's two brackets
    let empty = (f64::NAN, f64::NAN);
    let mut middle = [empty; LANES];
    let mut starts = [[0usize; 2]; LANES];
    collected.clear();
    for (l, pair) in brackets.iter().enumerate() {
        for k in 0..2 {
            let b = pair[k];
            let again = k == 1 && b == pair[0];
            if let Some(s) = starts.get_mut(l).and_then(|s| s.get_mut(k)) {
                *s = collected.len();
            }
            if !again && !b.single() {
                collected.resize(collected.len() + b.count, 0.0);
            }
        }
        if pair[1] != pair[0] {
            middle[l] = (pair[0].hi, pair[1].lo);
        }
    }
    let lows: [Lane; 2] = std::array::from_fn(|k| {
        std::array::from_fn(|l| {
            let b = brackets[l][k];
            if b.single() || (k == 1 && b == brackets[l][0]) {
                f64::NAN
            } else {
                b.lo
            }
        })
    });
    let highs: [Lane; 2] = std::array::from_fn(|k| std::array::from_fn(|l| brackets[l][k].hi));
    let (mid_lo, mid_hi): (Lane, Lane) =
        (std::array::from_fn(|l| middle[l].0), std::array::from_fn(|l| middle[l].1));
    let mut sums: Lane = [0.0; LANES];
    let mut next: [[usize; 2]; LANES] = starts;
    let trimmed = matches!(plan.stat, Statistic::TrimmedMean(_));
    let push = |k: usize, mut hits: u32, v: &Lane| {
        while hits != 0 {
            let l = hits.trailing_zeros() as usize;
            hits &= hits - 1;
            if let Some(slot) = next.get_mut(l).and_then(|s| s.get_mut(k)) {
                if let Some(dst) = collected.get_mut(*slot) {
                    *dst = v.get(l).copied().unwrap_or(0.0);
                }
                *slot += 1;
            }
        }
    };
    K::collect(rows, width, g0, n, &lows, &highs, (&mid_lo, &mid_hi), trimmed.then_some(&mut sums), push);
    // each column's statistic from its brackets' values
    for (l, o) in out.iter_mut().enumerate() {
        let pair = brackets[l];
        let start = starts[l];
        let same = pair[1] == pair[0];
        let len0 = if pair[0].single() { 0 } else { pair[0].count };
        let cut = start[1].min(collected.len());
        let (head, tail) = collected.split_at_mut(cut);
        let mine0 = head.get_mut(start[0]..start[0] + len0).unwrap_or_default();
        *o = match plan.stat {
            Statistic::Median => {
                let v0 = values_of(&pair[0], mine0, repeated);
                if same {
                    let both = ranked(v0, &pair[0], low_rank, high_rank);
                    match (both.first(), both.last()) {
                        (Some(a), _) if low_rank == high_rank => *a,
                        (Some(a), Some(b)) => (a + b) / 2.0,
                        _ => f64::NAN,
                    }
                } else {
                    let a = ranked(v0, &pair[0], low_rank, low_rank).first().copied().unwrap_or(f64::NAN);
                    let len1 = if pair[1].single() { 0 } else { pair[1].count };
                    let v1 = values_of(&pair[1], tail.get_mut(..len1).unwrap_or_default(), repeated);
                    let b = ranked(v1, &pair[1], high_rank, high_rank).first().copied().unwrap_or(f64::NAN);
                    (a + b) / 2.0
                }
            }
            Statistic::TrimmedMean(_) => {
                let mut total = sums[l];
                let v0 = values_of(&pair[0], mine0, repeated);
                total += ranked(v0, &pair[0], low_rank, high_rank).iter().sum::<f64>();
                if !same {
                    let len1 = if pair[1].single() { 0 } else { pair[1].count };
                    let v1 = values_of(&pair[1], tail.get_mut(..len1).unwrap_or_default(), repeated);
                    total += ranked(v1, &pair[1], low_rank, high_rank).iter().sum::<f64>();
                }
                total / (high_rank + 1 - low_rank) as f64
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::super::columns::reduce_block;
    use super::*;

    /// The statistic of each column by sorting it: the reference.
    fn by_sorting(x: &[f64], n: usize, stat: Statistic) -> Vec<f64> {
        let c = x.len() / n;
        (0..c)
            .map(|j| {
                let mut col: Vec<f64> = (0..n).map(|r| x[r * c + j]).collect();
                col.sort_by(f64::total_cmp);
                match stat {
                    Statistic::Median if n % 2 == 1 => col[n / 2],
                    Statistic::Median => (col[n / 2 - 1] + col[n / 2]) / 2.0,
                    Statistic::TrimmedMean(cut) => {
                        col[cut..n - cut].iter().sum::<f64>() / (n - 2 * cut) as f64
                    }
                }
            })
            .collect()
    }

    fn check(x: &[f64], n: usize, what: &str) {
        let c = x.len() / n;
        for stat in [
            Statistic::Median,
            Statistic::TrimmedMean(n / 10),
            Statistic::TrimmedMean(0),
            Statistic::TrimmedMean(n / 2 - 1),
        ] {
            let want = by_sorting(x, n, stat);
            let mut got = vec![f64::NAN; c];
            let (mut sq, mut gaps) = (vec![0.0; n], vec![0.0; n]);
            reduce_block(x, n, stat, &mut got, &mut sq, &mut gaps);
            for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                // sums in another order: rounding within n ulps of the column's largest magnitude
                let largest = (0..n).map(|r| x[r * c + j].abs()).fold(0.0, f64::max);
                let close = match stat {
                    Statistic::Median => g == w,
                    Statistic::TrimmedMean(_) => g == w || (g - w).abs() <= 1e-12 * largest,
                };
                assert!(close, "{what}: n = {n}, {stat:?}, column {j}: {g} instead of {w}");
            }
            for r in 0..n {
                let row = &x[r * c..(r + 1) * c];
                let want_sq: f64 = row.iter().map(|v| v * v).sum();
                let want_gap: f64 = row.iter().zip(&got).map(|(v, a)| (v - a) * (v - a)).sum();
                let near = |got: f64, want: f64| got == want || (got - want).abs() <= 1e-9 * want;
                assert!(near(sq[r], want_sq), "{what}: squares of row {r}: {} instead of {want_sq}", sq[r]);
                assert!(
                    near(gaps[r], want_gap),
                    "{what}: gaps of row {r}: {} instead of {want_gap}",
                    gaps[r]
                );
            }
        }
    }

    /// A small deterministic generator (no dependency for tests).
    fn noise(seed: u64) -> impl FnMut() -> f64 {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        }
    }

    #[test]
    fn counting_selection_equals_sorting_on_any_data() {
        // columns past one tile and not a multiple of the vector width
        for n in [33usize, 64, 127, 128, 257, 1000] {
            let c = 2 * Plan::new(n, Statistic::Median, Rows::F64(&[])).map_or(64, |p| p.width) + 13;
            let mut rnd = noise(n as u64);
            type Shape = Box<dyn Fn(usize, usize, f64) -> f64>;
            let shapes: Vec<(&str, Shape)> = vec![
                ("random", Box::new(|_, _, u| u)),
                ("rows in order", Box::new(|r, j, _| r as f64 * 0.01 + j as f64)),
                ("rows in reverse", Box::new(move |r, _, _| (n - r) as f64)),
                ("constant columns", Box::new(|_, j, _| j as f64 - 7.0)),
                ("three values", Box::new(|r, j, _| ((r * 7 + j) % 3) as f64)),
                ("signed zeros", Box::new(|r, _, _| if r % 2 == 0 { 0.0 } else { -0.0 })),
                // the sample rows hold the extremes: the first brackets miss every rank
                (
                    "misleading sample",
                    Box::new(move |r, _, u| {
                        if Plan::new(n, Statistic::Median, Rows::F64(&[]))
                            .is_some_and(|p| p.sample_rows.contains(&r))
                        {
                            1e6 * (1.0 + u)
                        } else {
                            u
                        }
                    }),
                ),
                (
                    "float64 extremes",
                    Box::new(
                        |r, _, u| if r % 3 == 0 { f64::MAX / 2048.0 * u } else { f64::MIN_POSITIVE * u },
                    ),
                ),
                (
                    "a repeated middle",
                    Box::new(move |r, _, u| if r > n / 4 && r < 3 * n / 4 { 2.5 } else { u }),
                ),
            ];
            for (what, shape) in &shapes {
                let x: Vec<f64> = (0..n * c).map(|i| shape(i / c, i % c, rnd())).collect();
                check(&x, n, what);
            }
        }
    }

    #[test]
    fn every_kernel_gives_the_statistics_of_a_sort() {
        // the plain loops (what AVX2 and other CPUs run) and, where the CPU has it, AVX-512:
        // whichever this machine dispatches to, both are checked here, on float64 tiles and on
        // float32 ones (values that float32 holds exactly, so both have the same sort)
        for n in [33usize, 1000] {
            let c = 3 * LANES + 5;
            let mut rnd = noise(7 * n as u64);
            let x: Vec<f64> =
                (0..n * c).map(|i| if i % 5 == 0 { 1.5 } else { f64::from(rnd() as f32) }).collect();
            let stored: Vec<u8> = x.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect();
            for stat in [Statistic::Median, Statistic::TrimmedMean(n / 10)] {
                let want = by_sorting(&x, n, stat);
                for rows in [Rows::F64(&x), Rows::Stored(&stored, Lanes::F32)] {
                    let Some(plan) = Plan::new(n, stat, rows) else { panic!("no plan for {n}") };
                    let run = |kernel: &str| {
                        let mut got = vec![f64::NAN; c];
                        let group: Vec<(usize, &mut [f64])> =
                            got.chunks_mut(plan.width).enumerate().collect();
                        let float32 = matches!(rows, Rows::Stored(..));
                        match (kernel, float32) {
                            #[cfg(target_arch = "x86_64")]
                            // SAFETY: only asked for when the CPU has AVX-512F (checked below)
                            ("avx512", false) => drop(unsafe { tiles_avx512::<f64>(rows, c, &plan, group) }),
                            #[cfg(target_arch = "x86_64")]
                            // SAFETY: as above
                            ("avx512", true) => drop(unsafe { tiles_avx512::<f32>(rows, c, &plan, group) }),
                            (_, false) => drop(tiles::<f64, Plain>(rows, c, &plan, group)),
                            (_, true) => drop(tiles::<f32, Plain>(rows, c, &plan, group)),
                        }
                        got
                    };
                    #[cfg(target_arch = "x86_64")]
                    let kernels = if std::is_x86_feature_detected!("avx512f") {
                        vec!["plain", "avx512"]
                    } else {
                        vec!["plain"]
                    };
                    #[cfg(not(target_arch = "x86_64"))]
                    let kernels = vec!["plain"];
                    for kernel in kernels {
                        for (j, (g, w)) in run(kernel).iter().zip(&want).enumerate() {
                            assert!(
                                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                                "{kernel}, n = {n}, {stat:?}, column {j}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_float32_pivot_orders_every_float32_as_the_float64_does() {
        let mut rnd = noise(11);
        let specials = [
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::from(f32::MAX),
            f64::from(f32::MAX).next_up(),
            f64::from(f32::MIN),
            f64::from(f32::MIN).next_down(),
            f64::MAX,
            -f64::MAX,
            f64::from(f32::MIN_POSITIVE),
            f64::from(f32::from_bits(1)) / 2.0,
            1.5f64.next_up(),
            1.5f64.next_down(),
        ];
        let pivots: Vec<f64> = specials.into_iter().chain((0..2000).map(|_| rnd() * 1e3)).collect();
        let values: Vec<f32> = specials
            .iter()
            .map(|&p| p as f32)
            .chain([1.5, 1.5f32.next_up(), 1.5f32.next_down(), f32::from_bits(1), -f32::from_bits(1)])
            .chain((0..2000).map(|_| (rnd() * 1e3) as f32))
            .filter(|v| v.is_finite())
            .collect();
        for &p in &pivots {
            let q = f32::pivot(p);
            for &v in &values {
                assert_eq!(f64::from(v) < p, v < q, "{v} < {p} (as float32 {q})");
                assert_eq!(f64::from(v) >= p, v >= q, "{v} >= {p} (as float32 {q})");
            }
        }
        assert!(f32::pivot(f64::NAN).is_nan());
    }

    #[test]
    fn float32_tiles_give_what_float64_tiles_of_the_same_values_give() {
        // the results bit for bit; each row's squares and distances to the result within rounding
        for n in [33usize, 100, 1000] {
            let c = 2 * 128 + 21;
            let mut rnd = noise(3 * n as u64);
            type Shape = Box<dyn Fn(usize, usize, f64) -> f32>;
            let shapes: [(&str, Shape); 6] = [
                ("random", Box::new(|_, _, u| u as f32)),
                ("constant columns", Box::new(|_, j, _| j as f32 - 7.0)),
                ("three values", Box::new(|r, j, _| ((r * 7 + j) % 3) as f32)),
                ("signed zeros", Box::new(|r, _, _| if r % 2 == 0 { 0.0 } else { -0.0 })),
                (
                    "float32 extremes",
                    Box::new(
                        |r, _, u| if r % 3 == 0 { f32::MAX * u as f32 } else { f32::MIN_POSITIVE * u as f32 },
                    ),
                ),
                (
                    "a repeated middle",
                    Box::new(move |r, _, u| if r > n / 4 && r < 3 * n / 4 { 2.5 } else { u as f32 }),
                ),
            ];
            for (what, shape) in &shapes {
                let x32: Vec<f32> = (0..n * c).map(|i| shape(i / c, i % c, rnd())).collect();
                let x: Vec<f64> = x32.iter().map(|&v| f64::from(v)).collect();
                let stored: Vec<u8> = x32.iter().flat_map(|v| v.to_le_bytes()).collect();
                for stat in [Statistic::Median, Statistic::TrimmedMean(n / 10), Statistic::TrimmedMean(0)] {
                    let (mut want, mut got) = (vec![0.0; c], vec![0.0; c]);
                    let (mut sq64, mut gp64, mut sq32, mut gp32) =
                        (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
                    reduce_block(&x, n, stat, &mut want, &mut sq64, &mut gp64);
                    super::super::columns::reduce_stored_block(
                        &stored,
                        Lanes::F32,
                        n,
                        stat,
                        &mut got,
                        &mut sq32,
                        &mut gp32,
                    );
                    let first_other =
                        |a: &[f64], b: &[f64]| a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits());
                    assert_eq!(first_other(&got, &want), None, "{what}: n = {n}, {stat:?}: results");
                    // the diagnostics add up tiles of another width: the same within rounding
                    let near =
                        |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-12 * y.abs());
                    assert!(near(&sq32, &sq64), "{what}: n = {n}, {stat:?}: squares");
                    assert!(near(&gp32, &gp64), "{what}: n = {n}, {stat:?}: distances");
                }
            }
        }
    }
}
