//! A FedAvg round over local upload files in one call: the whole loop over uploads runs here,
//! without the caller's interpreter between uploads (at 1 MiB per upload, the per-upload cost of
//! a Python loop was most of the round).
//!
//! Uploads are taken a window at a time (a few, together about [`WINDOW_BYTES`]). Each window
//! is done in two steps, each on every core:
//!
//! 1. **check**, one upload per thread: read the files into private memory (never a mapping, see
//!    [`read_file`]), index them, check the structure against the reference, find the weight,
//!    check that every value is finite and find each tensor's largest magnitude;
//! 2. **add**, in upload order, one pass over the sums for the whole window: each piece of the
//!    float64 sums stays in cache while the window's uploads are added into it one after another
//!    (per element the additions keep upload order, so the rounding is that of adding the uploads
//!    one by one).
//!
//! Rejected uploads never reach the sums: step 1 finds every reason before step 2 adds anything.
//! An upload whose sums could overflow (see [`super::kernel`]) is added alone, after an exact check.
//! The file access is [`read_file`]'s (the upload module): this module only orders the work.

use std::collections::HashSet;

use super::checks::located_data;
use super::kernel::{accumulate, add_window, largest_of, slot_bytes};
use super::rejection::Rejection;
use super::structure::{Layout, Located};
use super::upload::{index_upload, read_file, FileUpload, HeldFiles, Refusal};
use super::verdict::{FileItem, FileRound, Screen, Screening, Verdict};
use crate::parallel::in_parallel;
use crate::values::Lanes;
use crate::Error;

/// Bytes of uploads checked together (at least one per core): enough to keep both cores busy
/// and to add several uploads per pass over the sums, little enough that memory stays a few
/// models (tests/federated/test_average_memory.py bounds the peak at 16 models of 1 MiB).
const WINDOW_BYTES: usize = 6 << 20;
/// At most this many uploads per window.
const WINDOW_MAX: usize = 16;

/// An upload that passed every check but overflow: ready to be added.
struct Checked {
    upload: FileUpload,
    located: Vec<Located>,
    weight: f64,
    largest: Vec<f64>,
}

/// A read upload: its file's (device, inode) and the outcome of the checks.
type Read = ((u64, u64), Result<Checked, Rejection>);

/// Step 1 for one upload: read and index it (`Err` when that fails), then everything else
/// (the inner `Err` is a rejection of a readable upload, which a duplicate verdict overrides).
fn check(item: &FileItem, layout: &Layout, lanes: &[usize], max_bytes: Option<u64>) -> Result<Read, Refusal> {
    let upload = read_file(&item.path, max_bytes, &mut || true)?;
    let index = index_upload(upload.checkpoint.bytes(), upload.external.as_ref().map(|e| e.bytes()))?;
    let identity = upload.identity;
    let checked = (|| {
        let ext = upload.external.as_ref().map(|e| e.bytes());
        let (located, data, weight) =
            located_data(layout, &index, upload.checkpoint.bytes(), ext, lanes, &item.rule)?;
        let largest = largest_of(layout, &located, &data)?;
        drop(data);
        Ok(Checked { upload, located, weight, largest })
    })();
    Ok((identity, checked))
}

fn data_of<'a>(c: &'a Checked, layout: &Layout, lanes: &[usize]) -> Vec<&'a [u8]> {
    let ext = c.upload.external.as_ref().map(|e| e.bytes());
    // the ranges were checked in step 1; an empty list cannot happen here
    slot_bytes(layout, &c.located, c.upload.checkpoint.bytes(), ext, lanes).unwrap_or_default()
}

/// Adds the checked uploads of `group` (in order) into `sums` in one pass, and raises `bounds`.
fn flush(
    group: &mut Vec<(usize, Checked)>,
    layout: &Layout,
    lanes: &[usize],
    sums: &mut [&mut [f64]],
    verdicts: &mut [Option<Verdict>],
) {
    if group.is_empty() {
        return;
    }
    let datas: Vec<Vec<&[u8]>> = group.iter().map(|(_, c)| data_of(c, layout, lanes)).collect();
    let weights: Vec<f64> = group.iter().map(|(_, c)| c.weight).collect();
    let located = &group[0].1.located;
    let slot_lanes: Vec<_> = located.iter().map(|l| l.lanes).collect();
    add_window(&slot_lanes, &datas, &weights, sums);
    for (i, c) in group.drain(..) {
        if let Some(v) = verdicts.get_mut(i) {
            *v = Some(Verdict::Added { weight: c.weight, identity: c.upload.identity });
        }
    }
}

