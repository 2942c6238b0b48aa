//! Finishing or undoing an interrupted save, and removing the leftovers of dead saves.
//!
//! A journal holds everything needed: the new files' temporary names, lengths and BLAKE3 hash, and the
//! old files' backup names (hard links made before the renames). Recovery completes the save when
//! every new file is found with exactly the bytes the journal records — at its final name, or at
//! its temporary name, hashed again before it is renamed — and restores the old pair from the
//! backups otherwise. Nothing is decided by device or inode numbers alone (they are hints; a copy
//! or a restore changes them), so a directory copied with `cp -a` while holding an interrupted save
//! recovers like the original. Each step is idempotent and the journal is removed last, so a
//! crash during recovery is recovered by running it again.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::crash::{crash_point, Step};
use crate::digest::{digest_file, Digest};
use crate::dir::{try_flock, Dir, Entry, FileId};
use crate::journal::{inspect_journal, Found, Inspected, Journal, NewFile, OldFile};
use crate::lock::DirLock;
use crate::pair::{place, PairPaths};
use crate::{Error, Result};

/// What [`recover`] found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// No interrupted save and no leftovers.
    Clean,
    /// No interrupted save; temporary or backup files of dead saves were removed.
    RemovedLeftovers,
    /// An interrupted save was completed: the checkpoint is the new state.
    CompletedNew,
    /// An interrupted save was undone: the checkpoint is the state from before it (or absent,
    /// when there was none).
    RestoredOld,
}

impl Recovery {
    /// The outcome's name as the Python API reports it ("clean", "leftovers", "new", "old").
    pub fn as_str(self) -> &'static str {
        match self {
            Recovery::Clean => "clean",
            Recovery::RemovedLeftovers => "leftovers",
            Recovery::CompletedNew => "new",
            Recovery::RestoredOld => "old",
        }
    }
}

/// Restores one complete state of the checkpoint `path` (and its `.data`) after interrupted saves
/// and removes every temporary, backup and journal file they left. Waits (bounded) for a save in
/// progress.
pub fn recover(path: &Path) -> Result<Recovery> {
    recover_interruptible(path, &mut || true)
}

/// [`recover`], asking `keep_going` while it waits for the directory lock and while it hashes.
pub fn recover_interruptible(path: &Path, keep_going: &mut dyn FnMut() -> bool) -> Result<Recovery> {
    let paths = PairPaths::for_write(path)?;
    let _lock = DirLock::exclusive(&paths.dir, keep_going)?;
    recover_locked(&paths, keep_going)
}

fn unrecoverable(paths: &PairPaths, detail: String) -> Error {
    Error::Unrecoverable { path: paths.given.clone(), detail }
}

/// [`recover`] for a caller that holds the directory lock already (a save, before it commits).
pub(crate) fn recover_locked(paths: &PairPaths, keep_going: &mut dyn FnMut() -> bool) -> Result<Recovery> {
    let journal = paths.journal();
    let outcome = match inspect_journal(paths)? {
        Inspected::Found(Found::None) => None,
        Inspected::Untrusted { what } => {
            return Err(unrecoverable(
                paths,
                format!(
                    "its save journal name {} holds {what}, which ortckpt does not act on (in a sticky \
                     directory only your own journal is trusted, and never anything but a regular file); \
                     nothing was changed: have it removed (by its owner or root) and try again",
                    journal.display()
                ),
            ))
        }
        // Another file name with the same name hash has an interrupted save here: its journal is
        // not ours to settle, and a save of ours must not overwrite it.
        Inspected::Found(Found::Foreign) => {
            return Err(unrecoverable(
                paths,
                format!(
                    "the save journal {} belongs to an interrupted save of another checkpoint in this \
                     directory (its name has the same hash); recover that checkpoint first",
                    journal.display()
                ),
            ))
        }
        Inspected::Found(Found::Corrupt) => {
            return Err(unrecoverable(
                paths,
                format!(
                    "its save journal {} is unreadable (it was not written by this version of ortckpt, \
                     or the disk is damaged); check which of the files beside it hold the checkpoint \
                     you want, then remove the journal",
                    journal.display()
                ),
            ))
        }
        Inspected::Found(Found::Journal(j)) => Some(finish(paths, &j, keep_going)?),
    };
    let removed = remove_leftovers(paths)?;
    if outcome.is_some() || removed {
        paths.sync_dirs()?;
    }
    if outcome.is_some() {
        paths.ckpt_dir.remove_if_present(&paths.journal_name())?;
        paths.ckpt_dir.sync()?;
        crash_point(Step::RecoverJournalRemoved);
    }
    Ok(match (outcome, removed) {
        (Some(r), _) => r,
        (None, true) => Recovery::RemovedLeftovers,
        (None, false) => Recovery::Clean,
    })
}

