//! The uploads a round keeps to read again when it finishes (the robust methods and update
//! hygiene): their files held open since their check (read with `pread`, never mapped), or their
//! bytes.

use std::path::PathBuf;
use std::sync::Arc;

use super::super::rows::{read_rows, RowSource};
use super::super::structure::Located;
use super::super::upload::HeldFiles;
use super::identity::Identity;
use super::tally::{slot_views, written_zeros};
use crate::dir::FileId;
use crate::mapped::FileStamp;
use crate::Error;

/// Bytes shared with the caller (a Python `bytes` object, a buffer read from a URL): never copied.
pub type Shared = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where a kept upload's values are read from.
pub enum Held {
    /// Its files, open since its check.
    Files(Box<HeldFiles>),
    /// Its checkpoint's bytes and its external data's, when there are.
    Bytes(Shared, Option<Shared>),
}

impl Held {
    /// The rows reader's view of it.
    pub(crate) fn source(&self) -> RowSource<'_> {
        match self {
            Held::Files(files) => RowSource::Files(files),
            Held::Bytes(checkpoint, external) => {
                RowSource::Bytes((**checkpoint).as_ref(), external.as_ref().map(|e| (**e).as_ref()))
            }
        }
    }

    /// `Err` when its files are no longer the versions that were checked (bytes never change).
    pub(crate) fn confirm_unchanged(&self) -> Result<(), Error> {
        match self {
            Held::Files(files) => files.confirm_unchanged(),
            Held::Bytes(..) => Ok(()),
        }
    }
}

/// An accepted upload kept to be read again.
pub(crate) struct Member {
    pub(crate) label: String,
    pub(crate) weight: f64,
    pub(crate) held: Held,
    pub(crate) located: Vec<Located>,
    /// Its values were not read when it was accepted (only its structure and weight): the round's
    /// first read of them checks them (see `Round::finish`).
    pub(crate) unchecked: bool,
}

impl Member {
    pub(crate) fn new(label: String, weight: f64, held: Held, located: Vec<Located>) -> Member {
        Member { label, weight, held, located, unchecked: false }
    }

    /// What another process needs to read it again (see [`Portable`]), with each tensor's
    /// largest magnitude (`largest`) for the overflow rule.
    pub(crate) fn portable(&self, identity: Identity, largest: Vec<f64>) -> Portable {
        let source = match &self.held {
            Held::Files(files) => {
                let (checkpoint, external) = files.stamps();
                Origin::File {
                    path: files.path().to_path_buf(),
                    checkpoint: stamp_of(&checkpoint),
                    external: external.as_ref().map(stamp_of),
                }
            }
            Held::Bytes(checkpoint, external) => Origin::Bytes(Arc::clone(checkpoint), external.clone()),
        };
        Portable {
            label: self.label.clone(),
            weight: self.weight,
            located: self.located.clone(),
            largest,
            identity,
            source,
        }
    }

    /// The upload described by `portable`, opened here: its files again (`Err`, CheckpointChanged,
    /// unless they are the versions that were checked), or its bytes.
    pub(crate) fn open(portable: &Portable) -> Result<Member, Error> {
        let held = match &portable.source {
            Origin::File { path, checkpoint, external } => Held::Files(Box::new(HeldFiles::reopen(
                path,
                (file_stamp(checkpoint), external.as_ref().map(file_stamp)),
            )?)),
            Origin::Bytes(checkpoint, external) => Held::Bytes(Arc::clone(checkpoint), external.clone()),
        };
        Ok(Member::new(portable.label.clone(), portable.weight, held, portable.located.clone()))
    }
}

/// A file's identity and version: (device, inode, size, modification time in ns).
pub type Stamp = (u64, u64, u64, i128);

fn stamp_of(s: &FileStamp) -> Stamp {
    (s.id.dev, s.id.ino, s.size, s.mtime_ns)
}

fn file_stamp(s: &Stamp) -> FileStamp {
    FileStamp { id: FileId { dev: s.0, ino: s.1 }, size: s.2, mtime_ns: s.3 }
}

/// Where an accepted upload's values are, for another process of a cluster.
#[derive(Clone)]
pub enum Origin {
    /// A file on storage every process sees, and the versions of it (and of its `.data`) checked.
    File {
        /// The checkpoint's path.
        path: PathBuf,
        /// The checkpoint file's stamp.
        checkpoint: Stamp,
        /// The external data file's stamp, when there is one.
        external: Option<Stamp>,
    },
    /// Its bytes.
    Bytes(Shared, Option<Shared>),
}

/// An accepted upload as it travels between the processes of a cluster: everything a task
/// needs to read its values (the checks are not repeated; a file is confirmed to be the version
/// that was checked), and what the round needs to admit it (its weight, identity and each
/// tensor's largest magnitude).
#[derive(Clone)]
pub struct Portable {
    /// How verdicts name it.
    pub label: String,
    /// Its weight (the staleness discount applied).
    pub weight: f64,
    /// Where each averaged tensor's bytes are.
    pub located: Vec<Located>,
    /// Each averaged tensor's largest magnitude.
    pub largest: Vec<f64>,
    /// What tells it from the others.
    pub identity: Identity,
    /// Where its values are.
    pub source: Origin,
}

/// Lanes per upload read at a time by [`sums_of`].
const SUM_CHUNK: usize = 1 << 16;

/// FedAvg's float64 sums of `members` (`weight × value`, added in their order, as the kernel adds
/// them one upload after another), read again chunk by chunk: made only when an upload could
/// overflow them (see `tally.rs`).
pub(crate) fn sums_of(members: &[Member], lanes: &[usize]) -> Result<Vec<Vec<f64>>, Error> {
    let mut sums: Vec<Vec<f64>> = lanes.iter().map(|&n| written_zeros(n)).collect();
    let mut views = slot_views(&mut sums);
    let sources: Vec<RowSource<'_>> = members.iter().map(|m| m.held.source()).collect();
    let n = members.len();
    let mut block = Vec::new();
    for (slot, acc) in views.iter_mut().enumerate() {
        let locations: Vec<Located> =
            members.iter().map(|m| m.located.get(slot).cloned()).collect::<Option<_>>().ok_or_else(|| {
                Error::Internal { detail: "a kept upload without the reference's tensors".into() }
            })?;
        let total = acc.len();
        let mut first = 0;
        while first < total {
            let count = SUM_CHUNK.min(total - first);
            block.resize(n * count, 0.0);
            read_rows(&sources, &locations, first, count, &mut block).map_err(|(_, e)| e)?;
            if let Some(part) = acc.get_mut(first..first + count) {
                for (row, m) in block.chunks(count).zip(members) {
                    part.iter_mut().zip(row).for_each(|(a, v)| *a += v * m.weight);
                }
            }
            first += count;
        }
    }
    drop(views);
    Ok(sums)
}
