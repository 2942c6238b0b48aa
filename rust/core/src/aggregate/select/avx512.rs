//! The selection's row loops with AVX-512 intrinsics ([`Avx512`], run only where the CPU reports
//! AVX-512F and the SIMD level allows it): compares give bit masks, where the plain loops build a
//! hit mask lane by lane (the most expensive step of their pass). Written once for float64 (eight
//! columns to a register) and float32 (sixteen) through [`Register`].

use super::kernel::{Elem, Kernel, Lane, LANES};

/// Whether `width` columns from `g0` of every row lie inside `rows` (every AVX-512 load relies
/// on it).
#[cfg(target_arch = "x86_64")]
pub(super) fn fits<E>(rows: &[E], stride: usize, g0: usize, width: usize, n: usize) -> bool {
    g0 + width <= stride && rows.len() >= n.saturating_mul(stride)
}

/// The AVX-512 loops (only run where the CPU reports AVX-512F).
#[cfg(target_arch = "x86_64")]
pub(super) struct Avx512;

/// A tile's values as one 512-bit register holds them: the operations the AVX-512 loops need,
/// so that the loops are written once for float64 (eight columns to a register) and float32
/// (sixteen). Every function is only reached from functions compiled with AVX-512F, run when
/// the CPU has it.
#[cfg(target_arch = "x86_64")]
pub(super) trait Register: Elem {
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
