//! The end of a round that kept its uploads: the robust methods (median, trimmed mean, Krum,
//! MultiKrum, Bulyan) and update hygiene (updates against the global model, norm clipping,
//! Gaussian noise), each upload's values read again chunk by chunk, never all at once.
//!
//! Each sweep holds one chunk of every upload, an `N × chunk` float64 block of at most
//! `chunk_bytes` bytes (at least 1,024 lanes per upload), so memory is O(N × chunk) + O(one model)
//! for the result. The sweeps: the updates' norms (clipping), their pairwise distances (Krum's
//! family), then the aggregate itself. The median and trimmed mean of plain uploads are read and
//! reduced as the files store them (`rows.rs`), without a float64 block. Definitions follow
//! Flower's `flwr.server.strategy.aggregate` functions; the tests compare against them.

use super::super::block::Statistic;
use super::super::columns::reduce_block;
use super::super::distances::add_pairwise;
use super::super::rows::{read_rows, reduce_tensor, RowSource, MIN_CHUNK_LANES};
use super::super::structure::Located;
use super::members::Member;
use super::noise::add_noise;
use super::options::{Method, Options};
use crate::values::Lanes;
use crate::Error;

/// What the end of the round found about one kept upload (in the order they were accepted).
#[derive(Clone, Debug, PartialEq)]
pub struct MemberReport {
    /// Its label.
    pub label: String,
    /// The weight it was accepted with.
    pub weight: f64,
    /// The L2 norm of its update (of its values, without `relative_to`), before clipping.
    pub norm: f64,
    /// Whether it was scaled down to the clipping norm.
    pub clipped: bool,
    /// The L2 distance of its (clipped) update to the aggregate (before noise).
    pub distance: f64,
    /// Krum's score (Krum's family only): the sum of its n - f - 2 smallest squared distances.
    pub krum_score: Option<f64>,
    /// Whether the method kept it (Krum's family; the others keep every upload).
    pub selected: bool,
}

/// A pass that failed: the kept upload (its position among the members) whose read failed, when
/// one did (the others: the global model's read, or no read at all), and why. A member whose
/// values were not checked when it was accepted fails here when one of them is not finite (see
/// `Round::finish`).
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) member: Option<usize>,
    pub(crate) error: Error,
}

impl From<Error> for Failed {
    fn from(error: Error) -> Failed {
        Failed { member: None, error }
    }
}

impl From<Failed> for Error {
    fn from(failed: Failed) -> Error {
        failed.error
    }
}

/// A member's read that failed, as a [`Failed`] naming it.
fn of_member((member, error): (usize, Error)) -> Failed {
    Failed { member: Some(member), error }
}

/// numpy's pairwise summation (`np.sum` of a float64 vector): the same rounding as numpy.
fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        return a.iter().fold(0.0, |s, v| s + v);
    }
    if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(a.get(..8).unwrap_or(&[0.0; 8]));
        let whole = n - n % 8;
        for block in a.get(8..whole).unwrap_or_default().chunks_exact(8) {
            for (acc, v) in r.iter_mut().zip(block) {
                *acc += v;
            }
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for v in a.get(whole..).unwrap_or_default() {
            res += v;
        }
        return res;
    }
    let mut half = n / 2;
    half -= half % 8;
    let (lo, hi) = a.split_at(half);
    pairwise_sum(lo) + pairwise_sum(hi)
}

/// Flower's Krum score: per upload, the sum of its `n - f - 2` (at least 1) smallest distances to
/// the others (`d`: the `n × n` squared distances).
fn krum_scores(d: &[f64], n: usize, byzantine: usize) -> Vec<f64> {
    let closest = n.saturating_sub(byzantine).saturating_sub(2).max(1);
    (0..n)
        .map(|i| {
            let mut row: Vec<f64> = d.get(i * n..(i + 1) * n).unwrap_or_default().to_vec();
            row.sort_by(f64::total_cmp);
            row.iter().skip(1).take(closest).fold(0.0, |s, v| s + v)
        })
        .collect()
}

/// The index of the smallest value (the first of equals), as numpy's `argmin`.
fn argmin(values: &[f64]) -> usize {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if v.total_cmp(&values[best]).is_lt() {
            best = i;
        }
    }
    best
}

