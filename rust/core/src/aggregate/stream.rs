//! FedAvg over large uploads, streamed: no upload is ever copied whole into memory.
//!
//! Copying a 64 MiB upload into private memory writes 64 MiB that no cache holds, and the check
//! and the addition then read it back from memory. Here each upload's files stay open and their
//! values pass once through a small buffer per thread that stays in cache:
//!
//! 1. **open**, one upload per thread: open the files (size limit first), index the checkpoint
//!    reading only the blocks its structure lies in (`paged.rs`), check the structure and the
//!    weight;
//! 2. **add**, a group of opened uploads at once, spread over the cores by pieces of the sums:
//!    each piece of the float64 sums is copied aside, then every upload of the group is read
//!    into the thread's buffer (`pread`), checked (finite; its largest magnitude noted) and added
//!    into the piece, in upload order (the rounding of adding the uploads one by one).
//!
//! Step 2 adds before it knows that the whole upload is good, so a group with a bad upload (a
//! value that is not finite, a file that changed or was cut during the round: every file is
//! confirmed unchanged, size and modification time, when the group is done) is undone from the
//! copy, exactly, and added again without it; each such pass leaves out at least one upload. A
//! group whose sums could overflow (see `kernel.rs`: the bounds from the largest magnitudes the
//! pass noted) is undone as well and its uploads are added one by one by the kernel's exact
//! check, read into memory as the in-memory path reads them.
//!
//! The copy is as large as the sums. Sums that nothing was added into yet (the first group of
//! a round) need none: they are undone by zeroing them. For a model whose float64 sums pass
//! [`COPY_MAX_BYTES`] (a 3 GB model has 6 GB of sums: the copy would double the round's memory),
//! the first group is therefore added in one read as above, and each later group is instead
//! *checked first*: every upload's values are read and checked (finite; largest magnitudes)
//! before the group is added in a second read, so nothing ever needs undoing and no copy is
//! made. A file changed between the two reads (found by the second read's check and by its size
//! and modification time) stops the round with `CheckpointChanged`: its values may already be in
//! the sums, and without the copy they cannot be taken out.

use super::rejection::RejectionKind;
use crate::message::Message;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use super::checks::located_data;
use super::kernel::accumulate;
use super::rejection::Rejection;
use super::structure::{check_structure, weight_of, Layout, Located};
use super::upload::{index_upload, open_files, read_file, HeldFiles, Refusal};
use super::verdict::{FileItem, FileRound, Screen, Screening, Verdict};
use crate::parallel::in_parallel;
use crate::values::{add_scaled, scan, Lanes};
use crate::Error;

/// Lanes per piece: 256 KiB of float64 sums and at most as much of stored values, so a piece and
/// the buffer it is read through stay in a core's cache (1 MiB of L2 here) while a group's
/// uploads are added into it.
const PIECE: usize = 1 << 15;
/// At most this many uploads are added in one pass over the sums: the pass reads each piece of
/// the sums once for all of them, and holds their files open (two descriptors each).
const GROUP_MAX: usize = 64;
/// Models of at least this many bytes are streamed (below, an upload copied into memory stays in
/// cache, and one read is cheaper than two: `round.rs`).
const STREAM_MIN_BYTES: usize = 16 << 20;
/// ... when their tensors are this large on average: each tensor is one `pread` per pass.
const STREAM_MIN_TENSOR: usize = 64 << 10;
/// Float64 sums of at most this many bytes are copied to undo a group; larger ones are checked
/// first (see the module note). `ORTCKPT_STREAM_COPY_MAX_BYTES` replaces it (tests check both
/// ways on small models).
const COPY_MAX_BYTES: usize = 512 << 20;

