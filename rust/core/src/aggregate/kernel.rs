//! The FedAvg kernel: add `weight × value` of every averaged tensor of one upload into float64
//! accumulators, after checking the whole upload (a rejected upload never reaches the sums).
//!
//! Two passes over the upload's bytes, each spread over the cores in chunks: the first checks
//! that every value is finite and finds the largest magnitude of each tensor; the second adds.
//! Two passes, because the sum cannot be undone exactly: a value found bad after part of the
//! upload was added would leave that part in. The second pass reads bytes the first one just
//! read (private memory), so it costs memory bandwidth, not I/O.
//!
//! Overflow: each accumulator keeps a bound on its magnitude (the sum of `weight × largest` of
//! what it received). While the bound is finite no sum can overflow; when an upload would make
//! it infinite, that upload's sums are tried element by element first, and it is rejected
//! (`overflow`) if one of them would not be finite.

use super::rejection::RejectionKind;
use crate::message::Message;
use std::ops::Range;

use super::rejection::Rejection;
use super::structure::{Layout, Located};
use crate::parallel::in_parallel;
use crate::values::{add_scaled, for_each, scan, Lanes};

/// Lanes per piece of work: 512 KiB of float64 accumulators, so a piece's data and sums stay in
/// the core's cache between reading and adding.
const PIECE: usize = 1 << 16;
/// The bytes of each averaged tensor in `checkpoint` / `external`, checked against the sums.
pub fn slot_bytes<'a>(
    layout: &Layout,
    located: &[Located],
    checkpoint: &'a [u8],
    external: Option<&'a [u8]>,
    lanes: &[usize],
) -> Result<Vec<&'a [u8]>, Rejection> {
    located
        .iter()
        .zip(lanes)
        .enumerate()
        .map(|(slot, (loc, &n))| {
            let buffer = if loc.external { external.unwrap_or_default() } else { checkpoint };
            let range = usize::try_from(loc.bytes.start).ok().zip(usize::try_from(loc.bytes.end).ok());
            let bytes = range.and_then(|(s, e)| buffer.get(s..e));
            match bytes {
                Some(b) if b.len() == n * loc.lanes.width() => Ok(b),
                _ => Err(Rejection::new(
                    RejectionKind::Unreadable,
                    Message::text_first("the bytes of ")
                        .then(layout.slot_label(slot))
                        .text(" lie outside the upload"),
                )),
            }
        })
        .collect()
}

/// Adds several checked uploads into `sums` in one pass over the sums: `datas[u][slot]` are the
/// bytes of upload `u`'s tensor `slot` (stored as `lanes[slot]`), `weights[u]` its weight. Each
/// piece of the sums stays in cache while every upload is added into it in order, so per element
/// the additions are those of adding the uploads one after another (the same rounding).
pub fn add_window(lanes: &[Lanes], datas: &[Vec<&[u8]>], weights: &[f64], sums: &mut [&mut [f64]]) {
    let total: usize = datas.iter().flatten().map(|d| d.len()).sum();
    let mut work = Vec::new();
    for (slot, (acc, &kind)) in sums.iter_mut().zip(lanes).enumerate() {
        let width = kind.width();
        for (p, chunk) in acc.chunks_mut(PIECE).enumerate() {
            let range = p * PIECE * width..(p * PIECE + chunk.len()) * width;
            let parts: Vec<&[u8]> = datas
                .iter()
                .map(|d| d.get(slot).and_then(|b| b.get(range.clone())).unwrap_or_default())
                .collect();
            work.push((chunk, kind, parts));
        }
    }
    in_parallel(work, total, |(acc, kind, parts)| {
        for (bytes, &w) in parts.iter().zip(weights) {
            add_scaled(kind, bytes, acc, w);
        }
    });
}

fn pieces(len: usize, width: usize) -> impl Iterator<Item = Range<usize>> {
    (0..len.div_ceil(PIECE)).map(move |p| p * PIECE * width..((p + 1) * PIECE).min(len) * width)
}