/// Flower's Bulyan selection: n - 2f rounds of Krum, each removing its pick.
fn bulyan_select(d: &[f64], n: usize, byzantine: usize) -> Vec<usize> {
    let mut remaining: Vec<usize> = (0..n).collect();
    let mut chosen = Vec::new();
    for _ in 0..n.saturating_sub(2 * byzantine) {
        let m = remaining.len();
        let sub: Vec<f64> = remaining
            .iter()
            .flat_map(|&i| remaining.iter().map(move |&j| (i, j)))
            .map(|(i, j)| d.get(i * n + j).copied().unwrap_or(f64::INFINITY))
            .collect();
        let best = argmin(&krum_scores(&sub, m, byzantine));
        chosen.push(remaining.remove(best));
    }
    chosen
}

/// Which uploads the method keeps, in the order their values are added (Flower's), and each
/// upload's Krum score (Krum's family).
fn selection(method: Method, d: &[f64], n: usize) -> (Vec<usize>, Option<Vec<f64>>) {
    match method {
        Method::Krum { byzantine } => {
            let scores = krum_scores(d, n, byzantine);
            (vec![argmin(&scores)], Some(scores))
        }
        Method::MultiKrum { byzantine, keep } => {
            let scores = krum_scores(d, n, byzantine);
            let keep = keep.unwrap_or(n.saturating_sub(byzantine)).min(n);
            // np.argsort(scores)[::-1][n - keep:]: the keep smallest, largest score first
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
            let mut kept: Vec<usize> = order.into_iter().take(keep).collect();
            kept.reverse();
            (kept, Some(scores))
        }
        Method::Bulyan { byzantine } => {
            let scores = krum_scores(d, n, byzantine);
            (bulyan_select(d, n, byzantine), Some(scores))
        }
        _ => ((0..n).collect(), None),
    }
}

/// A run of lanes of one slot (tensor): lanes `first..first + count` of slot `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The slot.
    pub slot: usize,
    /// Its first lane.
    pub first: usize,
    /// How many lanes.
    pub count: usize,
}

/// The segments of lanes `start..end` of the model, all slots one after another (`lanes` per slot).
pub fn segments(lanes: &[usize], start: usize, end: usize) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for (slot, &n) in lanes.iter().enumerate() {
        let (lo, hi) = (start.max(at), end.min(at.saturating_add(n)));
        if lo < hi {
            out.push(Segment { slot, first: lo - at, count: hi - lo });
        }
        at = at.saturating_add(n);
    }
    out
}

/// How the last pass aggregates each column, decided from the earlier passes.
pub struct Plan {
    /// The method.
    pub method: Method,
    /// The uploads the method keeps, in the order their values are added.
    pub selected: Vec<usize>,
    /// Each upload's weight.
    pub weights: Vec<f64>,
    /// Each upload's scale (clipping; 1 without).
    pub scale: Vec<f64>,
    /// The noise's seed and standard deviation, when there is noise.
    pub noise: Option<(u64, f64)>,
    /// Whether each row's squares were summed by an earlier pass (the last one then does not).
    pub counted: bool,
}

/// What the last pass gives for its lanes: the aggregate, and per upload the squared distance to
/// it (and its squares, when no earlier pass summed them).
pub struct Reduced {
    /// The aggregate of the pass's lanes, segment after segment (all slots in order on one
    /// machine) but those in `rounded_values`: one allocation, backed by huge pages (see
    /// `platform::huge_f64s`).
    pub values: Vec<f64>,
    /// The aggregate of the segments `rounded` marks, after one another, rounded to float32 as
    /// it was computed (see `Passes::reduce`); empty when none is.
    pub rounded_values: Vec<f32>,
    /// Whether every value in `rounded_values` is finite (checked as they were written).
    pub rounded_finite: bool,
    /// Per slot, whether its values are in `rounded_values` (empty: none is). By slot, not by
    /// segment: `Values::slots` reads it by slot, and a slot without lanes has no segment.
    pub rounded: Vec<bool>,
    /// Per upload: the sum of its squared distances to the aggregate over these lanes.
    pub gaps: Vec<f64>,
    /// Per upload: the sum of its squared values over these lanes (zeros when `counted`).
    pub squares: Vec<f64>,
}