/// Whether a round over sums of `lanes` float64 values undoes a group from a copy.
fn copies(lanes: &[usize]) -> bool {
    let bytes = lanes.iter().fold(0usize, |b, &n| b.saturating_add(n.saturating_mul(8)));
    let max = std::env::var("ORTCKPT_STREAM_COPY_MAX_BYTES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(COPY_MAX_BYTES);
    bytes <= max
}

thread_local! {
    /// The thread's buffer for values read from a file (reused: its pages stay in cache).
    static VALUES: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Whether uploads of `layout`'s model are streamed. `ORTCKPT_STREAM_MIN_BYTES` (bytes) replaces
/// the threshold: tests stream small models with it, and it tells the two paths apart in benches.
pub(crate) fn streams(layout: &Layout, lanes: &[usize]) -> bool {
    let model = model_bytes(layout, lanes);
    let slots = lanes.len().max(1);
    match std::env::var("ORTCKPT_STREAM_MIN_BYTES").ok().and_then(|v| v.parse::<usize>().ok()) {
        Some(min) => model >= min,
        None => model >= STREAM_MIN_BYTES && model / slots >= STREAM_MIN_TENSOR,
    }
}

/// Whether an upload of `layout`'s model is indexed from its files ([`open`]: a `pread` of a
/// block per tensor, at worst) for much less than reading it whole: its tensors are
/// [`STREAM_MIN_TENSOR`] bytes on average or more. Below, reading it whole is cheaper (1,000
/// uploads of 64 tensors of 16 KiB: indexing took five times as long as reading them whole).
/// `ORTCKPT_DEFER_MIN_TENSOR_BYTES` replaces the threshold (tests defer with small models).
pub(crate) fn indexes_cheaply(layout: &Layout, lanes: &[usize]) -> bool {
    let per_tensor = model_bytes(layout, lanes) / lanes.len().max(1);
    let min = std::env::var("ORTCKPT_DEFER_MIN_TENSOR_BYTES").ok().and_then(|v| v.parse::<usize>().ok());
    per_tensor >= min.unwrap_or(STREAM_MIN_TENSOR)
}

/// The bytes of one upload's averaged tensors.
fn model_bytes(layout: &Layout, lanes: &[usize]) -> usize {
    layout
        .slot_types()
        .iter()
        .zip(lanes)
        .map(|(t, n)| n.saturating_mul(Lanes::of(*t).map_or(8, |l| l.width())))
        .fold(0, usize::saturating_add)
}

/// An upload that passed step 1: its files, where its tensors are, and its weight.
pub(crate) struct Opened {
    pub(crate) files: HeldFiles,
    pub(crate) located: Vec<Located>,
    pub(crate) weight: f64,
}

/// An opened upload's identity (device, inode) and the outcome of the checks after the index.
pub(crate) type OpenOutcome = ((u64, u64), Result<Opened, Rejection>);

/// Step 1 for one upload: `Err` when it cannot be opened or indexed; else its identity and the
/// outcome of the other checks that need no value (the structure, the byte ranges, the weight).
/// A robust round that checks values later keeps it as it is (`Round::add_files_deferring_values`).
pub(crate) fn open(
    item: &FileItem,
    layout: &Layout,
    lanes: &[usize],
    max_bytes: Option<u64>,
) -> Result<OpenOutcome, Refusal> {
    let files = open_files(&item.path, max_bytes)?;
    let index = files.index()?;
    let identity = files.identity();
    let opened = (|| {
        let located = check_structure(&index, layout)?;
        for (slot, (loc, &n)) in located.iter().zip(lanes).enumerate() {
            let expected = (n as u64).saturating_mul(loc.lanes.width() as u64);
            if loc.bytes.end.checked_sub(loc.bytes.start) != Some(expected) {
                return Err(Rejection::new(
                    RejectionKind::Unreadable,
                    Message::text_first("the bytes of ")
                        .then(layout.slot_label(slot))
                        .text(" lie outside the upload"),
                ));
            }
        }
        let weight = weight_of(&index, &item.rule)?;
        Ok(Opened { files, located, weight })
    })();
    Ok((identity, opened))
}

/// [`super::check_files`]' checks of one upload of a streamed model: [`open`], then every
/// averaged value read piece by piece through the thread's buffer, checked finite, each tensor's
/// largest magnitude found. The upload is never held whole.
pub(crate) fn screen(
    item: &FileItem,
    layout: &Layout,
    lanes: &[usize],
    max_bytes: Option<u64>,
) -> Result<Screening, Refusal> {
    let (identity, opened) = open(item, layout, lanes, max_bytes)?;
    let opened = match opened {
        Ok(opened) => opened,
        Err(rejection) => return Ok((identity, Err(rejection))),
    };
    let largest = match largest_in(&opened.files, &opened.located, layout)? {
        Ok(largest) => largest,
        Err(rejection) => return Ok((identity, Err(rejection))),
    };
    let Opened { files, located, weight } = opened;
    Ok((identity, Ok(Screen { files, located, weight, largest })))
}

/// The rejection [`screen`] gives an upload whose files are `files` (tensors at `located`), when
/// one of its values is not finite; `Err` when a read fails.
pub(crate) fn values_rejection(
    files: &HeldFiles,
    located: &[Located],
    layout: &Layout,
) -> Result<Option<Rejection>, Error> {
    Ok(largest_in(files, located, layout)?.err())
}

/// Each tensor's largest magnitude in files held open (tensors at `located`), or the rejection
/// naming the first tensor holding a value that is not finite; `Err` when a read fails (the file
/// was cut since it was opened).
fn largest_in(
    files: &HeldFiles,
    located: &[Located],
    layout: &Layout,
) -> Result<Result<Vec<f64>, Rejection>, Error> {
    VALUES.with_borrow_mut(|buf| {
        let mut largest = Vec::with_capacity(located.len());
        for (slot, loc) in located.iter().enumerate() {
            let width = loc.lanes.width();
            let lanes = usize::try_from(loc.bytes.end.saturating_sub(loc.bytes.start)).unwrap_or(0) / width;
            let mut big = 0.0f64;
            for first in (0..lanes).step_by(PIECE) {
                buf.resize(PIECE.min(lanes - first) * width, 0);
                files.read_raw(loc, first, buf)?;
                let (finite, top) = scan(loc.lanes, buf);
                if !finite {
                    return Ok(Err(Rejection::new(
                        RejectionKind::NonFinite,
                        layout.slot_label(slot).text(" holds NaN or infinite values"),
                    )));
                }
                big = big.max(top);
            }
            largest.push(big);
        }
        Ok(Ok(largest))
    })
}

/// What one upload's piece held: its largest magnitude, whether all finite, whether read.
#[derive(Clone, Copy)]
struct Seen {
    top: f64,
    finite: bool,
    read: bool,
}

/// One piece of the sums: its slot, its first lane, the sums and where they are copied aside.
type Piece<'s> = (usize, usize, &'s mut [f64], Option<&'s mut [f64]>);

/// What a pass over a group found about each upload.
struct Pass {
    /// Per upload, per slot: the largest magnitude.
    largest: Vec<Vec<f64>>,
    /// Per upload: the first slot holding a value that is not finite.
    non_finite: Vec<Option<usize>>,
    /// Per upload: a read failed, or the files changed since they were opened.
    changed: Vec<bool>,
}

impl Pass {
    fn clean(&self) -> bool {
        self.non_finite.iter().all(Option::is_none) && !self.changed.iter().any(|&c| c)
    }
}

/// Per-slot views of a flat copy of `sums` (one allocation, made when first needed: huge pages
/// back it, where a vector per slot of a few MiB each would take a page fault per 4 KiB).
fn copy_slots<'c>(copy: &'c mut Vec<f64>, sums: &[&mut [f64]]) -> Vec<&'c mut [f64]> {
    let total = sums.iter().map(|s| s.len()).sum::<usize>();
    if copy.len() != total {
        *copy = crate::platform::huge_f64s(total, true);
    }
    let mut rest: &mut [f64] = copy.as_mut_slice();
    let mut out = Vec::with_capacity(sums.len());
    for acc in sums {
        let n = acc.len().min(rest.len());
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(n);
        out.push(head);
        rest = tail;
    }
    out
}