/// Pass 1: whether every value is finite (else the rejection naming the first bad tensor) and
/// each tensor's largest magnitude.
pub(crate) fn largest_of(
    layout: &Layout,
    located: &[Located],
    data: &[&[u8]],
) -> Result<Vec<f64>, Rejection> {
    let total: usize = data.iter().map(|d| d.len()).sum();
    let mut work = Vec::new();
    for (slot, (loc, bytes)) in located.iter().zip(data).enumerate() {
        let width = loc.lanes.width();
        for r in pieces(bytes.len() / width, width) {
            work.push((slot, loc.lanes, bytes.get(r).unwrap_or_default()));
        }
    }
    let scanned = in_parallel(work, total, |(slot, lanes, bytes)| (slot, scan(lanes, bytes)));
    let mut largest = vec![0.0f64; located.len()];
    let mut bad: Option<usize> = None;
    for (slot, (finite, big)) in scanned {
        if !finite {
            bad = Some(bad.map_or(slot, |b| b.min(slot)));
        }
        if let Some(l) = largest.get_mut(slot) {
            *l = l.max(big);
        }
    }
    match bad {
        Some(slot) => Err(Rejection::new(
            RejectionKind::NonFinite,
            layout.slot_label(slot).text(" holds NaN or infinite values"),
        )),
        None => Ok(largest),
    }
}

/// The checks of [`accumulate`] without the addition, for callers that do not keep the sums
/// (the robust methods check each upload as FedAvg would, then aggregate otherwise): every value
/// finite, then `bounds` raised as [`accumulate`] raises them. `Ok(false)`, with nothing
/// changed, when a bound would become infinite: only the sums can then tell whether this upload
/// overflows, so the caller must make them and call [`accumulate`].
pub fn check_values(
    layout: &Layout,
    located: &[Located],
    data: &[&[u8]],
    weight: f64,
    bounds: &mut [f64],
) -> Result<bool, Rejection> {
    let largest = largest_of(layout, located, data)?;
    let grown: Vec<f64> = bounds.iter().zip(&largest).map(|(b, l)| b + weight * l).collect();
    if grown.len() != bounds.len() || !grown.iter().all(|g| g.is_finite()) {
        return Ok(false);
    }
    bounds.copy_from_slice(&grown);
    Ok(true)
}

/// Checks every value of the upload (finite; its sums cannot overflow) and adds `weight × value`
/// into `sums` (one float64 slice per slot: elements, or real/imaginary pairs for complex) and
/// raises `bounds` (one per slot, see the module note). On a rejection nothing was added.
pub fn accumulate(
    layout: &Layout,
    located: &[Located],
    data: &[&[u8]],
    weight: f64,
    sums: &mut [&mut [f64]],
    bounds: &mut [f64],
) -> Result<(), Rejection> {
    let total: usize = data.iter().map(|d| d.len()).sum();
    let largest = largest_of(layout, located, data)?;
    // overflow: exact only where the bound says it is possible
    let mut exact_bounds = Vec::new();
    for (slot, bound) in bounds.iter_mut().enumerate() {
        let grown = *bound + weight * largest.get(slot).copied().unwrap_or(0.0);
        if grown.is_finite() {
            *bound = grown;
            continue;
        }
        let (Some(loc), Some(bytes), Some(acc)) = (located.get(slot), data.get(slot), sums.get(slot)) else {
            continue;
        };
        let mut fits = true;
        for_each(loc.lanes, bytes, |i, v| {
            fits &= (acc.get(i).copied().unwrap_or(0.0) + weight * v).is_finite()
        });
        if !fits {
            return Err(Rejection::new(
                RejectionKind::Overflow,
                layout.slot_label(slot).text(format!(
                    " overflows: added to the other uploads (weight {weight}) its values give sums beyond \
                     float64 (largest magnitude {:e})",
                    largest.get(slot).copied().unwrap_or(0.0)
                )),
            ));
        }
        exact_bounds.push(slot);
    }
    // pass 2: add
    let mut work = Vec::new();
    for ((loc, bytes), acc) in located.iter().zip(data).zip(sums.iter_mut()) {
        let width = loc.lanes.width();
        for (chunk, r) in acc.chunks_mut(PIECE).zip(pieces(bytes.len() / width, width)) {
            work.push((chunk, loc.lanes, bytes.get(r).unwrap_or_default()));
        }
    }
    in_parallel(work, total, |(acc, lanes, bytes)| add_scaled(lanes, bytes, acc, weight));
    for slot in exact_bounds {
        if let (Some(b), Some(acc)) = (bounds.get_mut(slot), sums.get(slot)) {
            *b = acc.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        }
    }
    Ok(())
}