impl Reduced {
    /// A cluster's reduction as [`Round::finish_remote`](super::Round::finish_remote) takes it:
    /// the tasks' float64 values and summed gaps (nothing rounded; the squares given apart).
    pub fn of_cluster(values: Vec<f64>, gaps: Vec<f64>) -> Reduced {
        let (rounded_values, rounded, squares) = (Vec::new(), Vec::new(), Vec::new());
        Reduced { values, rounded_values, rounded_finite: true, rounded, gaps, squares }
    }
}

/// The passes over some lanes of every kept upload (all of them for a round on one machine, a
/// range of them for a cluster's task): each reads an `N × chunk` block at a time, the rows being
/// the uploads' values minus the global model's, times each upload's scale.
pub(crate) struct Passes<'a> {
    sources: Vec<RowSource<'a>>,
    members: &'a [Member],
    base: Option<&'a Member>,
    segments: Vec<Segment>,
    per: usize,
    chunk_bytes: usize,
}

impl<'a> Passes<'a> {
    pub(crate) fn new(
        members: &'a [Member],
        base: Option<&'a Member>,
        segments: Vec<Segment>,
        chunk_bytes: usize,
    ) -> Self {
        let n = members.len().max(1);
        let per = (chunk_bytes / (8 * n)).max(MIN_CHUNK_LANES);
        let sources = members.iter().map(|m| m.held.source()).collect();
        Passes { sources, members, base, segments, per, chunk_bytes }
    }

    fn locations(members: &[&Member], slot: usize) -> Result<Vec<Located>, Error> {
        members
            .iter()
            .map(|m| m.located.get(slot).cloned())
            .collect::<Option<_>>()
            .ok_or_else(|| Error::Internal { detail: "a kept upload without the reference's tensors".into() })
    }

    /// Calls `visit((k, segment), first, at, x, base)` for every chunk: `x` the `N × count` block
    /// of lanes `first..` of segment `k`'s slot (minus the global model's values `base`, times
    /// `scale` per member), `at` where the chunk starts in the segment.
    fn run(
        &self,
        scale: &[f64],
        mut visit: impl FnMut((usize, Segment), usize, usize, &mut [f64], Option<&[f64]>) -> Result<(), Error>,
    ) -> Result<(), Failed> {
        let n = self.members.len();
        let widest = self.segments.iter().map(|s| s.count).max().unwrap_or(0).min(self.per);
        let mut block = vec![0.0f64; n * widest];
        let mut base_row = vec![0.0f64; if self.base.is_some() { widest } else { 0 }];
        let refs: Vec<&Member> = self.members.iter().collect();
        let unscaled = scale.iter().all(|&s| s == 1.0);
        for (k, &segment) in self.segments.iter().enumerate() {
            let locations = Self::locations(&refs, segment.slot)?;
            let base_location = match self.base {
                Some(b) => Some(Self::locations(&[b], segment.slot)?),
                None => None,
            };
            let mut done = 0;
            while done < segment.count {
                let count = self.per.min(segment.count - done);
                let first = segment.first + done;
                let x = block.get_mut(..n * count).unwrap_or_default();
                read_rows(&self.sources, &locations, first, count, x).map_err(of_member)?;
                let base_values = match (self.base, &base_location) {
                    (Some(b), Some(loc)) => {
                        let row = base_row.get_mut(..count).unwrap_or_default();
                        read_rows(&[b.held.source()], loc, first, count, row).map_err(|(_, e)| e)?;
                        for r in x.chunks_mut(count) {
                            r.iter_mut().zip(row.iter()).for_each(|(v, g)| *v -= g);
                        }
                        Some(&*row)
                    }
                    _ => None,
                };
                if !unscaled {
                    for (r, &s) in x.chunks_mut(count).zip(scale) {
                        r.iter_mut().for_each(|v| *v *= s);
                    }
                }
                visit((k, segment), first, done, x, base_values)?;
                done += count;
            }
        }
        Ok(())
    }