/// Step 2: one pass adding `group` into `sums` (see the module note), `copy` (when given)
/// receiving the sums as they were; the caller undoes it ([`restore`]) when the pass is not clean.
fn add_group(group: &[&Opened], sums: &mut [&mut [f64]], copy: Option<&mut Vec<f64>>) -> Pass {
    let bad: Vec<AtomicBool> = group.iter().map(|_| AtomicBool::new(false)).collect();
    let mut pieces: Vec<Piece<'_>> = Vec::new();
    let mut bytes = 0usize;
    let mut saved_slots: Vec<Option<&mut [f64]>> = match copy {
        Some(copy) => copy_slots(copy, sums).into_iter().map(Some).collect(),
        None => sums.iter().map(|_| None).collect(),
    };
    for (slot, (acc, saved)) in sums.iter_mut().zip(saved_slots.iter_mut()).enumerate() {
        let width = group.first().and_then(|s| s.located.get(slot)).map_or(8, |l| l.lanes.width());
        bytes = bytes.saturating_add(acc.len().saturating_mul(width).saturating_mul(group.len()));
        match saved.take() {
            Some(saved) => {
                for (p, (chunk, saved)) in acc.chunks_mut(PIECE).zip(saved.chunks_mut(PIECE)).enumerate() {
                    pieces.push((slot, p * PIECE, chunk, Some(saved)));
                }
            }
            None => {
                for (p, chunk) in acc.chunks_mut(PIECE).enumerate() {
                    pieces.push((slot, p * PIECE, chunk, None));
                }
            }
        }
    }
    let slots: Vec<usize> = pieces.iter().map(|p| p.0).collect();
    let seen = in_parallel(pieces, bytes, |(slot, first, acc, saved)| {
        if let Some(saved) = saved {
            saved.copy_from_slice(acc);
        }
        VALUES.with_borrow_mut(|buf| {
            let mut seen = Vec::with_capacity(group.len());
            for (upload, flag) in group.iter().zip(&bad) {
                let Some(loc) = upload.located.get(slot) else {
                    seen.push(Seen { top: 0.0, finite: true, read: false });
                    continue;
                };
                buf.resize(acc.len() * loc.lanes.width(), 0);
                if upload.files.read_raw(loc, first, buf).is_err() {
                    flag.store(true, Ordering::Relaxed);
                    seen.push(Seen { top: 0.0, finite: true, read: false });
                    continue;
                }
                let (finite, top) = scan(loc.lanes, buf);
                if !finite {
                    flag.store(true, Ordering::Relaxed);
                }
                // an upload found bad is not added further (the pass is undone anyway), but
                // still scanned, so that its first bad tensor is named
                if !flag.load(Ordering::Relaxed) {
                    add_scaled(loc.lanes, buf, acc, upload.weight);
                }
                seen.push(Seen { top, finite, read: true });
            }
            seen
        })
    });
    let slot_count = sums.len();
    let mut pass = Pass {
        largest: vec![vec![0.0; slot_count]; group.len()],
        non_finite: vec![None; group.len()],
        changed: vec![false; group.len()],
    };
    for (slot, piece) in slots.into_iter().zip(seen) {
        for (u, s) in piece.into_iter().enumerate() {
            if let Some(l) = pass.largest.get_mut(u).and_then(|l| l.get_mut(slot)) {
                *l = l.max(s.top);
            }
            if let Some(n) = pass.non_finite.get_mut(u).filter(|_| !s.finite) {
                *n = Some(n.map_or(slot, |b| b.min(slot)));
            }
            if let Some(c) = pass.changed.get_mut(u).filter(|_| !s.read) {
                *c = true;
            }
        }
    }
    for (upload, c) in group.iter().zip(pass.changed.iter_mut()) {
        *c |= upload.files.confirm_unchanged().is_err();
    }
    pass
}

