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

use crate::files::{commit_in_progress, id_of_path, is_absent, open_regular, FileId};
use crate::journal::{read_journal, Found, PairPaths};
use crate::mapped::MappedFile;
use crate::save::external_data_location;
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
/// [`Error::Interrupted`].
pub fn open_checkpoint(
    path: &Path,
    mode: OpenMode,
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
        match try_open(path, mode, keep_going)? {
            Attempt::Done(opened) => return Ok(*opened),
            Attempt::Retry(reason) => last_reason = reason,
        }
    }
    Err(Error::KeptChanging { path: path.to_path_buf(), detail: last_reason })
}

enum Attempt {
    Done(Box<OpenedCheckpoint>),
    Retry(String),
}

fn not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if is_absent(source))
}

fn try_open(given: &Path, mode: OpenMode, keep_going: &mut dyn FnMut() -> bool) -> Result<Attempt> {
    let paths = PairPaths::new(given)?;
    let external_path = external_data_location(given);
    // 1. open both files (their identities are taken from the open files)
    let checkpoint = match open_regular(given) {
        Ok(f) => Some(f),
        // A save without hard links moves the old file aside for a moment: ask the journal.
        Err(e) if not_found(&e) => match read_journal(&paths)? {
            Found::Journal(_) | Found::Corrupt => None,
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
    let id = |f: &std::fs::File, p: &Path| -> Result<FileId> {
        Ok(FileId::of(&f.metadata().map_err(|e| Error::io(p, "read metadata of", e))?))
    };
    let checkpoint_id = id(&checkpoint, given)?;
    let external_id = external.as_ref().map(|f| id(f, &external_path)).transpose()?;
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
fn interrupted_or_retry(paths: &PairPaths, reason: &str) -> Result<Attempt> {
    match commit_in_progress(&paths.dir) {
        Some(false) => Err(Error::InterruptedSave {
            path: paths.given.clone(),
            detail: format!(
                "a save of it was interrupted ({reason} and no save is running); its previous or new \
                 state is kept beside it"
            ),
        }),
        _ => Ok(Attempt::Retry(reason.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::save_pair;
    use crate::journal::{write_journal, Journal, NewFile};
    use crate::recover::{helper_files, recover, Recovery};

    fn save(path: &Path, ckpt: &[u8], data: Option<&[u8]>) {
        let mut write_c = |f: &mut crate::files::TempFile| f.write_all(ckpt);
        match data {
            Some(d) => {
                let mut write_d = |f: &mut crate::files::TempFile| f.write_all(d);
                save_pair(path, &mut write_c, Some(&mut write_d)).unwrap()
            }
            None => save_pair(path, &mut write_c, None).unwrap(),
        }
    }

    fn contents(path: &Path, mode: OpenMode) -> (Vec<u8>, Option<Vec<u8>>) {
        let o = open_checkpoint(path, mode, &mut || true).unwrap();
        (o.checkpoint.bytes().to_vec(), o.external.map(|e| e.bytes().to_vec()))
    }

    #[test]
    fn saves_replace_pairs_and_remove_stale_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ckpt");
        save(&path, b"one", Some(b"data1"));
        assert_eq!(contents(&path, OpenMode::Map), (b"one".to_vec(), Some(b"data1".to_vec())));
        save(&path, b"two", None);
        assert_eq!(contents(&path, OpenMode::Read), (b"two".to_vec(), None));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "leftover files");
        assert!(helper_files(&path).unwrap().is_empty());
        assert_eq!(recover(&path).unwrap(), Recovery::Clean);
    }

    /// Sets up the state a save leaves when killed right after its journal became durable (new
    /// files complete under temporary names, old pair in place).
    fn interrupted(path: &Path) -> PairPaths {
        save(path, b"old", Some(b"old-data"));
        let paths = PairPaths::new(path).unwrap();
        let mut temps = Vec::new();
        for (dir, bytes) in [(&paths.dir, &b"new"[..]), (&paths.ext_dir, &b"new-data"[..])] {
            let mut t = crate::files::TempFile::create(dir, &paths.prefix, path).unwrap();
            t.write_all(bytes).unwrap();
            t.disarm();
            temps.push(NewFile { temp_name: t.path().file_name().unwrap().into(), id: t.id() });
        }
        let journal = Journal {
            checkpoint_name: "a.ckpt".into(),
            new_external: Some(temps.pop().unwrap()),
            new_checkpoint: temps.pop().unwrap(),
            old_checkpoint: crate::files::id_of_name(&paths.checkpoint).unwrap(),
            old_external: crate::files::id_of_name(&paths.external).unwrap(),
        };
        write_journal(&paths, &journal).unwrap();
        paths
    }

    #[test]
    fn dead_journal_loads_complete_pairs_refuses_mixes_and_recovers_forward() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ckpt");
        let paths = interrupted(&path);
        // Old pair in place, journal of a dead save: the old pair is a complete pair it knows.
        assert_eq!(contents(&path, OpenMode::Map).0, b"old");
        // Mixed: new data renamed, old checkpoint still in place.
        std::fs::hard_link(&paths.external, paths.backup_external()).unwrap();
        let j = match read_journal(&paths).unwrap() {
            Found::Journal(j) => j,
            _ => panic!("no journal"),
        };
        std::fs::rename(j.new_external_path(&paths).unwrap(), &paths.external).unwrap();
        let err = open_checkpoint(&path, OpenMode::Map, &mut || true).err().unwrap();
        assert!(matches!(err, Error::InterruptedSave { .. }), "{err}");
        assert_eq!(recover(&path).unwrap(), Recovery::CompletedNew);
        assert_eq!(contents(&path, OpenMode::Map), (b"new".to_vec(), Some(b"new-data".to_vec())));
        assert!(helper_files(&path).unwrap().is_empty());
    }

    #[test]
    fn recovery_restores_the_old_pair_when_new_files_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ckpt");
        let paths = interrupted(&path);
        let j = match read_journal(&paths).unwrap() {
            Found::Journal(j) => j,
            _ => panic!("no journal"),
        };
        std::fs::hard_link(&paths.checkpoint, paths.backup_checkpoint()).unwrap();
        std::fs::hard_link(&paths.external, paths.backup_external()).unwrap();
        std::fs::rename(j.new_external_path(&paths).unwrap(), &paths.external).unwrap();
        std::fs::remove_file(j.new_checkpoint_path(&paths)).unwrap(); // the new checkpoint is lost
        assert_eq!(recover(&path).unwrap(), Recovery::RestoredOld);
        assert_eq!(contents(&path, OpenMode::Read), (b"old".to_vec(), Some(b"old-data".to_vec())));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn next_save_cleans_up_after_an_interrupted_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ckpt");
        interrupted(&path);
        save(&path, b"third", None);
        assert_eq!(contents(&path, OpenMode::Map), (b"third".to_vec(), None));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn special_targets_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let mut w = |f: &mut crate::files::TempFile| f.write_all(b"x");
        assert!(save_pair(&fifo, &mut w, None).is_err());
        assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        assert!(open_checkpoint(&fifo, OpenMode::Map, &mut || true).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    use std::os::unix::fs::FileTypeExt;
}
