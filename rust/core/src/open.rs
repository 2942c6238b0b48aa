//! Opening a checkpoint and its external data file as one consistent pair, even while other
//! processes save over it.
//!
//! Why the check below is sound. Savers (`commit.rs`) and recovery (`recover.rs`) change which
//! files the names `N` (checkpoint) and `D` (`N.data`) lead to only while the journal `J` exists,
//! and whenever `J` is absent the two names lead to one complete pair. A load does, in order:
//!
//! 1. open `N` (file `c`) and `D` (file `d`, or "absent");
//! 2. read `J` (at time `t`);
//! 3. confirm that `N` still leads to `c` and `D` still leads to `d` (or is still absent).
//!
//! If `J` is absent at `t`, the names lead at `t` to one complete pair `P`. Step 3 happens after
//! `t`; after `t` the names can only come to lead to files that a later save creates (fresh temp
//! files, which had no such name before) or to backups of what the names led to after `t` — never
//! back to a file that left the name before `t`. So if step 3 still finds `c` and `d`, they are
//! what the names led to at `t`: `(c, d) = P`. Holding `c` and `d` open keeps their inode numbers
//! from being reused, which makes the (device, inode) comparisons exact.
//!
//! If `J` exists at `t`, it records the identities of the pair before and after its save; `(c, d)`
//! is accepted exactly when it equals one of them (both are complete pairs by construction; for a
//! pair without a data file, `c` alone decides and `d` is dropped).
//! Otherwise the load is inside a save's window: it waits and retries while the save is alive
//! (the directory's commit lock is held), and raises [`Error::InterruptedSave`] when the save is
//! dead (the journal stays but nobody holds the lock): only `recover` can settle that.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::files::{id_of_path, is_absent, open_regular, pause_commits, Commits, FileId};
use crate::journal::{read_journal, Found, PairPaths};
use crate::mapped::MappedFile;
use crate::pair::external_data_location;
use crate::{Error, Result};

/// How [`open_checkpoint`] makes the bytes available.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Memory-map both files (nothing is read until used).
    Map,
    /// Read both files fully into private memory before returning: nothing another program does to
    /// the files afterwards can affect the bytes.
    Read,
}

/// A checkpoint file and its external data file (when one exists), from one save.
pub struct OpenedCheckpoint {
    /// The checkpoint file.
    pub checkpoint: MappedFile,
    /// Its external data file, when one exists.
    pub external: Option<MappedFile>,
    /// `external_data_path(path)`, as given (not resolved).
    pub external_path: PathBuf,
}

/// Attempts before giving up on a checkpoint that keeps changing; with the sleeps below, about
/// two seconds in all.
const ATTEMPTS: u32 = 60;

/// Opens `path` and `path.data` as one pair; see the module documentation. `keep_going` is called
/// between chunks of an [`OpenMode::Read`] read and between attempts; returning false stops with
/// [`Error::Interrupted`]. `limit` (a caller's `max_bytes`): a pair whose opened files hold more
/// bytes together is refused ([`Error::SizeLimit`]) before anything is mapped or read.
pub fn open_checkpoint(
    path: &Path,
    mode: OpenMode,
    limit: Option<u64>,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<OpenedCheckpoint> {
    let mut last_reason = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(u64::from(attempt.min(40))));
            if !keep_going() {
                return Err(Error::Interrupted { path: path.to_path_buf() });
            }
        }
        match try_open(path, mode, limit, keep_going)? {
            Attempt::Done(opened) => return Ok(*opened),
            Attempt::Retry(reason) => last_reason = reason,
        }
    }
    Err(Error::KeptChanging { path: path.to_path_buf(), detail: last_reason })
}

pub(crate) enum Attempt {
    Done(Box<OpenedCheckpoint>),
    Retry(String),
}

fn not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if is_absent(source))
}