/// Where a new file of the journal is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found2 {
    /// Already at its final name (same identity, or the same bytes).
    InPlace,
    /// At its temporary name, with exactly the recorded bytes (this file).
    AtTemp(FileId),
    /// Neither: the save cannot be completed.
    Missing,
}

/// One name of the pair during recovery: its directory, name and path for messages.
struct Slot<'a> {
    dir: &'a Dir,
    name: &'a OsString,
}

impl Slot<'_> {
    fn entry(&self, name: &OsString) -> Result<Option<Entry>> {
        self.dir.stat(name).map_err(|e| Error::io(self.dir.show(name), "read metadata of", e))
    }

    /// The file at `name` when it has exactly the bytes `digest` describes (a regular file, not
    /// followed, never blocking; hashed in full).
    fn holds(
        &self,
        name: &OsString,
        digest: &Digest,
        keep_going: &mut dyn FnMut() -> bool,
    ) -> Result<Option<FileId>> {
        match self.entry(name)? {
            Some(e) if e.is_file() && e.size == digest.len => {}
            _ => return Ok(None),
        }
        let (file, opened) = match self.dir.open_regular(name) {
            Ok(f) => f,
            Err(_) => return Ok(None),
        };
        let found = digest_file(&file, keep_going).map_err(|e| match e.kind() {
            std::io::ErrorKind::Interrupted => Error::Interrupted { path: self.dir.show(name) },
            _ => Error::io(self.dir.show(name), "read", e),
        })?;
        Ok((found == *digest).then_some(opened.id))
    }

    /// Whether the final name holds the new file: by its bytes. Not by identity: a directory
    /// copied after the save's temporary file was removed can give the old file at the final
    /// name the inode number the journal recorded for the new one (a file system reuses freed
    /// inodes), and completing the save on that would leave a mixed pair.
    fn holds_new(&self, new: &NewFile, keep_going: &mut dyn FnMut() -> bool) -> Result<bool> {
        match self.entry(self.name)? {
            Some(e) if e.is_file() => Ok(self.holds(self.name, &new.digest, keep_going)?.is_some()),
            _ => Ok(false),
        }
    }

    fn locate(
        &self,
        paths: &PairPaths,
        new: &NewFile,
        keep_going: &mut dyn FnMut() -> bool,
    ) -> Result<Found2> {
        if self.holds_new(new, keep_going)? {
            return Ok(Found2::InPlace);
        }
        let temp = &new.temp_name;
        let trusted = self.entry(temp)?.is_some_and(|e| e.is_file() && self.dir.trusts(&e));
        if paths.is_helper(temp, ".tmp") && trusted {
            if let Some(id) = self.holds(temp, &new.digest, keep_going)? {
                return Ok(Found2::AtTemp(id));
            }
        }
        Ok(Found2::Missing)
    }
}

/// Makes the names lead to one complete pair of `journal`: the new one when all its files are
/// found with their recorded bytes, else the old one.
fn finish(paths: &PairPaths, journal: &Journal, keep_going: &mut dyn FnMut() -> bool) -> Result<Recovery> {
    let ckpt = Slot { dir: &paths.ckpt_dir, name: &paths.ckpt_name };
    let data = Slot { dir: &paths.data_dir, name: &paths.data_name };
    let new_ckpt = ckpt.locate(paths, &journal.new_checkpoint, keep_going)?;
    let new_data = match &journal.new_external {
        Some(new) => data.locate(paths, new, keep_going)?,
        None => Found2::InPlace,
    };

    if new_ckpt != Found2::Missing && new_data != Found2::Missing {
        // Complete the save, in the save's own order: data first, then the checkpoint. Each file
        // renamed was hashed just above.
        if let (Some(new), Found2::AtTemp(id)) = (&journal.new_external, new_data) {
            place(data.dir, &new.temp_name, data.name, id, Step::RecoverDataPlaced)?;
        }
        if let Found2::AtTemp(id) = new_ckpt {
            place(ckpt.dir, &journal.new_checkpoint.temp_name, ckpt.name, id, Step::RecoverCkptPlaced)?;
        }
        // An inline save over an external-data checkpoint: whatever `.data` holds is stale now.
        if journal.new_external.is_none() && journal.old_external.is_some() {
            if let Some(e) = data.entry(data.name)? {
                if (e.is_file() || e.is_symlink()) && data.dir.trusts(&e) {
                    data.dir.remove_if_present(data.name)?;
                }
            }
        }
        return Ok(Recovery::CompletedNew);
    }

    // Undo: put the old files back (each is still reachable under its backup name or its own).
    let new_data_file = journal.new_external.as_ref();
    restore(paths, &data, journal.old_external.as_ref(), new_data_file, Step::RecoverDataPlaced, keep_going)?;
    let new_ckpt_file = Some(&journal.new_checkpoint);
    restore(
        paths,
        &ckpt,
        journal.old_checkpoint.as_ref(),
        new_ckpt_file,
        Step::RecoverCkptPlaced,
        keep_going,
    )?;
    Ok(Recovery::RestoredOld)
}

