//! One aggregation round: [`Round`] takes uploads one at a time or in batches, gives each its
//! verdict at once, and gives the aggregate at the end ([`Round::finish`]).
//!
//! The round owns everything a round is: the reference's [`Layout`], the method and its options,
//! the identities already seen (the same upload given twice counts once), the FedAvg sums with the
//! overflow rule ([`tally`]), the uploads kept for the robust methods ([`members`]) and the global
//! model of `relative_to`. It chooses how to read each upload itself: local files of plain FedAvg
//! are added by the windowed or streamed kernels (`round.rs`, `stream.rs`), bytes by the kernel
//! directly; the robust methods and update hygiene keep each accepted upload (its files held open,
//! or its bytes) and read them again, chunk by chunk, when the round finishes ([`robust`]).

mod identity;
mod members;
mod noise;
mod options;
mod robust;
mod tally;

use super::rejection::RejectionKind;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use identity::Identity;
pub use members::{Held, Origin, Portable, Shared, Stamp};
pub use noise::add_noise;
pub use options::{check_trim, Method, Options, MIN_CHUNK_BYTES};
pub use robust::MemberReport;
pub use robust::{clip_scale, plan_of, random_seed, segments, Plan, Reduced, Segment};

use super::checks::located_data;
use super::round::{check_files, Screened};
use super::structure::{check_structure, Layout, Located, WeightRule};
use super::upload::{index_upload, open_files, read_file, HeldFiles, Refusal};
use super::verdict::{FileItem, Verdict as FileVerdict};
use super::{Float32s, Rejection};
use crate::message::Message;
use crate::values::Lanes;
use crate::{DataType, Error};
use members::Member;
use tally::Tally;

/// What became of one upload.
#[derive(Debug)]
pub enum Verdict {
    /// Counted, with this weight (the staleness discount applied).
    Accepted {
        /// The weight used.
        weight: f64,
    },
    /// The same upload as an earlier one, whose label is given: counted once.
    Duplicate {
        /// The label of the upload counted.
        first: String,
    },
    /// Refused by the round's checks (a documented kind).
    Rejected(Rejection),
    /// The reader's or the operating system's error (the kind `unreadable`).
    Unreadable(Error),
}

/// The round's staleness rule (FedBuff's): an upload trained from a global model `s` versions old
/// weighs `weight × (1 + s)^-exponent`; one older than `cutoff` is rejected (kind `stale`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Staleness {
    /// The discount's exponent (FedBuff: 0.5, i.e. `1 / sqrt(1 + s)`).
    pub exponent: f64,
    /// The largest staleness accepted (None: any).
    pub cutoff: Option<u64>,
}

impl Default for Staleness {
    fn default() -> Staleness {
        Staleness { exponent: 0.5, cutoff: None }
    }
}

impl Staleness {
    /// The factor of an upload `staleness` versions old, or its rejection.
    pub fn discount(&self, staleness: u64) -> Result<f64, Rejection> {
        if let Some(cutoff) = self.cutoff.filter(|&c| staleness > c) {
            return Err(Rejection::new(
                RejectionKind::Stale,
                format!("trained from a global model {staleness} versions old; the cut-off is {cutoff}"),
            ));
        }
        Ok((1.0 + staleness as f64).powf(-self.exponent))
    }

    fn check(&self) -> Result<(), String> {
        if !(self.exponent.is_finite() && self.exponent >= 0.0) {
            return Err(format!("staleness_exponent must be a finite number >= 0; got {}", self.exponent));
        }
        Ok(())
    }
}

/// One upload for [`Round::add_files`]: a local checkpoint file (its external data is `path.data`).
pub struct FileUpload {
    /// The checkpoint's path.
    pub path: PathBuf,
    /// How its weight is chosen.
    pub rule: WeightRule,
    /// How it is named in verdicts (the client).
    pub label: String,
    /// How many global-model versions old it is (see [`Staleness`]).
    pub staleness: u64,
}

/// The values of every averaged tensor: float64, or already rounded to float32 where
/// [`Round::finish_rounding`] allowed it.
pub enum Values {
    /// FedAvg's sums, one vector per slot: the values are the sums divided by `divisor` (the
    /// total weight), divided where the caller rounds them to their dtype (one pass over the
    /// sums, not two), slot by slot, freeing each as it goes (a 3 GB model never holds 6 GB of
    /// float64 values and its rounded copy at once). Finite: each mean lies between the smallest
    /// and the largest of its finite values, up to the final rounding.
    Sums {
        /// The sums (empty for a slot `rounded` holds).
        sums: Vec<Vec<f64>>,
        /// What each sum is divided by.
        divisor: f64,
        /// Per slot, its values already divided and rounded to float32 in the sums' own memory
        /// (see [`Round::finish_rounding`]), if they are; empty when none is.
        rounded: Vec<Option<Float32s>>,
    },
    /// The robust methods' result, every slot's values in order (`Aggregate::lanes` each), each
    /// kind in one allocation of huge pages: float64 values, but for the slots `rounded` marks,
    /// whose values are in `rounded_values`, rounded to float32.
    Flat {
        /// The float64 slots' values, one after another.
        values: Vec<f64>,
        /// The rounded slots' values, one after another.
        rounded_values: Float32s,
        /// Per slot, whether it is rounded (empty: none is).
        rounded: Vec<bool>,
    },
}

/// One slot's values in [`Values`].
#[derive(Debug, PartialEq)]
pub enum Slot<'a> {
    /// Float64 values (for `Values::Sums`, the sums).
    F64(&'a [f64]),
    /// Values rounded to float32.
    F32(&'a [f32]),
}

impl Values {
    /// The robust methods' float64 values of every slot.
    pub fn flat(values: Vec<f64>) -> Values {
        Values::Flat { values, rounded_values: Float32s::from_vec(Vec::new(), true), rounded: Vec::new() }
    }

    /// Each slot's values (for `Sums`, the sums).
    pub fn slots<'a>(&'a self, lanes: &[usize]) -> Vec<Slot<'a>> {
        match self {
            Values::Sums { sums, rounded, .. } => sums
                .iter()
                .enumerate()
                .map(|(k, s)| match rounded.get(k) {
                    Some(Some(r)) => Slot::F32(r.as_slice()),
                    _ => Slot::F64(s),
                })
                .collect(),
            Values::Flat { values, rounded_values, rounded } => {
                let mut out = Vec::with_capacity(lanes.len());
                let (mut wide, mut narrow) = (0usize, 0usize);
                for (k, &n) in lanes.iter().enumerate() {
                    if rounded.get(k).copied().unwrap_or(false) {
                        out.push(Slot::F32(
                            rounded_values
                                .as_slice()
                                .get(narrow..narrow.saturating_add(n))
                                .unwrap_or_default(),
                        ));
                        narrow = narrow.saturating_add(n);
                    } else {
                        out.push(Slot::F64(values.get(wide..wide.saturating_add(n)).unwrap_or_default()));
                        wide = wide.saturating_add(n);
                    }
                }
                out
            }
        }
    }
}