/// Puts back the sums [`add_group`] copied aside (flat, slot after slot).
fn restore(sums: &mut [&mut [f64]], copy: &[f64]) {
    let mut at = 0usize;
    for acc in sums.iter_mut() {
        let end = at.saturating_add(acc.len());
        if let Some(saved) = copy.get(at..end) {
            acc.copy_from_slice(saved);
        }
        at = end;
    }
}

fn changed_during_round(files: &HeldFiles) -> Verdict {
    Verdict::Unreadable(Error::CheckpointChanged {
        path: files.path().to_path_buf(),
        detail: "was modified after it was checked, while the round was reading it".into(),
    })
}

/// Everything a group's addition needs besides the group.
struct Round<'a, 'k> {
    items: &'a [FileItem],
    layout: &'a Layout,
    lanes: &'a [usize],
    max_bytes: Option<u64>,
    /// The sums as they were before a group's pass; None: groups are checked first.
    copy: Option<Vec<f64>>,
    verdicts: Vec<Option<Verdict>>,
    keep_going: &'k mut dyn FnMut() -> bool,
}

impl Round<'_, '_> {
    /// Adds `group` (item positions and opened uploads, in order) into `sums`; every member gets
    /// its verdict.
    fn flush(
        &mut self,
        group: &mut Vec<(usize, Opened)>,
        sums: &mut [&mut [f64]],
        bounds: &mut [f64],
    ) -> Result<(), Error> {
        let mut members: Vec<(usize, Opened)> = std::mem::take(group);
        // Sums that nothing was added into yet (every bound zero: every value added so far was
        // zero) are undone by zeroing them: no copy is needed, and the group is read once.
        let fresh = bounds.iter().all(|b| *b == 0.0);
        if self.copy.is_none() && !fresh {
            return self.flush_checked_first(members, sums, bounds);
        }
        while !members.is_empty() {
            if !(self.keep_going)() {
                let path = members.first().map(|(_, s)| s.files.path().to_path_buf()).unwrap_or_default();
                return Err(Error::Interrupted { path });
            }
            let refs: Vec<&Opened> = members.iter().map(|(_, s)| s).collect();
            let pass = add_group(&refs, sums, if fresh { None } else { self.copy.as_mut() });
            if pass.clean() {
                let grown: Vec<f64> = bounds
                    .iter()
                    .enumerate()
                    .map(|(slot, b)| {
                        members
                            .iter()
                            .zip(&pass.largest)
                            .fold(*b, |acc, ((_, s), l)| acc + s.weight * l.get(slot).copied().unwrap_or(0.0))
                    })
                    .collect();
                if grown.iter().all(|g| g.is_finite()) {
                    bounds.copy_from_slice(&grown);
                    for (i, s) in members {
                        self.set(i, Verdict::Added { weight: s.weight, identity: s.files.identity() });
                    }
                    return Ok(());
                }
                // the sums could overflow: one by one, exactly
                self.undo(sums, fresh);
                for (i, s) in members {
                    let verdict = self.add_exactly(i, s.files.identity(), sums, bounds);
                    self.set(i, verdict);
                }
                return Ok(());
            }
            self.undo(sums, fresh);
            let mut kept = Vec::with_capacity(members.len());
            for (u, (i, s)) in members.into_iter().enumerate() {
                if let Some(slot) = pass.non_finite.get(u).copied().flatten() {
                    let rejection = Rejection::new(
                        RejectionKind::NonFinite,
                        self.layout.slot_label(slot).text(" holds NaN or infinite values"),
                    );
                    self.set(i, Verdict::Rejected { rejection, identity: Some(s.files.identity()) });
                } else if pass.changed.get(u).copied().unwrap_or(true) {
                    self.set(i, changed_during_round(&s.files));
                } else {
                    kept.push((i, s));
                }
            }
            members = kept;
        }
        Ok(())
    }

    /// Puts the sums back as they were before a pass of [`Round::flush`]: zero when they were
    /// `fresh`, else from the copy.
    fn undo(&self, sums: &mut [&mut [f64]], fresh: bool) {
        match &self.copy {
            Some(copy) if !fresh => restore(sums, copy),
            _ => sums.iter_mut().for_each(|acc| acc.fill(0.0)),
        }
    }

    /// [`Round::flush`] without a copy of the sums: every upload of the group read and checked
    /// first (one per core), its largest magnitudes raising the bounds in upload order (an
    /// upload that could overflow the sums is added alone, exactly), then the rest of the group
    /// added in one pass that must find every file as it was checked, or the round stops.
    fn flush_checked_first(
        &mut self,
        members: Vec<(usize, Opened)>,
        sums: &mut [&mut [f64]],
        bounds: &mut [f64],
    ) -> Result<(), Error> {
        let layout = self.layout;
        let checked = in_parallel(members.iter().collect(), usize::MAX, |(_, o)| {
            largest_in(&o.files, &o.located, layout)
        });
        let mut group: Vec<(usize, Opened)> = Vec::new();
        for ((i, o), outcome) in members.into_iter().zip(checked) {
            let largest = match outcome {
                Ok(Ok(largest)) => largest,
                Ok(Err(rejection)) => {
                    self.set(i, Verdict::Rejected { rejection, identity: Some(o.files.identity()) });
                    continue;
                }
                Err(_) => {
                    self.set(i, changed_during_round(&o.files));
                    continue;
                }
            };
            let grown: Vec<f64> = bounds.iter().zip(&largest).map(|(b, l)| b + o.weight * l).collect();
            if grown.len() == bounds.len() && grown.iter().all(|g| g.is_finite()) {
                bounds.copy_from_slice(&grown);
                group.push((i, o));
                continue;
            }
            // the sums could overflow: what is pending first, then this upload alone, exactly
            self.add_checked(&mut group, sums)?;
            let verdict = self.add_exactly(i, o.files.identity(), sums, bounds);
            self.set(i, verdict);
        }
        self.add_checked(&mut group, sums)
    }