    /// Per upload, the first slot where its update (its values minus the global model's) is not
    /// finite in float64 (finite values of opposite signs near the limit), over these lanes.
    pub(crate) fn update_overflows(&self) -> Result<Vec<Option<usize>>, Failed> {
        let n = self.members.len();
        let mut first: Vec<Option<usize>> = vec![None; n];
        self.run(&vec![1.0; n], |(_, segment), _, _, x, _| {
            let count = x.len() / n.max(1);
            for (row, found) in x.chunks(count.max(1)).zip(first.iter_mut()) {
                if found.is_none() && !row.iter().all(|v| v.is_finite()) {
                    *found = Some(segment.slot);
                }
            }
            Ok(())
        })?;
        Ok(first)
    }

    /// Per upload, the sum of the squares of its update over these lanes (for its norm).
    pub(crate) fn squares(&self) -> Result<Vec<f64>, Failed> {
        let n = self.members.len();
        let mut squares = vec![0.0f64; n];
        self.run(&vec![1.0; n], |_, _, _, x, _| {
            add_squares(x, x.len() / n.max(1), &mut squares);
            Ok(())
        })?;
        Ok(squares)
    }

    /// The `N × N` squared distances between the (scaled) updates over these lanes, and each
    /// update's squares.
    pub(crate) fn distances(&self, scale: &[f64]) -> Result<(Vec<f64>, Vec<f64>), Failed> {
        let n = self.members.len();
        let (mut d, mut squares) = (vec![0.0f64; n * n], vec![0.0f64; n]);
        self.run(scale, |_, _, _, x, _| {
            add_pairwise(x, n, &mut d);
            add_squares(x, x.len() / n.max(1), &mut squares);
            Ok(())
        })?;
        Ok((d, squares))
    }

    /// The last pass: the aggregate of these lanes per `plan`. With `float32`, a plain median or
    /// trimmed mean (no global model, no clipping, no noise) gives the slots the uploads store as
    /// float32 already rounded to float32 (`Reduced::rounded_values`): the caller would round
    /// them so anyway, and a float64 copy of the model is never written.
    pub(crate) fn reduce(&self, plan: &Plan, float32: bool) -> Result<Reduced, Failed> {
        let n = self.members.len();
        let (mut gaps, mut squares, mut unused) = (vec![0.0f64; n], vec![0.0f64; n], vec![0.0f64; n]);
        let statistic = match plan.method {
            Method::Median => Some(Statistic::Median),
            Method::TrimmedMean { trim } => Some(Statistic::TrimmedMean((trim * n as f64) as usize)), // int(trim * n)
            _ => None,
        };
        let plain = self.base.is_none() && plan.scale.iter().all(|&s| s == 1.0);
        if let (Some(stat), true) = (statistic, plain) {
            let rows_squares = if plan.counted { &mut unused } else { &mut squares };
            let float32 = float32 && plan.noise.is_none();
            let Split { values, rounded_values, rounded, rounded_finite } =
                self.reduce_stored(stat, float32, plan.noise, rows_squares, &mut gaps)?;
            return Ok(Reduced { values, rounded_values, rounded, rounded_finite, gaps, squares });
        }
        // one allocation for every segment, every value written before it is read (fresh pages,
        // huge ones: no zeroing pass, 512 times fewer faults than one small vector per tensor)
        let total = self.segments.iter().map(|s| s.count).sum();
        let mut flat = crate::platform::huge_f64s(total, false);
        let mut values = segment_views(&mut flat, &self.segments);
        self.run(&plan.scale, |(k, segment), first, at, x, base_values| {
            let count = x.len() / n.max(1);
            let Some(agg) = values.get_mut(k).and_then(|v| v.get_mut(at..at + count)) else {
                return Err(Error::Internal { detail: "a chunk outside the aggregate".into() });
            };
            match (statistic, plan.method) {
                (Some(stat), _) => {
                    let rows_squares = if plan.counted { &mut unused } else { &mut squares };
                    reduce_block(x, n, stat, agg, rows_squares, &mut gaps);
                }
                (None, Method::Krum { .. }) => {
                    let r = plan.selected.first().copied().unwrap_or(0);
                    agg.copy_from_slice(x.get(r * count..(r + 1) * count).unwrap_or(&vec![0.0; count]));
                }
                (None, Method::Bulyan { byzantine }) => {
                    let beta = plan.selected.len().saturating_sub(2 * byzantine).max(1);
                    bulyan_columns(x, count, &plan.selected, beta, agg);
                }
                (None, _) => weighted_mean(x, count, &plan.selected, &plan.weights, agg),
            }
            if statistic.is_none() {
                if !plan.counted {
                    add_squares(x, count, &mut squares);
                }
                add_gaps(x, agg, &mut gaps);
            }
            if let Some((seed, std)) = plan.noise {
                add_noise(seed, std, segment.slot, first, agg);
            }
            if let Some(g) = base_values {
                agg.iter_mut().zip(g).for_each(|(a, v)| *a += v);
            }
            Ok(())
        })?;
        drop(values);
        let rounded_values = Vec::new();
        Ok(Reduced { values: flat, rounded_values, rounded: Vec::new(), rounded_finite: true, gaps, squares })
    }

