//! What the loops over upload files share, so that the in-memory path (`round.rs`) and the
//! streamed one (`stream.rs`) use one vocabulary without importing each other: the items of a
//! round, the verdict on each, a call's arguments, and what the robust methods' screening keeps.

use std::collections::HashSet;
use std::path::PathBuf;

use super::rejection::Rejection;
use super::structure::{Layout, Located, WeightRule};
use super::upload::HeldFiles;
use crate::Error;

/// One upload of the round: its path and how its weight is chosen.
pub struct FileItem {
    /// The checkpoint's path (its external data file is `path.data`).
    pub path: PathBuf,
    /// Its weight.
    pub rule: WeightRule,
}

/// What became of one upload.
#[derive(Debug)]
pub enum Verdict {
    /// Added into the sums with this weight.
    Added {
        /// The weight used.
        weight: f64,
        /// (device, inode) of the checkpoint file.
        identity: (u64, u64),
    },
    /// The same file as an earlier upload (identity given): counted once.
    Duplicate {
        /// (device, inode) of the checkpoint file.
        identity: (u64, u64),
    },
    /// Refused by the checks; `identity` when the file was read.
    Rejected {
        /// Why.
        rejection: Rejection,
        /// (device, inode) of the checkpoint file, when it was read.
        identity: Option<(u64, u64)>,
    },
    /// The reader's or the operating system's error (the kind `unreadable`).
    Unreadable(Error),
}

/// One call of [`super::add_files`], its arguments checked, for the path that adds the uploads.
pub(crate) struct FileRound<'r, 's> {
    pub(crate) items: &'r [FileItem],
    pub(crate) layout: &'r Layout,
    pub(crate) max_bytes: Option<u64>,
    pub(crate) seen: &'r mut HashSet<(u64, u64)>,
    pub(crate) sums: &'r mut [&'s mut [f64]],
    pub(crate) bounds: &'r mut [f64],
    pub(crate) keep_going: &'r mut dyn FnMut() -> bool,
}

/// What [`super::check_files`] keeps of an upload that passed its checks: its files (open, to be read
/// again), where its tensors are, its weight and each tensor's largest magnitude.
pub(crate) struct Screen {
    pub(crate) files: HeldFiles,
    pub(crate) located: Vec<Located>,
    pub(crate) weight: f64,
    pub(crate) largest: Vec<f64>,
}

/// An upload's identity (device, inode) and the outcome of [`super::check_files`]' checks after its index.
pub(crate) type Screening = ((u64, u64), Result<Screen, Rejection>);