impl Aggregate {
    /// Each slot's aggregate values (FedAvg's sums divided by the total weight; a rounded slot's
    /// values as they are), as new float64 vectors.
    pub fn means(&self) -> Vec<Vec<f64>> {
        let divisor = match &self.values {
            Values::Sums { divisor, .. } => *divisor,
            Values::Flat { .. } => 1.0,
        };
        let mean = |slot: Slot<'_>| -> Vec<f64> {
            match slot {
                Slot::F64(s) => s.iter().map(|v| v / divisor).collect(),
                Slot::F32(s) => s.iter().map(|&v| f64::from(v)).collect(),
            }
        };
        self.values.slots(&self.lanes).into_iter().map(mean).collect()
    }
}

/// The aggregate: float64 values of every averaged tensor, what was counted, and what was found
/// about each upload kept by the robust methods.
pub struct Aggregate {
    /// The values.
    pub values: Values,
    /// Float64 lanes of each slot (elements; twice for complex).
    pub lanes: Vec<usize>,
    /// The sum of the accepted uploads' weights.
    pub total_weight: f64,
    /// The accepted uploads.
    pub count: usize,
    /// Per kept upload (robust methods and hygiene) still counted, in the order they were accepted.
    pub members: Vec<MemberReport>,
    /// Uploads accepted when they came but left out at the end, by their place in the order of
    /// acceptance: an update against `relative_to` that leaves float64 (kind `overflow`), or an
    /// upload accepted with its values unchecked that holds one that is not finite (see
    /// [`Round::add_files_deferring_values`]).
    pub dropped: Vec<(usize, Rejection)>,
}

/// A round that gave no aggregate: why, and the uploads it had left out before it failed (by
/// their place in the order of acceptance, as [`Aggregate::dropped`]: their verdicts are
/// rejections even so).
#[derive(Debug)]
pub struct Unfinished {
    /// Why there is no aggregate.
    pub error: Error,
    /// The uploads left out at the end, with their rejections.
    pub dropped: Vec<(usize, Rejection)>,
}

impl From<Unfinished> for Error {
    fn from(unfinished: Unfinished) -> Error {
        unfinished.error
    }
}

/// The FedAvg sums of part of a round's uploads (a Dask task's batch): what [`Round::absorb`]
/// adds into another round.
#[derive(Clone, Debug, PartialEq)]
pub struct Partial {
    /// Every slot's sums, one after another.
    pub sums: Vec<f64>,
    /// Per slot: a bound on the magnitude of its sums.
    pub bounds: Vec<f64>,
    /// The sum of the weights.
    pub total_weight: f64,
    /// The uploads counted.
    pub count: usize,
}

impl Partial {
    /// Adds `other` into `self`; `Err` (and `self` unchanged in what it means: the round fails)
    /// when the sums or the total weight pass float64's limit.
    pub fn merge(&mut self, other: &Partial) -> Result<(), Error> {
        if other.count == 0 {
            return Ok(());
        }
        if self.count == 0 {
            *self = other.clone();
            return Ok(());
        }
        if self.sums.len() != other.sums.len() || self.bounds.len() != other.bounds.len() {
            return Err(Error::Internal { detail: "partial sums of two different models".into() });
        }
        let total = self.total_weight + other.total_weight;
        let overflow =
            !total.is_finite() || self.sums.iter().zip(&other.sums).any(|(a, b)| !(a + b).is_finite());
        if overflow {
            return Err(Error::Aggregation {
                detail: "the partial sums (or total weights) of two batches overflow float64 when added: \
                         aggregate these uploads on one machine (engine=None), which rejects the upload \
                         that overflows"
                    .into(),
            });
        }
        self.sums.iter_mut().zip(&other.sums).for_each(|(a, b)| *a += b);
        self.bounds.iter_mut().zip(&other.bounds).for_each(|(a, b)| *a += b);
        self.total_weight = total;
        self.count += other.count;
        Ok(())
    }
}

/// An aggregation round (see the module note).
pub struct Round {
    layout: Layout,
    lanes: Vec<usize>,
    options: Options,
    staleness: Staleness,
    /// Identity -> label of the upload counted (or refused after being read) under it.
    seen: HashMap<Identity, String>,
    tally: Tally,
    members: Vec<Member>,
    base: Option<Member>,
    accepted: usize,
    /// A cluster task's round: uploads are checked and kept, but not admitted (no overflow
    /// rule: the client's round admits them in upload order, see [`Round::admit`]).
    screening: bool,
    /// Per kept member in screening mode: its identity and each tensor's largest magnitude.
    screened: Vec<(Identity, Vec<f64>)>,
    /// The client's round of a cluster: the uploads admitted, read by the cluster's tasks.
    remote: Vec<Portable>,
}

impl Round {
    /// A round over uploads shaped as `layout`; `Err` names an option out of range.
    pub fn new(layout: Layout, options: Options, staleness: Staleness) -> Result<Round, String> {
        options.check()?;
        staleness.check()?;
        let lanes = layout.slot_lanes();
        let tally = Tally::new(&lanes);
        Ok(Round {
            layout,
            lanes,
            options,
            staleness,
            seen: HashMap::new(),
            tally,
            members: Vec::new(),
            base: None,
            accepted: 0,
            screening: false,
            screened: Vec::new(),
            remote: Vec::new(),
        })
    }

    /// A cluster task's round (see `screening`): every upload checked and kept with its largest
    /// magnitudes, none admitted; [`Round::into_portables`] gives them to the client's round.
    pub fn screening(layout: Layout, options: Options, staleness: Staleness) -> Result<Round, String> {
        let mut round = Round::new(layout, options, staleness)?;
        round.screening = true;
        Ok(round)
    }

    /// The reference's structure.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The round's options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Accepted uploads so far.
    pub fn accepted(&self) -> usize {
        self.accepted
    }

    /// The sum of the accepted uploads' weights so far.
    pub fn total_weight(&self) -> f64 {
        self.tally.total_weight
    }

    /// Whether every accepted upload is kept to be read again at the end (the robust methods and
    /// update hygiene), rather than added into sums as it comes.
    fn keeps_members(&self) -> bool {
        self.screening || !self.options.plain() || self.base.is_some()
    }

    /// Sets the global model the uploads are updates of (`relative_to`): a local file, held open
    /// and read again at the end. `Err(Rejection)` when it does not match the reference.
    pub fn set_base_file(&mut self, path: &Path) -> Result<(), Refusal> {
        let files = open_files(path, None)?;
        let index = files.index()?;
        let located = check_structure(&index, &self.layout)?;
        self.check_base_ranges(&located, Some(files.sizes()))?;
        self.base = Some(Member::new("relative_to".into(), 1.0, Held::Files(Box::new(files)), located));
        Ok(())
    }