fn restore(
    paths: &PairPaths,
    slot: &Slot<'_>,
    old: Option<&OldFile>,
    new: Option<&NewFile>,
    step: Step,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<()> {
    let holds_new = match new {
        Some(new) => slot.holds_new(new, keep_going)?,
        None => false,
    };
    let current = slot.entry(slot.name)?;
    // A link at the name is never a checkpoint: one swapped in for a new file while the save ran.
    let lost = holds_new || current.is_none_or(|e| e.is_symlink());
    match old {
        // The name lost the old file (it holds the new one, a link, or nothing): bring the backup
        // back.
        Some(old) if lost => {
            let backup = &old.backup_name;
            let usable = slot.entry(backup)?.filter(|e| {
                e.is_file()
                    && slot.dir.trusts(e)
                    && e.size == old.len
                    && paths.is_helper(backup, suffix(backup))
            });
            let Some(usable) = usable else {
                return Err(unrecoverable(
                    paths,
                    format!(
                        "the interrupted save can be neither completed (its new files are gone or changed) \
                         nor undone (the backup {} is gone or changed); the files must be repaired by hand",
                        slot.dir.show(backup).display()
                    ),
                ));
            };
            place(slot.dir, backup, slot.name, usable.id, step)
        }
        Some(_) => Ok(()),
        // There was no such file before the save: remove the new one (or a link) if it got this
        // name.
        None if holds_new || current.is_some_and(|e| e.is_symlink() && slot.dir.may_replace(&e)) => {
            slot.dir.remove_if_present(slot.name)?;
            crash_point(step);
            Ok(())
        }
        None => Ok(()),
    }
}

/// The suffix of a backup name (`.old-data` or `.old`).
fn suffix(name: &OsString) -> &'static str {
    if name.as_bytes().ends_with(b".old-data") {
        ".old-data"
    } else {
        ".old"
    }
}

/// Removes this checkpoint's helper files that no live save owns: backups and journal temps
/// (they matter only while a save holds the directory lock, which we hold now, or to the journal
/// just finished), temporary files whose own lock is free, and symlinks at helper names. Files
/// the caller may not trust (another user's, in a sticky directory) and special files are left
/// alone: they are not ours, and with random names they are in no save's way. Returns whether any was removed.
fn remove_leftovers(paths: &PairPaths) -> Result<bool> {
    let mut removed = false;
    for dir in paths.dirs() {
        for name in dir.names_with_prefix(paths.prefix.as_bytes())? {
            let Some(entry) =
                dir.stat(&name).map_err(|e| Error::io(dir.show(&name), "read metadata of", e))?
            else {
                continue;
            };
            if !dir.trusts(&entry) {
                continue;
            }
            if entry.is_symlink() {
                // No save of ours makes links: one at a helper name was planted; removing the
                // name never touches its target.
                dir.remove_if_present(&name)?;
                removed = true;
                continue;
            }
            if !entry.is_file() {
                continue;
            }
            if paths.is_helper(&name, ".tmp") {
                // Held locked by its writer for as long as the save lives.
                if let Ok((file, opened)) = dir.open_regular(&name) {
                    if opened.id == entry.id && try_flock(&file, libc::LOCK_EX).unwrap_or(false) {
                        dir.remove_if_present(&name)?;
                        removed = true;
                    }
                }
            } else if [".old", ".old-data", ".jtmp"].iter().any(|s| paths.is_helper(&name, s)) {
                dir.remove_if_present(&name)?;
                removed = true;
            }
        }
    }
    Ok(removed)
}

/// Paths of this checkpoint's helper files (tests and diagnostics).
pub fn helper_files(path: &Path) -> Result<Vec<PathBuf>> {
    let paths = PairPaths::new(path)?;
    let mut out = Vec::new();
    for dir in paths.dirs() {
        out.extend(dir.names_with_prefix(paths.prefix.as_bytes())?.into_iter().map(|n| dir.show(&n)));
    }
    Ok(out)
}