    /// The median or trimmed mean of plain uploads, read as the files store them (no float64
    /// block), segment by segment, with `noise` added: the float64 values, and with `float32`
    /// the float32 segments' values rounded to float32 (and which segments those are).
    ///
    /// A rounded segment is reduced [`ROUNDED_LANES`] at a time into one float64 scratch and
    /// rounded from there, so the round's fresh memory is the float32 result alone (a float64
    /// copy of it was twice its size, every page of it cleared by the kernel, then read again to
    /// round it). The median or trimmed mean of finite float32 values lies between two of them,
    /// so it is finite in float32 too: nothing is left to check.
    fn reduce_stored(
        &self,
        stat: Statistic,
        float32: bool,
        noise: Option<(u64, f64)>,
        squares: &mut [f64],
        gaps: &mut [f64],
    ) -> Result<Split, Failed> {
        let refs: Vec<&Member> = self.members.iter().collect();
        let located =
            self.segments.iter().map(|s| Self::locations(&refs, s.slot)).collect::<Result<Vec<_>, _>>()?;
        let rounded: Vec<bool> =
            located.iter().map(|l| float32 && l.first().is_some_and(|l| l.lanes == Lanes::F32)).collect();
        let lanes_where = |wanted: bool| -> Vec<usize> {
            self.segments.iter().zip(&rounded).filter(|(_, &r)| r == wanted).map(|(s, _)| s.count).collect()
        };
        let (wide_counts, narrow_counts) = (lanes_where(false), lanes_where(true));
        let mut wide = crate::platform::huge_f64s(wide_counts.iter().sum(), false);
        let mut narrow = crate::platform::huge_f32s(narrow_counts.iter().sum());
        let widest = narrow_counts.iter().copied().max().unwrap_or(0).min(ROUNDED_LANES);
        let mut scratch = vec![0.0f64; widest];
        let (mut wide_rest, mut narrow_rest) = (wide.as_mut_slice(), narrow.as_mut_slice());
        let mut block: Vec<u8> = Vec::new();
        let mut finite = true;
        for ((s, locations), &r) in self.segments.iter().zip(&located).zip(&rounded) {
            if r {
                let take = s.count.min(narrow_rest.len());
                let (out, rest) = std::mem::take(&mut narrow_rest).split_at_mut(take);
                narrow_rest = rest;
                for (k, part) in out.chunks_mut(ROUNDED_LANES).enumerate() {
                    let values = scratch.get_mut(..part.len()).unwrap_or_default();
                    let first = s.first + k * ROUNDED_LANES;
                    let (sources, chunk) = (&self.sources, self.chunk_bytes);
                    reduce_tensor(sources, locations, first, stat, values, squares, gaps, chunk, &mut block)
                        .map_err(of_member)?;
                    // finite by construction (see above); checked as they are written even so,
                    // for nothing: a caller need not check them again
                    for (p, &v) in part.iter_mut().zip(values.iter()) {
                        *p = v as f32;
                        finite &= p.is_finite();
                    }
                }
                continue;
            }
            let take = s.count.min(wide_rest.len());
            let (out, rest) = std::mem::take(&mut wide_rest).split_at_mut(take);
            wide_rest = rest;
            reduce_tensor(
                &self.sources,
                locations,
                s.first,
                stat,
                out,
                squares,
                gaps,
                self.chunk_bytes,
                &mut block,
            )
            .map_err(of_member)?;
            if let Some((seed, std)) = noise {
                add_noise(seed, std, s.slot, s.first, out);
            }
        }
        let rounded = if float32 { by_slot(&self.segments, &rounded) } else { Vec::new() };
        Ok(Split { values: wide, rounded_values: narrow, rounded, rounded_finite: finite })
    }
}