    /// [`Round::set_base_file`] for a global model given as bytes.
    pub fn set_base_bytes(&mut self, checkpoint: Shared, external: Option<Shared>) -> Result<(), Refusal> {
        let ext = external.as_ref().map(|e| (**e).as_ref());
        let index = index_upload((*checkpoint).as_ref(), ext)?;
        let located = check_structure(&index, &self.layout)?;
        let sizes = ((*checkpoint).as_ref().len() as u64, ext.map(|e| e.len() as u64));
        self.check_base_ranges(&located, Some(sizes))?;
        self.base = Some(Member::new("relative_to".into(), 1.0, Held::Bytes(checkpoint, external), located));
        Ok(())
    }

    fn check_base_ranges(
        &self,
        located: &[Located],
        sizes: Option<(u64, Option<u64>)>,
    ) -> Result<(), Rejection> {
        for (slot, (loc, &n)) in located.iter().zip(&self.lanes).enumerate() {
            let expected = (n as u64).saturating_mul(loc.lanes.width() as u64);
            let size = match (sizes, loc.external) {
                (Some((_, Some(ext))), true) => ext,
                (Some((cp, _)), false) => cp,
                _ => 0,
            };
            if loc.bytes.end.checked_sub(loc.bytes.start) != Some(expected) || loc.bytes.end > size {
                return Err(Rejection::new(
                    RejectionKind::Unreadable,
                    Message::text_first("the bytes of ")
                        .then(self.layout.slot_label(slot))
                        .text(" lie outside the global model"),
                ));
            }
        }
        Ok(())
    }

    /// The weight rule of an upload `staleness` versions old, or its rejection.
    fn discounted(&self, rule: &WeightRule, staleness: u64) -> Result<WeightRule, Rejection> {
        let factor = self.staleness.discount(staleness)?;
        if factor == 1.0 {
            return Ok(rule.clone());
        }
        Ok(match rule {
            WeightRule::Given(w) => WeightRule::Given(w * factor),
            WeightRule::Property(name) => WeightRule::PropertyTimes(name.clone(), factor),
            WeightRule::PropertyTimes(name, f) => WeightRule::PropertyTimes(name.clone(), f * factor),
        })
    }

    /// Checks and counts local upload files, in order, on every core (see the module note):
    /// one verdict per upload.
    pub fn add_files(&mut self, uploads: &[FileUpload]) -> Result<Vec<Verdict>, Error> {
        self.add_files_with(uploads, false)
    }

    /// [`Round::add_files`], where a round that keeps its uploads (a robust method) over a model
    /// without float64 tensors checks here what needs no value (readable, the reference's
    /// structure, the weight, not a duplicate) and each value when [`Round::finish`] first reads
    /// it: the uploads are read once, not twice. One holding a value that is not finite is then
    /// left out with the kind and reason `add_files` gives it (in `Aggregate::dropped`), so the
    /// aggregate and the final verdicts are the same. For callers that want the verdicts only
    /// with the aggregate (`average`); other rounds check at once.
    pub fn add_files_deferring_values(&mut self, uploads: &[FileUpload]) -> Result<Vec<Verdict>, Error> {
        self.add_files_with(uploads, true)
    }

    /// Checks and counts one local file that stands for an upload named `name` (a remote upload
    /// copied, once, into a private temporary file by the caller): the checks, verdicts and sums
    /// of [`Round::add_files`], but the upload's identity is `name` (a URL), as for
    /// [`Round::add_bytes`] with a named identity: the same URL given twice counts once, and the
    /// temporary file's (device, inode), which the next copy may reuse once this one is deleted,
    /// is never recorded. The rejection order is the bytes' (stale, then duplicate).
    pub fn add_file_named(&mut self, upload: &FileUpload, name: &str) -> Result<Verdict, Error> {
        if let Err(r) = self.staleness.discount(upload.staleness) {
            return Ok(Verdict::Rejected(r));
        }
        let identity = Identity::Named(name.to_owned());
        if let Some(first) = self.seen.get(&identity) {
            return Ok(Verdict::Duplicate { first: first.clone() });
        }
        // the file kernels see no identity of their own (so none is a duplicate of this file) and
        // record the file's in this empty map: whether they did tells whether the upload was
        // indexed, which is when an upload's identity counts (as `add_held` records it)
        let seen = std::mem::take(&mut self.seen);
        let outcome = self.add_files_with(std::slice::from_ref(upload), false);
        let indexed = !std::mem::replace(&mut self.seen, seen).is_empty();
        let verdict = outcome?
            .pop()
            .unwrap_or_else(|| Verdict::Unreadable(Error::Internal { detail: "no verdict".into() }));
        if indexed {
            self.seen.entry(identity).or_insert_with(|| upload.label.clone());
        }
        Ok(verdict)
    }

    fn add_files_with(&mut self, uploads: &[FileUpload], defer_values: bool) -> Result<Vec<Verdict>, Error> {
        let mut verdicts: Vec<Option<Verdict>> = (0..uploads.len()).map(|_| None).collect();
        let mut items = Vec::with_capacity(uploads.len());
        let mut positions = Vec::with_capacity(uploads.len());
        for (i, u) in uploads.iter().enumerate() {
            match self.discounted(&u.rule, u.staleness) {
                Ok(rule) => {
                    items.push(FileItem { path: u.path.clone(), rule });
                    positions.push(i);
                }
                Err(rejection) => verdicts[i] = Some(Verdict::Rejected(rejection)),
            }
        }
        let labels: Vec<&str> = positions.iter().map(|&i| uploads[i].label.as_str()).collect();
        let found = if self.screening {
            self.screen_only(&items, &labels)
        } else if defer_values && self.defers_values() {
            self.screen_structures(&items, &labels)
        } else if self.keeps_members() {
            self.screen_files(&items, &labels)?
        } else {
            self.sum_files(&items, &labels)?
        };
        for (i, v) in positions.into_iter().zip(found) {
            verdicts[i] = Some(v);
        }
        Ok(verdicts
            .into_iter()
            .map(|v| {
                v.unwrap_or_else(|| Verdict::Unreadable(Error::Internal { detail: "no verdict".into() }))
            })
            .collect())
    }

    /// Plain FedAvg over files: the windowed or streamed kernels add them into the sums.
    fn sum_files(&mut self, items: &[FileItem], labels: &[&str]) -> Result<Vec<Verdict>, Error> {
        let mut seen: std::collections::HashSet<(u64, u64)> = self.file_identities();
        let verdicts = self.tally.add_files(items, &self.layout, self.options.max_bytes, &mut seen)?;
        Ok(verdicts.into_iter().zip(labels).map(|(v, label)| self.settle(v, label)).collect())
    }