/// Checks every upload of `items` against `layout` and adds the accepted ones (weighted) into
/// `sums` and `bounds` (as [`accumulate`]); `seen` holds the identities of uploads already
/// counted this round (and receives every upload read here). Returns one verdict per item, in
/// order; `Err` only when `keep_going` asks to stop. Large models are streamed
/// (`stream.rs`), the others read whole into memory: the same verdicts and sums either way.
pub fn add_files(
    items: &[FileItem],
    layout: &Layout,
    max_bytes: Option<u64>,
    seen: &mut HashSet<(u64, u64)>,
    sums: &mut [&mut [f64]],
    bounds: &mut [f64],
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<Vec<Verdict>, Error> {
    let lanes = layout.slot_lanes();
    if lanes != sums.iter().map(|s| s.len()).collect::<Vec<_>>() || bounds.len() != lanes.len() {
        return Err(Error::Internal { detail: "the sums do not match the reference's layout".into() });
    }
    let round = FileRound { items, layout, max_bytes, seen, sums, bounds, keep_going };
    if super::stream::streams(layout, &lanes) {
        return super::stream::add_files_streamed(round);
    }
    add_files_in_memory(round)
}

/// [`add_files`] for models whose uploads are read whole into memory (see the module note).
pub(crate) fn add_files_in_memory(round: FileRound<'_, '_>) -> Result<Vec<Verdict>, Error> {
    let FileRound { items, layout, max_bytes, seen, sums, bounds, keep_going } = round;
    let lanes = layout.slot_lanes();
    let window = window_of(layout, &lanes);
    let mut verdicts: Vec<Option<Verdict>> = Vec::with_capacity(items.len());
    for (w, part) in items.chunks(window).enumerate() {
        if !keep_going() {
            return Err(Error::Interrupted {
                path: part.first().map(|i| i.path.clone()).unwrap_or_default(),
            });
        }
        let checked =
            in_parallel(part.iter().collect(), usize::MAX, |item| check(item, layout, &lanes, max_bytes));
        let first = w * window;
        verdicts.resize_with(first + part.len(), || None);
        let mut group: Vec<(usize, Checked)> = Vec::new();
        for (k, outcome) in checked.into_iter().enumerate() {
            let i = first + k;
            let (identity, outcome) = match outcome {
                Ok(read) => read,
                Err(Refusal::Rejected(r)) => {
                    verdicts[i] = Some(Verdict::Rejected { rejection: r, identity: None });
                    continue;
                }
                Err(Refusal::Unreadable(e)) => {
                    verdicts[i] = Some(Verdict::Unreadable(e));
                    continue;
                }
            };
            if !seen.insert(identity) {
                verdicts[i] = Some(Verdict::Duplicate { identity });
                continue;
            }
            let c = match outcome {
                Ok(c) => c,
                Err(rejection) => {
                    verdicts[i] = Some(Verdict::Rejected { rejection, identity: Some(identity) });
                    continue;
                }
            };
            if group_bounds_finite(&group, bounds, &c) {
                group.push((i, c));
                continue;
            }
            // the sums could overflow: add what is pending, then this upload alone, checked exactly
            raise_bounds(&group, bounds);
            flush(&mut group, layout, &lanes, sums, &mut verdicts);
            let data = data_of(&c, layout, &lanes);
            verdicts[i] = Some(match accumulate(layout, &c.located, &data, c.weight, sums, bounds) {
                Ok(()) => Verdict::Added { weight: c.weight, identity },
                Err(rejection) => Verdict::Rejected { rejection, identity: Some(identity) },
            });
        }
        raise_bounds(&group, bounds);
        flush(&mut group, layout, &lanes, sums, &mut verdicts);
    }
    Ok(verdicts
        .into_iter()
        .map(|v| v.unwrap_or_else(|| Verdict::Unreadable(Error::Internal { detail: "no verdict".into() })))
        .collect())
}

/// Uploads per window for `layout`'s model: about [`WINDOW_BYTES`], at least one per core, at
/// most [`WINDOW_MAX`].
fn window_of(layout: &Layout, lanes: &[usize]) -> usize {
    let model: usize =
        layout.slot_types().iter().zip(lanes).map(|(t, n)| n * Lanes::of(*t).map_or(8, |l| l.width())).sum();
    let threads = crate::parallel::threads();
    // one large upload per core, not more: a window of 4 x 64 MiB ran faster alone but 2x slower
    // after other work had freed and touched gigabytes (fresh memory is what costs then: the
    // kernel's time tripled), while one per core holds in both (benches/README.md)
    (WINDOW_BYTES / model.max(1)).clamp(threads, WINDOW_MAX.max(threads))
}

/// What became of one upload of [`check_files`].
pub enum Screened {
    /// Passed every check (its bounds raised): its files held open, where its tensors are.
    Accepted {
        /// The weight found.
        weight: f64,
        /// (device, inode) of the checkpoint file.
        identity: (u64, u64),
        /// The upload's files, to read its values again.
        files: HeldFiles,
        /// Where each averaged tensor is.
        located: Vec<Located>,
    },
    /// Any other verdict, as [`add_files`] gives it.
    Other(Verdict),
}

/// [`add_files`]' checks without the addition, for the robust methods (which read the values
/// again later): the same verdicts, `bounds` raised as `add_files` raises them, and each accepted
/// upload's files kept open. Stops before the first upload whose bounds would become infinite
/// (only FedAvg's sums can tell whether it overflows): the verdicts returned are then fewer than
/// `items`, and the caller goes on from there its own way. `Err` only when `keep_going` asks to
/// stop.
pub fn check_files(
    items: &[FileItem],
    layout: &Layout,
    max_bytes: Option<u64>,
    seen: &mut HashSet<(u64, u64)>,
    bounds: &mut [f64],
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<Vec<Screened>, Error> {
    let lanes = layout.slot_lanes();
    if bounds.len() != lanes.len() {
        return Err(Error::Internal { detail: "the bounds do not match the reference's layout".into() });
    }
    let streamed = super::stream::streams(layout, &lanes);
    let mut verdicts = Vec::with_capacity(items.len());
    for part in items.chunks(window_of(layout, &lanes)) {
        if !keep_going() {
            return Err(Error::Interrupted {
                path: part.first().map(|i| i.path.clone()).unwrap_or_default(),
            });
        }
        let checked = in_parallel(part.iter().collect(), usize::MAX, |item| {
            screen(item, layout, &lanes, max_bytes, streamed)
        });
        for outcome in checked {
            let (identity, outcome) = match outcome {
                Ok(read) => read,
                Err(Refusal::Rejected(r)) => {
                    verdicts.push(Screened::Other(Verdict::Rejected { rejection: r, identity: None }));
                    continue;
                }
                Err(Refusal::Unreadable(e)) => {
                    verdicts.push(Screened::Other(Verdict::Unreadable(e)));
                    continue;
                }
            };
            if seen.contains(&identity) {
                verdicts.push(Screened::Other(Verdict::Duplicate { identity }));
                continue;
            }
            let c = match outcome {
                Ok(c) => c,
                Err(rejection) => {
                    seen.insert(identity);
                    verdicts.push(Screened::Other(Verdict::Rejected { rejection, identity: Some(identity) }));
                    continue;
                }
            };
            let grown: Vec<f64> = bounds
                .iter()
                .enumerate()
                .map(|(slot, b)| b + c.weight * c.largest.get(slot).copied().unwrap_or(0.0))
                .collect();
            if !grown.iter().all(|g| g.is_finite()) {
                return Ok(verdicts);
            }
            bounds.copy_from_slice(&grown);
            seen.insert(identity);
            let Screen { files, located, weight, .. } = c;
            verdicts.push(Screened::Accepted { weight, identity, files, located });
        }
    }
    Ok(verdicts)
}

/// [`check_files`]' checks of one upload: read whole into memory, or, for a streamed model, its
/// values read piece by piece from its files (`stream.rs`), never held whole.
pub(crate) fn screen(
    item: &FileItem,
    layout: &Layout,
    lanes: &[usize],
    max_bytes: Option<u64>,
    streamed: bool,
) -> Result<Screening, Refusal> {
    if streamed {
        return super::stream::screen(item, layout, lanes, max_bytes);
    }
    let (identity, checked) = check(item, layout, lanes, max_bytes)?;
    let screen = checked.map(|c| Screen {
        files: c.upload.files,
        located: c.located,
        weight: c.weight,
        largest: c.largest,
    });
    Ok((identity, screen))
}

/// Whether the bounds stay finite with the pending group and `next` added.
fn group_bounds_finite(group: &[(usize, Checked)], bounds: &[f64], next: &Checked) -> bool {
    bounds.iter().enumerate().all(|(slot, b)| {
        let pending: f64 =
            group.iter().map(|(_, c)| c.weight * c.largest.get(slot).copied().unwrap_or(0.0)).sum();
        (b + pending + next.weight * next.largest.get(slot).copied().unwrap_or(0.0)).is_finite()
    })
}

/// Raises `bounds` by the pending group's `weight × largest` (all finite: checked on entry).
fn raise_bounds(group: &[(usize, Checked)], bounds: &mut [f64]) {
    for (_, c) in group {
        for (b, l) in bounds.iter_mut().zip(&c.largest) {
            *b += c.weight * l;
        }
    }
}