    /// Adds uploads that passed their check, without a copy: any change found now stops the round.
    fn add_checked(
        &mut self,
        group: &mut Vec<(usize, Opened)>,
        sums: &mut [&mut [f64]],
    ) -> Result<(), Error> {
        let members = std::mem::take(group);
        if members.is_empty() {
            return Ok(());
        }
        let refs: Vec<&Opened> = members.iter().map(|(_, s)| s).collect();
        let pass = add_group(&refs, sums, None);
        for (u, (i, s)) in members.iter().enumerate() {
            let bad = pass.non_finite.get(u).copied().flatten().is_some()
                || pass.changed.get(u).copied().unwrap_or(true);
            if bad {
                return Err(Error::CheckpointChanged {
                    path: s.files.path().to_path_buf(),
                    detail: "was modified between the round's check of it and its addition; its values may be in \
                             the sums, which are too large to copy for undoing (the round stops; aggregate again)"
                        .into(),
                });
            }
            self.set(*i, Verdict::Added { weight: s.weight, identity: s.files.identity() });
        }
        Ok(())
    }

    fn set(&mut self, i: usize, verdict: Verdict) {
        if let Some(v) = self.verdicts.get_mut(i) {
            *v = Some(verdict);
        }
    }

    /// The exact path for an upload whose sums could overflow: read into memory again (the
    /// same file, by identity), checked and added alone by the kernel ([`accumulate`]).
    fn add_exactly(
        &self,
        i: usize,
        identity: (u64, u64),
        sums: &mut [&mut [f64]],
        bounds: &mut [f64],
    ) -> Verdict {
        let Some(item) = self.items.get(i) else {
            return Verdict::Unreadable(Error::Internal { detail: "no such upload".into() });
        };
        let upload = match read_file(&item.path, self.max_bytes, &mut || true) {
            Ok(u) if u.identity == identity => u,
            Ok(u) => return changed_during_round(&u.files),
            Err(Refusal::Rejected(rejection)) => {
                return Verdict::Rejected { rejection, identity: Some(identity) }
            }
            Err(Refusal::Unreadable(e)) => return Verdict::Unreadable(e),
        };
        let ext = upload.external.as_ref().map(|e| e.bytes());
        let index = match index_upload(upload.checkpoint.bytes(), ext) {
            Ok(index) => index,
            Err(e) => return Verdict::Unreadable(e),
        };
        let (layout, lanes) = (self.layout, self.lanes);
        let outcome = located_data(layout, &index, upload.checkpoint.bytes(), ext, lanes, &item.rule)
            .and_then(|(located, data, weight)| {
                accumulate(layout, &located, &data, weight, sums, bounds).map(|()| weight)
            });
        match outcome {
            Ok(weight) => Verdict::Added { weight, identity },
            Err(rejection) => Verdict::Rejected { rejection, identity: Some(identity) },
        }
    }
}

/// [`super::add_files`] for models that are streamed ([`streams`]): the same checks, verdicts,
/// order of additions and overflow rule.
pub(crate) fn add_files_streamed(call: FileRound<'_, '_>) -> Result<Vec<Verdict>, Error> {
    let copy = copies(&call.layout.slot_lanes());
    add_streamed(call, copy)
}