    /// The robust methods' check of files: every upload checked as FedAvg checks it, its files
    /// kept open; when the sums would be needed to tell an overflow, one by one exactly.
    fn screen_files(&mut self, items: &[FileItem], labels: &[&str]) -> Result<Vec<Verdict>, Error> {
        let mut out = Vec::with_capacity(items.len());
        let mut next = 0;
        while next < items.len() {
            let (Some(rest), Some(rest_labels)) = (items.get(next..), labels.get(next..)) else { break };
            if !self.tally.has_sums() {
                let mut seen = self.file_identities();
                let screened = check_files(
                    rest,
                    &self.layout,
                    self.options.max_bytes,
                    &mut seen,
                    &mut self.tally.bounds,
                    &mut || true,
                )?;
                next += screened.len();
                for (s, label) in screened.into_iter().zip(rest_labels) {
                    let verdict = match s {
                        Screened::Accepted { weight, identity, files, located } => {
                            self.tally.total_weight += weight;
                            self.seen.insert(Identity::File(identity.0, identity.1), (*label).to_string());
                            self.keep(label, weight, Held::Files(Box::new(files)), located)
                        }
                        Screened::Other(v) => self.settle(v, label),
                    };
                    out.push(verdict);
                }
                if next >= items.len() {
                    break;
                }
            }
            // an upload whose bounds would become infinite (or every upload once the sums exist):
            // read whole, added exactly, kept
            let (Some(item), Some(label)) = (items.get(next), labels.get(next)) else { break };
            out.push(self.add_file_exactly(item, label)?);
            next += 1;
        }
        Ok(out)
    }

    /// Whether values may be checked when the round first reads them (see [`Round::add_files`]):
    /// a round on this machine that keeps its uploads, without a global model (whose updates are
    /// checked against it first), without float64 tensors, and whose uploads index cheaply from
    /// their files (tensors of 64 KiB or more on average: `stream::indexes_cheaply`; smaller
    /// ones are read whole, as checking at once does). Float64's are the values whose weighted
    /// sums can overflow (`bounds`, which the deferred check does not raise): any other type's
    /// largest value times the largest weight (2^64) is far below float64's limit.
    fn defers_values(&self) -> bool {
        self.keeps_members()
            && !self.screening
            && self.base.is_none()
            && !self.tally.has_sums()
            && self.layout.slot_types().iter().all(|&t| Lanes::of(t).is_some_and(|l| l != Lanes::F64))
            && super::stream::indexes_cheaply(&self.layout, &self.lanes)
    }

    /// [`Round::add_files`] with the values' check deferred: each upload opened and its structure
    /// and weight checked (on every core), kept unchecked.
    fn screen_structures(&mut self, items: &[FileItem], labels: &[&str]) -> Vec<Verdict> {
        let (layout, lanes, max_bytes) = (&self.layout, &self.lanes, self.options.max_bytes);
        let opened = crate::parallel::in_parallel(items.iter().collect(), usize::MAX, |item| {
            super::stream::open(item, layout, lanes, max_bytes)
        });
        let mut out = Vec::with_capacity(items.len());
        for (outcome, label) in opened.into_iter().zip(labels) {
            let verdict = match outcome {
                Err(Refusal::Rejected(r)) => FileVerdict::Rejected { rejection: r, identity: None },
                Err(Refusal::Unreadable(e)) => FileVerdict::Unreadable(e),
                Ok((identity, _)) if self.seen.contains_key(&Identity::File(identity.0, identity.1)) => {
                    FileVerdict::Duplicate { identity }
                }
                Ok((identity, Err(rejection))) => {
                    FileVerdict::Rejected { rejection, identity: Some(identity) }
                }
                Ok((identity, Ok(super::stream::Opened { files, located, weight }))) => {
                    self.seen.insert(Identity::File(identity.0, identity.1), (*label).to_string());
                    self.tally.total_weight += weight;
                    let verdict = self.keep(label, weight, Held::Files(Box::new(files)), located);
                    if let Some(m) = self.members.last_mut() {
                        m.unchecked = true;
                    }
                    out.push(verdict);
                    continue;
                }
            };
            out.push(self.settle(verdict, label));
        }
        out
    }

    /// A cluster task's check of files: each checked (on every core) and kept, none admitted.
    fn screen_only(&mut self, items: &[FileItem], labels: &[&str]) -> Vec<Verdict> {
        let (layout, lanes, max_bytes) = (&self.layout, &self.lanes, self.options.max_bytes);
        let streamed = super::stream::streams(layout, lanes);
        let screened = crate::parallel::in_parallel(items.iter().collect(), usize::MAX, |item| {
            super::round::screen(item, layout, lanes, max_bytes, streamed)
        });
        let mut out = Vec::with_capacity(items.len());
        for (outcome, label) in screened.into_iter().zip(labels) {
            let verdict = match outcome {
                Err(Refusal::Rejected(r)) => Verdict::Rejected(r),
                Err(Refusal::Unreadable(e)) => Verdict::Unreadable(e),
                Ok(((dev, ino), checked)) => {
                    let identity = Identity::File(dev, ino);
                    if let Some(first) = self.seen.get(&identity) {
                        out.push(Verdict::Duplicate { first: first.clone() });
                        continue;
                    }
                    self.seen.insert(identity.clone(), (*label).to_string());
                    match checked {
                        Ok(s) => {
                            self.screened.push((identity, s.largest));
                            self.keep(label, s.weight, Held::Files(Box::new(s.files)), s.located)
                        }
                        Err(r) => Verdict::Rejected(r),
                    }
                }
            };
            out.push(verdict);
        }
        out
    }

    /// The uploads a screening round kept, as they travel to the client's round.
    pub fn into_portables(self) -> Vec<Portable> {
        self.members
            .iter()
            .zip(self.screened)
            .map(|(m, (identity, largest))| m.portable(identity, largest))
            .collect()
    }

    /// The client's admission of an upload a cluster's task checked ([`Round::into_portables`]),
    /// in upload order: a duplicate, or accepted when no sum can overflow with it. `None` when
    /// only FedAvg's exact sums could tell (the caller then runs the round's exact rule where
    /// the uploads can be read: see docs/federated.md).
    pub fn admit(&mut self, portable: Portable) -> Option<Verdict> {
        if let Some(first) = self.seen.get(&portable.identity) {
            return Some(Verdict::Duplicate { first: first.clone() });
        }
        if !self.tally.admit_largest(portable.weight, &portable.largest) {
            return None;
        }
        self.seen.insert(portable.identity.clone(), portable.label.clone());
        self.accepted += 1;
        let weight = portable.weight;
        self.remote.push(portable);
        Some(Verdict::Accepted { weight })
    }