/// Values of segments split by type: the float64 ones, the rounded ones, per slot whether it is
/// rounded, and whether the rounded ones are all finite (see [`Reduced`]).
struct Split {
    values: Vec<f64>,
    rounded_values: Vec<f32>,
    rounded: Vec<bool>,
    rounded_finite: bool,
}

/// Per slot, whether any of its segments is rounded (`rounded`: per segment): a slot without
/// lanes has no segment, so the flags of the segments after it would name the wrong slots.
pub(super) fn by_slot(segments: &[Segment], rounded: &[bool]) -> Vec<bool> {
    let mut out = vec![false; segments.last().map_or(0, |s| s.slot.saturating_add(1))];
    for (s, &r) in segments.iter().zip(rounded) {
        if let Some(flag) = out.get_mut(s.slot) {
            *flag |= r;
        }
    }
    out
}

/// Lanes of a float32 segment reduced at a time before they are rounded (8 MiB of float64
/// scratch: a tensor up to this size is reduced in one call, as a float64 one is).
const ROUNDED_LANES: usize = 1 << 20;

/// Mutable views of `flat`, one per segment, in order.
fn segment_views<'a>(flat: &'a mut [f64], segments: &[Segment]) -> Vec<&'a mut [f64]> {
    let mut out = Vec::with_capacity(segments.len());
    let mut rest = flat;
    for s in segments {
        let take = s.count.min(rest.len());
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(take);
        out.push(head);
        rest = tail;
    }
    out
}

/// Each row's sum of squares, added into `squares`. Finite values near float64's limit square to
/// infinity: that is their norm (a diagnostic; clipping then scales such an update to zero).
fn add_squares(x: &[f64], count: usize, squares: &mut [f64]) {
    for (row, s) in x.chunks(count.max(1)).zip(squares.iter_mut()) {
        *s += row.iter().map(|v| v * v).sum::<f64>();
    }
}

/// Each row's squared distance to `agg`, added into `gaps`.
fn add_gaps(x: &[f64], agg: &[f64], gaps: &mut [f64]) {
    let count = agg.len().max(1);
    for (row, g) in x.chunks(count).zip(gaps.iter_mut()) {
        *g += row.iter().zip(agg).map(|(v, a)| (v - a) * (v - a)).sum::<f64>();
    }
}

/// The weighted mean of `rows` of the block (Flower's `aggregate`: one upload after the other,
/// then divided by the weights' sum); if that sum passes float64's limit, the mean of the rows
/// scaled by their share instead (finite whenever the values are).
fn weighted_mean(x: &[f64], count: usize, rows: &[usize], weights: &[f64], out: &mut [f64]) {
    let chosen: Vec<f64> = rows.iter().map(|&r| weights.get(r).copied().unwrap_or(0.0)).collect();
    let total = pairwise_sum(&chosen);
    let row = |r: usize| x.get(r * count..(r + 1) * count).unwrap_or_default();
    out.fill(0.0);
    for (k, (&r, &w)) in rows.iter().zip(&chosen).enumerate() {
        for (o, v) in out.iter_mut().zip(row(r)) {
            *o = if k == 0 { v * w } else { *o + v * w };
        }
    }
    out.iter_mut().for_each(|o| *o /= total);
    if out.iter().all(|v| v.is_finite()) {
        return;
    }
    out.fill(0.0);
    for (&r, &w) in rows.iter().zip(&chosen) {
        let share = w / total;
        for (o, v) in out.iter_mut().zip(row(r)) {
            *o += v * share;
        }
    }
}