fn try_open(
    given: &Path,
    mode: OpenMode,
    limit: Option<u64>,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<Attempt> {
    let paths = PairPaths::new(given)?;
    let external_path = external_data_location(given);
    // 1. open both files (their identities are taken from the open files)
    let checkpoint = match open_regular(given) {
        Ok(f) => Some(f),
        // A save without hard links moves the old file aside for a moment: ask the journal.
        Err(e) if not_found(&e) => match read_journal(&paths)? {
            Found::Journal(_) | Found::Corrupt => None,
            // No journal now: either there is no such checkpoint, or such a save finished between
            // the open and the journal's read, and the name leads to its new file again.
            _ if id_of_path(given)?.is_some() => {
                return Ok(Attempt::Retry("the checkpoint reappeared while it was opened".into()))
            }
            _ => return Err(e),
        },
        Err(e) => return Err(e),
    };
    let external = match open_regular(&external_path) {
        Ok(f) => Some(f),
        Err(e) if not_found(&e) => None,
        Err(e) => return Err(e),
    };
    // 2. the journal
    let journal = read_journal(&paths)?;
    let Some(checkpoint) = checkpoint else {
        return interrupted_or_retry(&paths, "the checkpoint is being replaced");
    };
    // identity and size from one `fstat` of each opened file
    let stat = |f: &std::fs::File, p: &Path| -> Result<(FileId, u64)> {
        let meta = f.metadata().map_err(|e| Error::io(p, "read metadata of", e))?;
        Ok((FileId::of(&meta), meta.len()))
    };
    let (checkpoint_id, checkpoint_len) = stat(&checkpoint, given)?;
    let external_stat = external.as_ref().map(|f| stat(f, &external_path)).transpose()?;
    let external_id = external_stat.map(|(id, _)| id);
    // 3. the names still lead to the opened files
    if id_of_path(given)? != Some(checkpoint_id) || id_of_path(&external_path)? != external_id {
        return Ok(Attempt::Retry("a save replaced the files while they were opened".into()));
    }
    let external = match journal {
        Found::None | Found::Foreign => external,
        Found::Journal(j) => match j.complete_pair(checkpoint_id, external_id) {
            Some(true) => external,
            Some(false) => None, // an inline checkpoint: the `.data` there belongs to the other save
            None => return interrupted_or_retry(&paths, "a save is replacing the files"),
        },
        Found::Corrupt => return interrupted_or_retry(&paths, "the save journal is unreadable"),
    };
    if let Some(limit) = limit {
        // the external file counts when it is still part of the pair (the journal may drop it)
        let ext_len = external.as_ref().and(external_stat).map_or(0, |(_, len)| len);
        let total = checkpoint_len.saturating_add(ext_len);
        if total > limit {
            return Err(Error::SizeLimit { path: given.to_path_buf(), size: total, limit });
        }
    }

    let (checkpoint, external) = match mode {
        OpenMode::Map => (
            MappedFile::map(checkpoint, given)?,
            external.map(|f| MappedFile::map(f, &external_path)).transpose()?,
        ),
        OpenMode::Read => {
            let read = |f, p: &Path, keep_going: &mut dyn FnMut() -> bool| match MappedFile::read(
                f, p, keep_going,
            ) {
                Err(Error::CheckpointChanged { .. }) => Ok(None),
                other => other.map(Some),
            };
            let Some(c) = read(checkpoint, given, keep_going)? else {
                return Ok(Attempt::Retry("the checkpoint changed while it was read".into()));
            };
            let e = match external {
                Some(f) => match read(f, &external_path, keep_going)? {
                    Some(e) => Some(e),
                    None => return Ok(Attempt::Retry("the external data changed while it was read".into())),
                },
                None => None,
            };
            (c, e)
        }
    };
    Ok(Attempt::Done(Box::new(OpenedCheckpoint { checkpoint, external, external_path })))
}

/// Inside a save's window: wait while the save runs; a dead save's journal needs `recover`.
///
/// "Dead" is decided with the commit lock held shared and the journal read again under it: the
/// journal seen by the caller may belong to a save that finished (journal removed, lock released)
/// just before the lock was probed — a live save, not a dead one. Under the shared lock no save or
/// recovery can commit, so a journal still there is a dead save's, and none means retry.
pub(crate) fn interrupted_or_retry(paths: &PairPaths, reason: &str) -> Result<Attempt> {
    let Commits::Paused(_paused) = pause_commits(&paths.dir) else {
        return Ok(Attempt::Retry(reason.into()));
    };
    match read_journal(paths)? {
        Found::Journal(_) | Found::Corrupt => Err(Error::InterruptedSave {
            path: paths.given.clone(),
            detail: format!(
                "a save of it was interrupted ({reason} and no save is running); its previous or new \
                 state is kept beside it"
            ),
        }),
        Found::None | Found::Foreign => Ok(Attempt::Retry(format!("{reason}; that save has finished"))),
    }
}