/// [`add_files_streamed`], a group undone from a copy of the sums (`copy`) or checked first.
fn add_streamed(call: FileRound<'_, '_>, copy: bool) -> Result<Vec<Verdict>, Error> {
    let FileRound { items, layout, max_bytes, seen, sums, bounds, keep_going } = call;
    let lanes = layout.slot_lanes();
    let mut round = Round {
        items,
        layout,
        lanes: &lanes,
        max_bytes,
        copy: copy.then(Vec::new),
        verdicts: Vec::with_capacity(items.len()),
        keep_going,
    };
    round.verdicts.resize_with(items.len(), || None);
    let mut group: Vec<(usize, Opened)> = Vec::new();
    let window = crate::parallel::threads();
    for (w, part) in items.chunks(window).enumerate() {
        if !(round.keep_going)() {
            return Err(Error::Interrupted {
                path: part.first().map(|i| i.path.clone()).unwrap_or_default(),
            });
        }
        let opened =
            in_parallel(part.iter().collect(), usize::MAX, |item| open(item, layout, &lanes, max_bytes));
        for (k, outcome) in opened.into_iter().enumerate() {
            let i = w * window + k;
            let (identity, outcome) = match outcome {
                Ok(read) => read,
                Err(Refusal::Rejected(rejection)) => {
                    round.set(i, Verdict::Rejected { rejection, identity: None });
                    continue;
                }
                Err(Refusal::Unreadable(e)) => {
                    round.set(i, Verdict::Unreadable(e));
                    continue;
                }
            };
            if !seen.insert(identity) {
                round.set(i, Verdict::Duplicate { identity });
                continue;
            }
            match outcome {
                Ok(s) => group.push((i, s)),
                Err(rejection) => round.set(i, Verdict::Rejected { rejection, identity: Some(identity) }),
            }
            if group.len() >= GROUP_MAX {
                round.flush(&mut group, sums, bounds)?;
            }
        }
    }
    round.flush(&mut group, sums, bounds)?;
    Ok(round
        .verdicts
        .into_iter()
        .map(|v| v.unwrap_or_else(|| Verdict::Unreadable(Error::Internal { detail: "no verdict".into() })))
        .collect())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::super::round::add_files_in_memory;
    use super::super::structure::ExpectedParam;
    use super::super::WeightRule;
    use super::*;
    use crate::test_support::bytes_tensor;
    use crate::DataType;
    use std::collections::HashSet;

    /// Lanes of the two tensors: several pieces each, the last one partial.
    const LANES: [usize; 2] = [2 * PIECE + 123, PIECE / 3];

    fn layout() -> Layout {
        float_layout(&LANES)
    }

    /// Trainable float32 tensors `t0`, `t1`, ... of `lanes` values each.
    fn float_layout(lanes: &[usize]) -> Layout {
        let params = lanes
            .iter()
            .enumerate()
            .map(|(i, &n)| ExpectedParam {
                name: format!("t{i}"),
                trainable: true,
                data_type: DataType::Float,
                dims: vec![n as i64],
            })
            .collect();
        Layout { params, momentums: Vec::new() }
    }

    /// An upload whose values are `f(tensor, lane)`.
    fn upload(dir: &Path, name: &str, f: impl Fn(usize, usize) -> f32) -> PathBuf {
        let values: Vec<Vec<u8>> = LANES
            .iter()
            .enumerate()
            .map(|(t, &n)| (0..n).flat_map(|i| f(t, i).to_le_bytes()).collect())
            .collect();
        let trainable = values
            .iter()
            .enumerate()
            .map(|(t, v)| bytes_tensor(&format!("t{t}"), DataType::Float, &[LANES[t] as i64], v))
            .collect();
        let spec = crate::CheckpointSpec { trainable, ..Default::default() };
        let path = dir.join(name);
        std::fs::write(&path, crate::serialize_checkpoint(&spec).unwrap()).unwrap();
        path
    }

    type Run = (Vec<String>, Vec<Vec<f64>>, Vec<f64>);

    /// `add_files_streamed` or `add_files_in_memory`.
    type AddFiles = fn(FileRound<'_, '_>) -> Result<Vec<Verdict>, Error>;

    /// Verdicts (kind words) and sums and bounds of one way of adding `paths` into sums (and
    /// bounds) that something was added into already.
    fn run(paths: &[PathBuf], add: AddFiles) -> Run {
        run_from(paths, add, 0.5)
    }

    /// [`run`] from sums and bounds of `start` (0: fresh sums, nothing added yet).
    fn run_from(paths: &[PathBuf], add: AddFiles, start: f64) -> Run {
        let items: Vec<FileItem> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| FileItem { path: p.clone(), rule: WeightRule::Given(1.0 + i as f64 / 7.0) })
            .collect();
        let mut sums: Vec<Vec<f64>> = LANES.iter().map(|&n| vec![start; n]).collect();
        let mut bounds = vec![start; LANES.len()];
        let mut slices: Vec<&mut [f64]> = sums.iter_mut().map(|s| s.as_mut_slice()).collect();
        let layout = layout();
        let round = FileRound {
            items: &items,
            layout: &layout,
            max_bytes: None,
            seen: &mut HashSet::new(),
            sums: &mut slices,
            bounds: &mut bounds,
            keep_going: &mut || true,
        };
        let verdicts = add(round).unwrap();
        let words = verdicts
            .iter()
            .map(|v| match v {
                Verdict::Added { weight, .. } => format!("added {weight}"),
                Verdict::Duplicate { .. } => "duplicate".into(),
                Verdict::Rejected { rejection, .. } => {
                    format!("{}: {}", rejection.kind.code(), rejection.message)
                }
                Verdict::Unreadable(e) => format!("unreadable: {e}"),
            })
            .collect();
        (words, sums, bounds)
    }

    fn same(a: &Run, b: &Run) {
        assert_eq!(a.0, b.0);
        assert_eq!(
            a.2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.2.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        for (x, y) in a.1.iter().zip(&b.1) {
            assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()));
        }
    }

    /// Large models of large tensors are streamed; small models, and models of many small
    /// tensors (one `pread` per tensor and pass), are read whole.
    #[test]
    fn which_models_are_streamed() {
        if std::env::var_os("ORTCKPT_STREAM_MIN_BYTES").is_some() {
            return; // the threshold was replaced on purpose
        }
        let streamed = |tensors, lanes| {
            let layout = float_layout(&vec![lanes; tensors]);
            streams(&layout, &layout.slot_lanes())
        };
        assert!(streamed(64, 1 << 16)); // 16 MiB in 64 tensors of 256 KiB
        assert!(streamed(16, 1 << 22)); // 256 MiB
        assert!(!streamed(64, 1 << 12)); // 1 MiB
        assert!(!streamed(64, (1 << 16) - 1)); // just under 16 MiB
        assert!(!streamed(1 << 17, 32)); // 16 MiB in 131,072 tensors of 128 B
    }

    /// Every kind of upload, in one call: the streamed path gives the in-memory path's verdicts
    /// and sums bit for bit (a bad upload found after part of the group was added is undone).
    #[test]
    fn streamed_rounds_equal_in_memory_rounds() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let good = |k: usize| move |t: usize, i: usize| ((i * 7 + t) % 1000) as f32 * 0.001 + k as f32;
        let mut paths = vec![upload(d, "a.ckpt", good(1)), upload(d, "b.ckpt", good(2))];
        // a NaN in the last piece of the first tensor, and an infinity in the second tensor
        paths.push(upload(d, "nan.ckpt", |t, i| if t == 0 && i == LANES[0] - 1 { f32::NAN } else { 3.0 }));
        paths.push(upload(d, "inf.ckpt", |t, i| if t == 1 && i == 5 { f32::INFINITY } else { 4.0 }));
        paths.push(paths[0].clone()); // the same file again
        paths.push(d.join("missing.ckpt"));
        let wrong = d.join("wrong.ckpt");
        std::fs::write(&wrong, b"not a checkpoint").unwrap();
        paths.push(wrong);
        paths.push(upload(d, "c.ckpt", good(3)));
        let streamed = run(&paths, add_files_streamed);
        same(&streamed, &run(&paths, add_files_in_memory));
        // checked first, without a copy of the sums: the same verdicts and sums
        same(&run(&paths, |call| add_streamed(call, false)), &streamed);
        // fresh sums, undone by zeroing (one read of each upload), with and without a copy kept
        // for later groups: the same verdicts and sums as in memory
        let from_zero = run_from(&paths, add_files_in_memory, 0.0);
        same(&run_from(&paths, |call| add_streamed(call, false), 0.0), &from_zero);
        same(&run_from(&paths, add_files_streamed, 0.0), &from_zero);
        assert_eq!(streamed.0.iter().filter(|w| w.starts_with("added")).count(), 3, "{:?}", streamed.0);
        assert!(streamed.0[2].starts_with("non-finite: parameter \"t0\""), "{:?}", streamed.0);
        assert!(streamed.0[3].starts_with("non-finite: parameter \"t1\""), "{:?}", streamed.0);
    }

    /// The robust methods' check of a streamed upload finds what reading it whole finds: the
    /// same rejections, tensors, weights and largest magnitudes.
    #[test]
    fn streamed_screening_equals_screening_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let paths = [
            upload(d, "a.ckpt", |t, i| (i % 97) as f32 - 40.0 * t as f32),
            upload(d, "nan.ckpt", |t, i| if t == 1 && i == 9 { f32::NAN } else { 1.0 }),
            upload(d, "inf.ckpt", |t, i| if t == 0 && i == LANES[0] - 1 { f32::NEG_INFINITY } else { 1.0 }),
            d.join("missing.ckpt"),
        ];
        let layout = layout();
        let lanes = layout.slot_lanes();
        let show = |s: Result<Screening, Refusal>| match s {
            Ok((_, Ok(s))) => {
                let largest: Vec<u64> = s.largest.iter().map(|v| v.to_bits()).collect();
                format!("{:?} {} {largest:?} {}", s.located, s.weight, s.files.path().display())
            }
            Ok((_, Err(r))) => format!("{}: {}", r.kind.code(), r.message),
            Err(e) => format!("{e:?}"),
        };
        for path in paths {
            let item = FileItem { path, rule: WeightRule::Given(2.5) };
            let whole = show(super::super::round::screen(&item, &layout, &lanes, None, false));
            assert_eq!(show(screen(&item, &layout, &lanes, None)), whole);
        }
    }

    /// Finite uploads whose sums pass float64's limit: the group is undone and added one by one
    /// with the kernel's exact check, as in memory (the `overflow` verdicts and the sums agree).
    #[test]
    fn a_group_that_could_overflow_is_added_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let paths = [
            upload(d, "a.ckpt", |_, _| 1.0),
            upload(d, "big.ckpt", |_, i| if i == 3 { f32::MAX } else { 2.0 }),
            upload(d, "big2.ckpt", |_, i| if i == 3 { f32::MAX } else { 2.0 }),
            upload(d, "b.ckpt", |_, _| 3.0),
        ];
        let in_memory = run(&paths, add_files_in_memory);
        same(&run(&paths, add_files_streamed), &in_memory);
        same(&run(&paths, |call| add_streamed(call, false)), &in_memory);
        let from_zero = run_from(&paths, add_files_in_memory, 0.0);
        same(&run_from(&paths, |call| add_streamed(call, false), 0.0), &from_zero);
    }

    /// A file cut or rewritten after it was opened is refused as changed, and the group is added
    /// again without it: the sums are those of the other uploads alone.
    #[test]
    fn an_upload_changed_during_the_round_leaves_no_trace() {
        for damage in ["cut", "rewritten"] {
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path();
            let paths: Vec<PathBuf> = (0..3)
                .map(|k| upload(d, &format!("u{k}.ckpt"), move |_, i| (i % 10) as f32 + k as f32))
                .collect();
            let lanes = layout().slot_lanes();
            let items: Vec<FileItem> =
                paths.iter().map(|p| FileItem { path: p.clone(), rule: WeightRule::Given(1.0) }).collect();
            let mut group: Vec<(usize, Opened)> = items
                .iter()
                .enumerate()
                .map(|(i, item)| (i, open(item, &layout(), &lanes, None).unwrap().1.unwrap()))
                .collect();
            let bytes = std::fs::read(&paths[1]).unwrap();
            match damage {
                "cut" => std::fs::OpenOptions::new()
                    .write(true)
                    .open(&paths[1])
                    .unwrap()
                    .set_len(bytes.len() as u64 / 2)
                    .unwrap(),
                _ => {
                    let mut changed = bytes.clone();
                    let last = changed.len() - 1;
                    changed[last] ^= 0x01; // a value in the last tensor, still finite
                    std::fs::write(&paths[1], changed).unwrap();
                    let old = filetime_of(&paths[1]) - 1_000_000_000;
                    set_mtime(&paths[1], old);
                }
            }
            let layout = layout();
            let mut round = Round {
                items: &items,
                layout: &layout,
                lanes: &lanes,
                max_bytes: None,
                copy: Some(Vec::new()),
                verdicts: vec![None, None, None],
                keep_going: &mut || true,
            };
            let mut sums: Vec<Vec<f64>> = lanes.iter().map(|&n| vec![0.0; n]).collect();
            let mut slices: Vec<&mut [f64]> = sums.iter_mut().map(|s| s.as_mut_slice()).collect();
            let mut bounds = vec![0.0; lanes.len()];
            round.flush(&mut group, &mut slices, &mut bounds).unwrap();
            assert!(
                matches!(round.verdicts[1], Some(Verdict::Unreadable(Error::CheckpointChanged { .. }))),
                "{damage}"
            );
            assert!(matches!(round.verdicts[2], Some(Verdict::Added { .. })), "{damage}");
            // u0 + u2, with weight 1 each: (i % 10) + (i % 10 + 2), exact in float64
            for (slot, sum) in sums.iter().enumerate() {
                for (lane, v) in sum.iter().enumerate() {
                    let want = ((lane % 10) as f64) * 2.0 + 2.0;
                    assert_eq!(*v, want, "{damage} slot {slot} lane {lane}");
                }
            }
        }
    }

    /// Without a copy of the sums (checked first), a file changed between its check and its
    /// addition cannot be taken out again: the round stops with `CheckpointChanged` naming it,
    /// and a file changed before its check is refused as changed while the others are added.
    #[test]
    fn checked_first_a_change_after_the_check_stops_the_round() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let paths: Vec<PathBuf> = (0..3)
            .map(|k| upload(d, &format!("u{k}.ckpt"), move |_, i| (i % 10) as f32 + k as f32))
            .collect();
        let lanes = layout().slot_lanes();
        let layout = layout();
        let items: Vec<FileItem> =
            paths.iter().map(|p| FileItem { path: p.clone(), rule: WeightRule::Given(1.0) }).collect();
        let opened = |i: usize| (i, open(&items[i], &layout, &lanes, None).unwrap().1.unwrap());
        let mut round = Round {
            items: &items,
            layout: &layout,
            lanes: &lanes,
            max_bytes: None,
            copy: None,
            verdicts: vec![None, None, None],
            keep_going: &mut || true,
        };
        let mut sums: Vec<Vec<f64>> = lanes.iter().map(|&n| vec![0.0; n]).collect();
        let mut slices: Vec<&mut [f64]> = sums.iter_mut().map(|s| s.as_mut_slice()).collect();
        // checked (opened and scanned by the caller), then cut before the addition
        let mut group = vec![opened(0), opened(1)];
        let cut = std::fs::OpenOptions::new().write(true).open(&paths[1]).unwrap();
        cut.set_len(64).unwrap();
        let err = round.add_checked(&mut group, &mut slices).unwrap_err();
        assert!(matches!(&err, Error::CheckpointChanged { path, .. } if path == &paths[1]), "{err}");
        // cut before the check: refused as changed, the other added
        let mut round = Round { verdicts: vec![None, None, None], ..round };
        let mut bounds = vec![0.0; lanes.len()];
        let mut fresh: Vec<Vec<f64>> = lanes.iter().map(|&n| vec![0.0; n]).collect();
        let mut slices: Vec<&mut [f64]> = fresh.iter_mut().map(|s| s.as_mut_slice()).collect();
        let mut group = vec![opened(0), opened(2)];
        std::fs::OpenOptions::new().write(true).open(&paths[2]).unwrap().set_len(64).unwrap();
        round.flush(&mut group, &mut slices, &mut bounds).unwrap();
        assert!(matches!(round.verdicts[0], Some(Verdict::Added { .. })));
        assert!(matches!(round.verdicts[2], Some(Verdict::Unreadable(Error::CheckpointChanged { .. }))));
    }

    fn filetime_of(path: &Path) -> i64 {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).unwrap();
        m.mtime() * 1_000_000_000 + m.mtime_nsec()
    }

    /// Sets the modification time (a rewrite within one clock tick keeps it: the round must
    /// still see the change, by its size or its values, or here by the time set back).
    fn set_mtime(path: &Path, ns: i64) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns as u64);
        file.set_modified(t).unwrap();
    }
}