/// Bulyan's aggregate of each column: the mean of the `beta` values of `rows` closest to their
/// median (Flower's `_aggregate_n_closest_weights`, ties by upload order).
fn bulyan_columns(x: &[f64], count: usize, rows: &[usize], beta: usize, out: &mut [f64]) {
    let k = rows.len();
    let mut y = vec![0.0f64; k * count];
    for (dst, &r) in y.chunks_mut(count.max(1)).zip(rows) {
        dst.copy_from_slice(x.get(r * count..(r + 1) * count).unwrap_or(&vec![0.0; count]));
    }
    let mut med = vec![0.0f64; count];
    // the one median of the aggregation (the statistic of a block), its row sums unused here
    reduce_block(&y, k, Statistic::Median, &mut med, &mut vec![0.0; k], &mut vec![0.0; k]);
    let mut order: Vec<usize> = Vec::with_capacity(k);
    let mut kept = vec![0.0f64; beta];
    for (j, (o, m)) in out.iter_mut().zip(&med).enumerate() {
        let value = |r: usize| y.get(r * count + j).copied().unwrap_or(f64::NAN);
        order.clear();
        order.extend(0..k);
        order.sort_by(|&a, &b| (m - value(a)).abs().total_cmp(&(m - value(b)).abs()));
        for (slot, &r) in kept.iter_mut().zip(&order) {
            *slot = value(r);
        }
        let mean = kept.iter().fold(0.0, |s, v| s + v) / beta as f64;
        *o = if mean.is_finite() { mean } else { kept.iter().fold(0.0, |s, v| s + v / beta as f64) };
    }
}

/// Each upload's clipping scale from its squared norm (Flower: `min(1, c / norm)`).
pub fn clip_scale(squares: &[f64], clip_norm: Option<f64>) -> Vec<f64> {
    match clip_norm {
        Some(c) => squares.iter().map(|s| (c / s.sqrt()).min(1.0)).collect(),
        None => vec![1.0; squares.len()],
    }
}

/// The plan of the last pass from what the earlier passes found (`d`: the squared distances,
/// for Krum's family), and each upload's Krum score.
pub fn plan_of(
    options: &Options,
    weights: Vec<f64>,
    scale: Vec<f64>,
    d: &[f64],
    seed: u64,
) -> (Plan, Option<Vec<f64>>) {
    let n = weights.len();
    let (selected, scores) = selection(options.method, d, n);
    let counted = options.clip_norm.is_some() || options.method.uses_distances();
    let noise = options.noise_std(n).map(|std| (seed, std));
    (Plan { method: options.method, selected, weights, scale, noise, counted }, scores)
}

/// The aggregate of the kept uploads (`members`, and the global model `base` when the uploads are
/// updates of it) per `options`, slot after slot (with `float32`, float32 slots may come rounded:
/// see [`Passes::reduce`]), and what was found about each.
pub(crate) fn aggregate(
    lanes: &[usize],
    options: &Options,
    members: &[Member],
    base: Option<&Member>,
    float32: bool,
) -> Result<(Reduced, Vec<MemberReport>), Failed> {
    let n = members.len();
    let total: usize = lanes.iter().sum();
    let passes = Passes::new(members, base, segments(lanes, 0, total), options.chunk_bytes);
    let mut squares = if options.clip_norm.is_some() { passes.squares()? } else { vec![0.0; n] };
    let scale = clip_scale(&squares, options.clip_norm);
    let mut d = Vec::new();
    if options.method.uses_distances() {
        let (distances, sq) = passes.distances(&scale)?;
        d = distances;
        if options.clip_norm.is_none() {
            squares = sq;
        }
    }
    let weights = members.iter().map(|m| m.weight).collect();
    let (plan, scores) = plan_of(options, weights, scale, &d, options.seed.unwrap_or_else(random_seed));
    let mut reduced = passes.reduce(&plan, float32)?;
    if !plan.counted {
        squares = std::mem::take(&mut reduced.squares);
    }
    // every read of the round is done: an upload changed in place since its check (its size or
    // modification time) fails the round, since values read from it may be in the result
    for m in members.iter().chain(base) {
        m.held.confirm_unchanged()?;
    }
    let reports = reports(members, &plan, &squares, &reduced.gaps, scores.as_deref());
    Ok((reduced, reports))
}