    /// Leaves out the admitted uploads whose update against `relative_to` leaves float64
    /// (`first[i]`: the first slot where upload `i`'s does, found by the cluster's tasks); their
    /// rejections, by place in the order of admission.
    pub fn drop_remote(&mut self, first: &[Option<usize>]) -> Vec<(usize, Rejection)> {
        let mut dropped = Vec::new();
        let mut kept = Vec::with_capacity(self.remote.len());
        for (i, p) in std::mem::take(&mut self.remote).into_iter().enumerate() {
            match first.get(i).copied().flatten() {
                Some(slot) => {
                    let message = Message::text_first("its update against relative_to overflows float64 in ")
                        .then(self.layout.slot_name(slot));
                    self.accepted = self.accepted.saturating_sub(1);
                    self.tally.total_weight -= p.weight;
                    dropped.push((i, Rejection::new(RejectionKind::Overflow, message)));
                }
                None => kept.push(p),
            }
        }
        self.remote = kept;
        dropped
    }

    /// The uploads admitted by [`Round::admit`], in order.
    pub fn remote(&self) -> &[Portable] {
        &self.remote
    }

    /// The global model of `relative_to`, as a cluster's tasks read it.
    pub fn base_portable(&self) -> Option<Portable> {
        self.base.as_ref().map(|b| b.portable(Identity::Named("relative_to".into()), Vec::new()))
    }

    /// The aggregate of a round whose passes ran on a cluster (see [`passes`]).
    pub fn finish_remote(
        self,
        reduced: Reduced,
        squares: Vec<f64>,
        plan: &Plan,
        scores: Option<Vec<f64>>,
    ) -> Result<Aggregate, Error> {
        self.check_count()?;
        // the tasks' ranges, in order, cut into the slots again
        let values = Values::flat(reduced.values);
        check_finite(&self.layout, self.options.method.name(), &values.slots(&self.lanes))?;
        let members: Vec<MemberReport> = self
            .remote
            .iter()
            .enumerate()
            .map(|(i, p)| MemberReport {
                label: p.label.clone(),
                weight: p.weight,
                norm: squares.get(i).map_or(0.0, |s| s.sqrt()),
                clipped: plan.scale.get(i).is_some_and(|&s| s < 1.0),
                distance: reduced.gaps.get(i).map_or(0.0, |g| g.sqrt()),
                krum_score: scores.as_ref().and_then(|s| s.get(i).copied()),
                selected: plan.selected.contains(&i),
            })
            .collect();
        let lanes = self.lanes.clone();
        Ok(Aggregate {
            values,
            lanes,
            total_weight: self.tally.total_weight,
            count: self.accepted,
            members,
            dropped: Vec::new(),
        })
    }

    fn check_count(&self) -> Result<(), Error> {
        let (needed, why) = self.options.method.needs();
        if self.accepted == 0 {
            return Err(Error::Aggregation { detail: "no upload was accepted".into() });
        }
        if self.accepted < needed {
            let short = needed - self.accepted;
            return Err(Error::Aggregation {
                detail: format!("{why}; {} were accepted ({short} short)", self.accepted).into(),
            });
        }
        Ok(())
    }

    /// One upload read whole and added to the sums by the kernel's exact check, then kept.
    fn add_file_exactly(&mut self, item: &FileItem, label: &str) -> Result<Verdict, Error> {
        let upload = match read_file(&item.path, self.options.max_bytes, &mut || true) {
            Ok(u) => u,
            Err(Refusal::Rejected(r)) => return Ok(Verdict::Rejected(r)),
            Err(Refusal::Unreadable(e)) => return Ok(Verdict::Unreadable(e)),
        };
        let identity = Identity::File(upload.identity.0, upload.identity.1);
        if let Some(first) = self.seen.get(&identity) {
            return Ok(Verdict::Duplicate { first: first.clone() });
        }
        let ext = upload.external.as_ref().map(|e| e.bytes());
        let index = match index_upload(upload.checkpoint.bytes(), ext) {
            Ok(index) => index,
            Err(e) => return Ok(Verdict::Unreadable(e)),
        };
        self.seen.insert(identity, label.to_string());
        let checked =
            located_data(&self.layout, &index, upload.checkpoint.bytes(), ext, &self.lanes, &item.rule);
        let (located, data, weight) = match checked {
            Ok(found) => found,
            Err(r) => return Ok(Verdict::Rejected(r)),
        };
        self.ensure_sums()?;
        if let Err(r) = self.tally.add_exactly(&self.layout, &located, &data, weight) {
            return Ok(Verdict::Rejected(r));
        }
        drop(data);
        Ok(self.keep(label, weight, Held::Files(Box::new(upload.files)), located))
    }

    /// The sums of the members so far, made when the first upload could overflow them.
    fn ensure_sums(&mut self) -> Result<(), Error> {
        if !self.tally.has_sums() {
            let sums = members::sums_of(&self.members, &self.lanes)?;
            self.tally.set_sums(sums);
        }
        Ok(())
    }

    /// Checks and counts one upload given as bytes (a URL's, a state's, a client's reply).
    pub fn add_bytes(
        &mut self,
        checkpoint: Shared,
        external: Option<Shared>,
        rule: &WeightRule,
        label: &str,
        identity: Option<Identity>,
        staleness: u64,
    ) -> Verdict {
        self.add_held(checkpoint, external, None, rule, label, identity, staleness)
    }

