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
//!
//! The row loops behind the passes are a contract ([`kernel`]) with two implementations: the
//! plain one (also compiled a second time with AVX2) and the AVX-512 one ([`avx512`]); which
//! runs is the process's SIMD level ([`crate::simd`]). All give the same results.

#[cfg(target_arch = "x86_64")]
mod avx512;
mod kernel;
#[cfg(test)]
mod tests;

use super::block::{dot, network, sort_tile, squared_distance, RowSums, Rows, Statistic};
#[cfg(target_arch = "x86_64")]
use crate::simd::{simd_level, SimdLevel};
use crate::values::Lanes;
#[cfg(target_arch = "x86_64")]
use avx512::Avx512;
use kernel::{Elem, Kernel, Lane, Plain, LANES};

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
/// and squared distances to the result. The loops run with AVX-512 or AVX2 where the SIMD level
/// allows them (the wheels target baseline x86-64).
pub(super) fn many_tiles(x: Rows<'_>, c: usize, plan: &Plan, group: Vec<(usize, &mut [f64])>) -> RowSums {
    if let Rows::Stored(_, Lanes::F32) = x {
        return many_tiles_of::<f32>(x, c, plan, group);
    }
    many_tiles_of::<f64>(x, c, plan, group)
}

/// [`many_tiles`] with tiles of `E`, on the loops of the process's SIMD level.
fn many_tiles_of<E: Elem>(x: Rows<'_>, c: usize, plan: &Plan, group: Vec<(usize, &mut [f64])>) -> RowSums
where
    Plain: Kernel<E>,
    Avx512Where: Kernel<E>,
{
    #[cfg(target_arch = "x86_64")]
    match simd_level() {
        // SAFETY: the level is AVX-512 only when the CPU has AVX-512F (and AVX2), all
        // `tiles_avx512` requires.
        SimdLevel::Avx512 => return unsafe { tiles_avx512::<E>(x, c, plan, group) },
        // SAFETY: the level is AVX2 or higher only when the CPU has AVX2, all `tiles_avx2` requires.
        SimdLevel::Avx2 => return unsafe { tiles_avx2::<E>(x, c, plan, group) },
        SimdLevel::Plain => {}
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