/// What the round found about each kept upload.
pub(crate) fn reports(
    members: &[Member],
    plan: &Plan,
    squares: &[f64],
    gaps: &[f64],
    scores: Option<&[f64]>,
) -> Vec<MemberReport> {
    members
        .iter()
        .enumerate()
        .map(|(i, m)| MemberReport {
            label: m.label.clone(),
            weight: m.weight,
            norm: squares.get(i).map_or(0.0, |s| s.sqrt()),
            clipped: plan.scale.get(i).is_some_and(|&s| s < 1.0),
            distance: gaps.get(i).map_or(0.0, |g| g.sqrt()),
            krum_score: scores.and_then(|s| s.get(i).copied()),
            selected: plan.selected.contains(&i),
        })
        .collect()
}

/// A seed from the operating system, for rounds given none.
pub fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    // without a random source the noise would be predictable: a fixed fallback is worse than
    // none, so the time and the address space's layout are mixed in as a last resort
    if getrandom::fill(&mut bytes).is_err() {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        return (now as u64) ^ (&bytes as *const _ as u64);
    }
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairwise_sum_is_numpys() {
        // numpy: np.sum(np.array([1e16, 1.0, -1e16] + [1.0] * 10)) == 9.0 (eight partial sums:
        // 1e16 + 1 and -1e16 + 1 each lose their 1)
        let mut a = vec![1e16, 1.0, -1e16];
        a.extend(std::iter::repeat_n(1.0, 10));
        assert_eq!(pairwise_sum(&a), 9.0);
        // numpy: np.sum(np.sin(np.arange(1000.0))) == -0.01290990645883694
        let sines: Vec<f64> = (0..1000).map(|i| (i as f64).sin()).collect();
        assert_eq!(pairwise_sum(&sines), -0.01290990645883694);
        assert_eq!(pairwise_sum(&[0.1, 0.2, 0.3]), 0.1 + 0.2 + 0.3);
        let long: Vec<f64> = (0..1000).map(|i| (i as f64).sin()).collect();
        let (lo, hi) = long.split_at(496);
        assert_eq!(pairwise_sum(&long), pairwise_sum(lo) + pairwise_sum(hi));
    }

    #[test]
    fn krum_and_its_family_select_as_flower_does() {
        // four points on a line at 0, 1, 2 and 10: squared distances
        let p = [0.0f64, 1.0, 2.0, 10.0];
        let n = p.len();
        let d: Vec<f64> = (0..n * n).map(|k| (p[k / n] - p[k % n]).powi(2)).collect();
        // f = 1: n - f - 2 = 1 closest: scores 1, 1, 1, 64
        assert_eq!(krum_scores(&d, n, 1), vec![1.0, 1.0, 1.0, 64.0]);
        assert_eq!(selection(Method::Krum { byzantine: 1 }, &d, n).0, vec![0]);
        // multi_krum keeps the n - f smallest, largest score first (ties by position)
        assert_eq!(selection(Method::MultiKrum { byzantine: 1, keep: None }, &d, n).0, vec![2, 1, 0]);
        assert_eq!(selection(Method::MultiKrum { byzantine: 0, keep: Some(1) }, &d, n).0, vec![1]);
        // more attackers than uploads: never an index out of range
        assert_eq!(selection(Method::MultiKrum { byzantine: 9, keep: None }, &d, n).0, Vec::<usize>::new());
        assert_eq!(bulyan_select(&d, n, 1), vec![0, 1]);
    }

    #[test]
    fn bulyan_averages_the_values_closest_to_the_median() {
        // 5 rows, one column: 1, 2, 3, 100, -100; median 2: the 3 closest are 2, 1, 3
        let x = [1.0, 2.0, 3.0, 100.0, -100.0];
        let mut out = [0.0];
        bulyan_columns(&x, 1, &[0, 1, 2, 3, 4], 3, &mut out);
        assert_eq!(out[0], (2.0 + 1.0 + 3.0) / 3.0);
    }

    #[test]
    fn a_weighted_mean_past_float64_falls_back_to_shares() {
        let x = [1.5e308, 1.5e308];
        let mut out = [0.0];
        weighted_mean(&x, 1, &[0, 1], &[1.0, 1.0], &mut out);
        assert_eq!(out[0], 1.5e308);
    }
}