    /// Checks and counts one local upload already read whole into memory (from `files`, which
    /// stay open: the robust methods read its values again from them, and a change of the file
    /// since the read fails the round as it does for every kept file).
    pub fn add_read(
        &mut self,
        checkpoint: Shared,
        external: Option<Shared>,
        files: HeldFiles,
        rule: &WeightRule,
        label: &str,
        staleness: u64,
    ) -> Verdict {
        let (dev, ino) = files.identity();
        self.add_held(
            checkpoint,
            external,
            Some(files),
            rule,
            label,
            Some(Identity::File(dev, ino)),
            staleness,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn add_held(
        &mut self,
        checkpoint: Shared,
        external: Option<Shared>,
        files: Option<HeldFiles>,
        rule: &WeightRule,
        label: &str,
        identity: Option<Identity>,
        staleness: u64,
    ) -> Verdict {
        let rule = match self.discounted(rule, staleness) {
            Ok(rule) => rule,
            Err(r) => return Verdict::Rejected(r),
        };
        let ext = external.as_ref().map(|e| (**e).as_ref());
        let size = ((*checkpoint).as_ref().len() as u64).saturating_add(ext.map_or(0, |e| e.len() as u64));
        if let Some(limit) = self.options.max_bytes.filter(|&l| size > l) {
            return Verdict::Rejected(Rejection::new(
                RejectionKind::TooLarge,
                format!("upload of {size} bytes exceeds the size limit of {limit} bytes"),
            ));
        }
        let identity = identity.unwrap_or_else(|| Identity::of_bytes((*checkpoint).as_ref(), ext));
        if let Some(first) = self.seen.get(&identity) {
            return Verdict::Duplicate { first: first.clone() };
        }
        let index = match index_upload((*checkpoint).as_ref(), ext) {
            Ok(index) => index,
            Err(e) => return Verdict::Unreadable(e),
        };
        self.count_indexed(&index, checkpoint, external, files, &rule, label, identity)
    }

    /// Checks and counts one ORT 1.15 checkpoint folder, read by the core's folder reader
    /// (`read_legacy_folder`: its checkpoint files' sizes checked against `max_bytes` before any
    /// is read) into its index and one buffer of values, which the round takes as they are (no
    /// flatbuffer is written and indexed again); its identity is `name` (its path). `Ok(None)`
    /// when the directory holds none of a folder's files; `Err` only when `keep_going` stops it.
    pub fn add_folder(
        &mut self,
        dir: &Path,
        rule: &WeightRule,
        label: &str,
        name: &str,
        staleness: u64,
        keep_going: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Verdict>, Error> {
        let rule = match self.discounted(rule, staleness) {
            Ok(rule) => rule,
            Err(r) => return Ok(Some(Verdict::Rejected(r))),
        };
        let folder = match crate::read_legacy_folder(dir, self.options.max_bytes, keep_going) {
            Ok(Some(folder)) => folder,
            Ok(None) => return Ok(None),
            Err(e @ Error::Interrupted { .. }) => return Err(e),
            Err(e @ Error::SizeLimit { .. }) => {
                return Ok(Some(Verdict::Rejected(Rejection::new(RejectionKind::TooLarge, e.to_string()))))
            }
            Err(e) => return Ok(Some(Verdict::Unreadable(e))),
        };
        let identity = Identity::Named(name.to_owned());
        if let Some(first) = self.seen.get(&identity) {
            return Ok(Some(Verdict::Duplicate { first: first.clone() }));
        }
        let values: Shared = Arc::new(folder.values);
        Ok(Some(self.count_indexed(&folder.index, values, None, None, &rule, label, identity)))
    }

    /// [`Round::add_held`] once the upload is indexed (`index`, whose tensors lie in `checkpoint`
    /// and `external`): its identity recorded, its structure, weight and values checked, and it
    /// is counted (or kept, with `files` when it was read from them).
    #[allow(clippy::too_many_arguments)]
    fn count_indexed(
        &mut self,
        index: &crate::CheckpointIndex,
        checkpoint: Shared,
        external: Option<Shared>,
        files: Option<HeldFiles>,
        rule: &WeightRule,
        label: &str,
        identity: Identity,
    ) -> Verdict {
        let ext = external.as_ref().map(|e| (**e).as_ref());
        self.seen.insert(identity.clone(), label.to_string());
        let checked = located_data(&self.layout, index, (*checkpoint).as_ref(), ext, &self.lanes, rule);
        let (located, data, weight) = match checked {
            Ok(found) => found,
            Err(r) => return Verdict::Rejected(r),
        };
        if self.screening {
            let largest = match super::kernel::largest_of(&self.layout, &located, &data) {
                Ok(largest) => largest,
                Err(r) => return Verdict::Rejected(r),
            };
            drop(data);
            self.screened.push((identity, largest));
            let held = match files {
                Some(files) => Held::Files(Box::new(files)),
                None => Held::Bytes(checkpoint, external),
            };
            return self.keep(label, weight, held, located);
        }
        if !self.keeps_members() {
            return match self.tally.add_exactly(&self.layout, &located, &data, weight) {
                Ok(()) => {
                    self.accepted += 1;
                    Verdict::Accepted { weight }
                }
                Err(r) => Verdict::Rejected(r),
            };
        }
        let admitted = if self.tally.has_sums() {
            self.tally.add_exactly(&self.layout, &located, &data, weight).map(|()| true)
        } else {
            self.tally.check(&self.layout, &located, &data, weight)
        };
        match admitted {
            Ok(true) => {}
            Ok(false) => {
                // only the sums can tell whether this upload overflows them
                if let Err(e) = self.ensure_sums() {
                    return Verdict::Unreadable(e);
                }
                if let Err(r) = self.tally.add_exactly(&self.layout, &located, &data, weight) {
                    return Verdict::Rejected(r);
                }
            }
            Err(r) => return Verdict::Rejected(r),
        }
        drop(data);
        let held = match files {
            Some(files) => Held::Files(Box::new(files)),
            None => Held::Bytes(checkpoint, external),
        };
        self.keep(label, weight, held, located)
    }

    /// Keeps an accepted upload for the end of the round.
    fn keep(&mut self, label: &str, weight: f64, held: Held, located: Vec<Located>) -> Verdict {
        self.accepted += 1;
        self.members.push(Member::new(label.to_string(), weight, held, located));
        Verdict::Accepted { weight }
    }

    /// The identities of local files seen so far (what the file kernels take).
    fn file_identities(&self) -> std::collections::HashSet<(u64, u64)> {
        self.seen
            .keys()
            .filter_map(|k| match k {
                Identity::File(dev, ino) => Some((*dev, *ino)),
                _ => None,
            })
            .collect()
    }

    /// A file kernel's verdict as the round's, its identity recorded (a duplicate names the first).
    fn settle(&mut self, verdict: FileVerdict, label: &str) -> Verdict {
        let record = |seen: &mut HashMap<Identity, String>, id: (u64, u64)| {
            seen.entry(Identity::File(id.0, id.1)).or_insert_with(|| label.to_string());
        };
        match verdict {
            FileVerdict::Added { weight, identity } => {
                record(&mut self.seen, identity);
                self.accepted += 1;
                Verdict::Accepted { weight }
            }
            FileVerdict::Duplicate { identity } => {
                let first = self
                    .seen
                    .get(&Identity::File(identity.0, identity.1))
                    .cloned()
                    .unwrap_or_else(|| "an earlier upload".into());
                Verdict::Duplicate { first }
            }
            FileVerdict::Rejected { rejection, identity } => {
                if let Some(id) = identity {
                    record(&mut self.seen, id);
                }
                Verdict::Rejected(rejection)
            }
            FileVerdict::Unreadable(e) => Verdict::Unreadable(e),
        }
    }

    /// The FedAvg sums so far (plain FedAvg only): the round ends.
    pub fn into_partial(self) -> Result<Partial, Error> {
        if self.keeps_members() {
            return Err(Error::Internal { detail: "only plain FedAvg rounds have partial sums".into() });
        }
        let total: usize = self.lanes.iter().sum();
        let (sums, bounds, total_weight) = self.tally.into_parts();
        let sums = sums.map_or_else(|| vec![0.0; total], |s| s.concat());
        Ok(Partial { sums, bounds, total_weight, count: self.accepted })
    }

    /// Adds the partial sums of another round's uploads (plain FedAvg only).
    pub fn absorb(&mut self, partial: &Partial) -> Result<(), Error> {
        if self.keeps_members() {
            return Err(Error::Internal { detail: "only plain FedAvg rounds take partial sums".into() });
        }
        let total: usize = self.lanes.iter().sum();
        if partial.sums.len() != total || partial.bounds.len() != self.lanes.len() {
            return Err(Error::Internal { detail: "partial sums of another model".into() });
        }
        let (sums, bounds, total_weight) =
            std::mem::replace(&mut self.tally, Tally::new(&self.lanes)).into_parts();
        let sums = sums.map_or_else(|| vec![0.0; total], |s| s.concat());
        let mut mine = Partial { sums, bounds, total_weight, count: self.accepted };
        let merged = mine.merge(partial);
        let sums = tally::split_slots(&mine.sums, &self.lanes);
        self.tally = Tally::from_parts(&self.lanes, sums, mine.bounds, mine.total_weight);
        merged?;
        self.accepted = mine.count;
        Ok(())
    }

    /// The aggregate of the accepted uploads; `Err` when there is none, when there are fewer
    /// than the method needs, when a kept file changed during the round, or when the aggregate
    /// is not finite (finite uploads whose aggregate passes float64's limit).
    pub fn finish(self) -> Result<Aggregate, Unfinished> {
        self.finish_rounding(false)
    }

    /// [`Round::finish`], and with `float32` the float32 (and complex64) slots come rounded to
    /// float32 ([`Slot::F32`]) as a caller rounding each slot to its type would round them, where
    /// the method allows: FedAvg's means (divided and rounded in the sums' own memory) and a plain
    /// median's or trimmed mean's values (no global model, clipping or noise: no float64 copy of
    /// the model is written). Only for a caller that rounds the values to their types next (a
    /// server optimizer steps on the float64 values).
    pub fn finish_rounding(mut self, float32: bool) -> Result<Aggregate, Unfinished> {
        let mut dropped = Vec::new();
        match self.finish_values(&mut dropped, float32) {
            Ok((values, members)) => {
                let (count, total_weight) = (self.accepted, self.tally.total_weight);
                Ok(Aggregate { values, lanes: self.lanes, total_weight, count, members, dropped })
            }
            Err(error) => Err(Unfinished { error, dropped }),
        }
    }

    /// [`Round::finish`]'s work: the values and what was found about each kept upload; the
    /// uploads left out on the way are added to `dropped` (also when it fails afterwards).
    fn finish_values(
        &mut self,
        dropped: &mut Vec<(usize, Rejection)>,
        float32: bool,
    ) -> Result<(Values, Vec<MemberReport>), Error> {
        // each kept member's place among the accepted uploads, as the verdicts were given
        let mut places: Vec<usize> = (0..self.members.len()).collect();
        if self.check_count().is_err() && self.members.iter().any(|m| m.unchecked) {
            // too few even before a value is read: the count is that of the uploads that pass
            let bad = self.check_unchecked()?;
            dropped.extend(self.remove_members(bad, &mut places));
        }
        self.check_count()?;
        dropped.extend(self.drop_overflowing_updates(&mut places)?);
        self.check_count()?;
        if self.members.is_empty() && self.base.is_none() {
            let tally = std::mem::replace(&mut self.tally, Tally::new(&self.lanes));
            let divisor = tally.total_weight;
            self.tally.total_weight = divisor;
            let mut sums = tally.into_sums()?;
            let rounded =
                if float32 { round_float32_sums(&mut sums, divisor, &self.layout) } else { Vec::new() };
            return Ok((Values::Sums { sums, divisor, rounded }, Vec::new()));
        }
        let (reduced, reports) = loop {
            match robust::aggregate(&self.lanes, &self.options, &self.members, self.base.as_ref(), float32) {
                Ok(found) => break found,
                // a value of an upload accepted unchecked is not finite: every unchecked upload is
                // checked now (one pass, however many are bad), the bad ones are left out with the
                // rejection they would have had when they came, and the round starts again
                Err(robust::Failed { member: Some(m), error })
                    if self.members.get(m).is_some_and(|m| m.unchecked) =>
                {
                    let bad = self.check_unchecked()?;
                    if bad.is_empty() {
                        return Err(error); // the values are finite: the file changed meanwhile
                    }
                    dropped.extend(self.remove_members(bad, &mut places));
                    self.check_count()?;
                }
                Err(failed) => return Err(failed.into()),
            }
        };
        let Reduced { values, rounded_values, rounded, rounded_finite, .. } = reduced;
        let rounded_values = Float32s::from_vec(rounded_values, rounded_finite);
        let values = Values::Flat { values, rounded_values, rounded };
        check_finite(&self.layout, self.options.method.name(), &values.slots(&self.lanes))?;
        Ok((values, reports))
    }

    /// Checks the values of every member accepted unchecked (on every core): those holding a value
    /// that is not finite, by their position, with the rejection [`Round::add_files`] would have
    /// given them; the others are marked checked.
    fn check_unchecked(&mut self) -> Result<Vec<(usize, Rejection)>, Error> {
        let layout = &self.layout;
        let work: Vec<(usize, &Member)> =
            self.members.iter().enumerate().filter(|(_, m)| m.unchecked).collect();
        let found = crate::parallel::in_parallel(work, usize::MAX, |(i, m)| match &m.held {
            Held::Files(files) => super::stream::values_rejection(files, &m.located, layout).map(|r| (i, r)),
            Held::Bytes(..) => Ok((i, None)),
        });
        let mut bad = Vec::new();
        for outcome in found {
            let (i, rejection) = outcome?;
            match rejection {
                Some(r) => {
                    // a value that was finite when the upload came and is not now is a changed
                    // file (the round fails, as it does for an upload checked at once), not a bad
                    // upload: its stamp tells
                    if let Some(m) = self.members.get(i) {
                        m.held.confirm_unchanged()?;
                    }
                    bad.push((i, r));
                }
                None => {
                    if let Some(m) = self.members.get_mut(i) {
                        m.unchecked = false;
                    }
                }
            }
        }
        Ok(bad)
    }

    /// Leaves out the members at the positions of `bad` (ascending), which were accepted: their
    /// count is taken back and the total weight is summed again over the members kept, in the
    /// order they were accepted (subtracting a weight would not undo its addition in float64: the
    /// total is then that of a round that never counted them). Returns each one's place among the
    /// accepted uploads (`places`, kept in step with the members) and its rejection.
    fn remove_members(
        &mut self,
        bad: Vec<(usize, Rejection)>,
        places: &mut Vec<usize>,
    ) -> Vec<(usize, Rejection)> {
        let mut rejected: HashMap<usize, Rejection> = bad.into_iter().collect();
        let mut dropped = Vec::new();
        let members = std::mem::take(&mut self.members);
        let old_places = std::mem::take(places);
        for (i, (m, place)) in members.into_iter().zip(old_places).enumerate() {
            match rejected.remove(&i) {
                Some(rejection) => {
                    self.accepted = self.accepted.saturating_sub(1);
                    dropped.push((place, rejection));
                }
                None => {
                    self.members.push(m);
                    places.push(place);
                }
            }
        }
        if !dropped.is_empty() {
            // every accepted upload of a round that keeps them is a member
            self.tally.total_weight = self.members.iter().fold(0.0, |total, m| total + m.weight);
        }
        dropped
    }

    /// With `relative_to`: the kept uploads whose update (values minus the global model's) leaves
    /// float64 in some tensor (finite values of opposite signs near the limit) are left out,
    /// rejected with kind `overflow`, before anything is aggregated (one pass over the updates).
    fn drop_overflowing_updates(
        &mut self,
        places: &mut Vec<usize>,
    ) -> Result<Vec<(usize, Rejection)>, Error> {
        let Some(base) = self.base.as_ref() else { return Ok(Vec::new()) };
        let total: usize = self.lanes.iter().sum();
        let passes = robust::Passes::new(
            &self.members,
            Some(base),
            segments(&self.lanes, 0, total),
            self.options.chunk_bytes,
        );
        let found = passes.update_overflows()?;
        let bad = found
            .into_iter()
            .enumerate()
            .filter_map(|(i, bad)| bad.map(|slot| (i, slot)))
            .map(|(i, slot)| {
                let message = Message::text_first("its update against relative_to overflows float64 in ")
                    .then(self.layout.slot_name(slot));
                (i, Rejection::new(RejectionKind::Overflow, message))
            })
            .collect();
        Ok(self.remove_members(bad, places))
    }
}

/// FedAvg's float32 (and complex64) slots divided by `divisor` and rounded to float32 in their sums'
/// own memory (their `sums` left empty): the mean of finite values lies between the smallest and
/// the largest of them, so it is finite in float32 too. The other slots are left as sums.
fn round_float32_sums(sums: &mut [Vec<f64>], divisor: f64, layout: &Layout) -> Vec<Option<Float32s>> {
    let types = layout.slot_types();
    sums.iter_mut()
        .zip(types)
        .map(|(s, t)| {
            matches!(t, DataType::Float | DataType::Complex64)
                .then(|| Float32s::rounded_in_place(std::mem::take(s), divisor))
        })
        .collect()
}

/// `Err` naming the first slot of `values` that holds a float64 value that is not finite (a slot
/// rounded to float32 is finite: see [`robust::Passes::reduce`]).
fn check_finite(layout: &Layout, method: &str, values: &[Slot<'_>]) -> Result<(), Error> {
    for (slot, part) in values.iter().enumerate() {
        if matches!(part, Slot::F64(part) if part.iter().any(|v| !v.is_finite())) {
            return Err(Error::Aggregation {
                detail: Message::text_first(format!("the {method} aggregate of "))
                    .then(layout.slot_name(slot))
                    .text(
                        " is not finite in float64: the uploads are finite, but their aggregate passes \
                         float64's limit (values near ±1.8e308, or an update added to the global model)",
                    ),
            });
        }
    }
    Ok(())
}

#[allow(unused)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<Round>();
    is_send::<Arc<dyn AsRef<[u8]> + Send + Sync>>();
}

/// The passes of a round whose uploads are read by a cluster's tasks, each over lanes
/// `start..end` of the model (all slots one after another): the task opens the uploads again
/// (a file must still be the version that was checked), reads its lanes and confirms the files
/// unchanged when done. The client adds the tasks' partial results (see docs/federated.md).
pub mod passes {
    use super::robust::{segments, Passes, Plan, Reduced};
    use super::{Member, Portable};
    use crate::Error;

    fn opened(
        portables: &[Portable],
        base: Option<&Portable>,
    ) -> Result<(Vec<Member>, Option<Member>), Error> {
        let members = portables.iter().map(Member::open).collect::<Result<Vec<_>, _>>()?;
        let base = base.map(Member::open).transpose()?;
        Ok((members, base))
    }

    fn confirmed<T>(members: &[Member], base: Option<&Member>, value: T) -> Result<T, Error> {
        for m in members.iter().chain(base) {
            m.held.confirm_unchanged()?;
        }
        Ok(value)
    }

    /// Per upload, the first slot within lanes `start..end` where its update leaves float64.
    pub fn update_overflows(
        portables: &[Portable],
        base: Option<&Portable>,
        lanes: &[usize],
        (start, end): (usize, usize),
        chunk_bytes: usize,
    ) -> Result<Vec<Option<usize>>, Error> {
        let (members, base) = opened(portables, base)?;
        let out = Passes::new(&members, base.as_ref(), segments(lanes, start, end), chunk_bytes)
            .update_overflows()?;
        confirmed(&members, base.as_ref(), out)
    }

    /// Per upload, the sum of the squares of its update over lanes `start..end`.
    pub fn squares(
        portables: &[Portable],
        base: Option<&Portable>,
        lanes: &[usize],
        (start, end): (usize, usize),
        chunk_bytes: usize,
    ) -> Result<Vec<f64>, Error> {
        let (members, base) = opened(portables, base)?;
        let out = Passes::new(&members, base.as_ref(), segments(lanes, start, end), chunk_bytes).squares()?;
        confirmed(&members, base.as_ref(), out)
    }

    /// The squared distances between the (scaled) updates over lanes `start..end`, and their squares.
    pub fn distances(
        portables: &[Portable],
        base: Option<&Portable>,
        lanes: &[usize],
        (start, end): (usize, usize),
        chunk_bytes: usize,
        scale: &[f64],
    ) -> Result<(Vec<f64>, Vec<f64>), Error> {
        let (members, base) = opened(portables, base)?;
        let out = Passes::new(&members, base.as_ref(), segments(lanes, start, end), chunk_bytes)
            .distances(scale)?;
        confirmed(&members, base.as_ref(), out)
    }

    /// The aggregate of lanes `start..end` per `plan`.
    pub fn reduce(
        portables: &[Portable],
        base: Option<&Portable>,
        lanes: &[usize],
        (start, end): (usize, usize),
        chunk_bytes: usize,
        plan: &Plan,
    ) -> Result<Reduced, Error> {
        let (members, base) = opened(portables, base)?;
        let out = Passes::new(&members, base.as_ref(), segments(lanes, start, end), chunk_bytes)
            .reduce(plan, false)?;
        confirmed(&members, base.as_ref(), out)
    }
}

#[cfg(test)]
mod tests;
