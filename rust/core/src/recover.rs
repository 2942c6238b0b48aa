//! Finishing or undoing an interrupted save, and removing the leftovers of dead saves.
//!
//! A journal holds everything needed: the identities of the old pair (kept alive by the backup
//! hard links) and of the new pair (complete and synced before the journal was written, still
//! under their temporary names or already renamed). Recovery completes the save when every new
//! file is still there (the usual case: a crash anywhere after the journal became durable), and
//! restores the old pair from the backups otherwise. Each step is idempotent and the journal is
//! removed last, so a crash during recovery is recovered by running it again.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::crash::crash_point;
use crate::files::{id_of_name, remove_if_present, rename, sync_dir, try_lock_orphan, DirLock, FileId};
use crate::journal::{read_journal, Found, Journal, PairPaths};
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
/// and removes every temporary, backup and journal file they left. Waits for a save in progress.
pub fn recover(path: &Path) -> Result<Recovery> {
    let paths = PairPaths::new(path)?;
    let _lock = DirLock::exclusive(&paths.dir)?;
    recover_locked(&paths)
}

/// [`recover`] for a caller that holds the directory lock already (a save, before it commits).
pub(crate) fn recover_locked(paths: &PairPaths) -> Result<Recovery> {
    let outcome = match read_journal(paths)? {
        Found::None => None,
        // Another file name with the same 64-bit name hash has an interrupted save here: its
        // journal is not ours to settle, and a save of ours must not overwrite it.
        Found::Foreign => {
            return Err(Error::Unrecoverable {
                path: paths.given.clone(),
                detail: format!(
                    "the save journal {} belongs to an interrupted save of another checkpoint in this \
                     directory (its name has the same hash); recover that checkpoint first",
                    paths.journal().display()
                ),
            })
        }
        Found::Corrupt => {
            return Err(Error::Unrecoverable {
                path: paths.given.clone(),
                detail: format!(
                    "its save journal {} is unreadable (it was not written by ortckpt, or the disk is \
                     damaged); check which of the files beside it hold the checkpoint you want, then \
                     remove the journal",
                    paths.journal().display()
                ),
            })
        }
        Found::Journal(journal) => Some(finish(paths, &journal)?),
    };
    let removed = remove_leftovers(paths)?;
    if outcome.is_some() || removed {
        for dir in paths.dirs() {
            sync_dir(dir)?;
        }
    }
    if outcome.is_some() {
        remove_if_present(&paths.journal())?;
        sync_dir(&paths.dir)?;
        crash_point("recover_journal_removed");
    }
    Ok(match (outcome, removed) {
        (Some(r), _) => r,
        (None, true) => Recovery::RemovedLeftovers,
        (None, false) => Recovery::Clean,
    })
}

/// Makes the names lead to one complete pair of `journal`: the new one when all its files still
/// exist, else the old one.
fn finish(paths: &PairPaths, journal: &Journal) -> Result<Recovery> {
    let current_checkpoint = id_of_name(&paths.checkpoint)?;
    let current_external = id_of_name(&paths.external)?;
    let new_checkpoint_temp = journal.new_checkpoint_path(paths);
    let new_external_temp = journal.new_external_path(paths);

    let checkpoint_ready = current_checkpoint == Some(journal.new_checkpoint.id)
        || id_of_name(&new_checkpoint_temp)? == Some(journal.new_checkpoint.id);
    let external_ready = match (&journal.new_external, &new_external_temp) {
        (Some(new), Some(temp)) => current_external == Some(new.id) || id_of_name(temp)? == Some(new.id),
        _ => true,
    };

    if checkpoint_ready && external_ready {
        // Complete the save, in the save's own order: data first, then the checkpoint.
        if let (Some(new), Some(temp)) = (&journal.new_external, &new_external_temp) {
            if current_external != Some(new.id) {
                rename(temp, &paths.external, "recover_data_placed")?;
            }
        }
        if current_checkpoint != Some(journal.new_checkpoint.id) {
            rename(&new_checkpoint_temp, &paths.checkpoint, "recover_ckpt_placed")?;
        }
        // An inline save over an external-data checkpoint: the old data file is stale now.
        if journal.new_external.is_none()
            && current_external.is_some()
            && current_external == journal.old_external
        {
            remove_if_present(&paths.external)?;
        }
        return Ok(Recovery::CompletedNew);
    }

    // Undo: put the old files back (each is still reachable under its backup name or its own).
    restore(
        &paths.external,
        &paths.backup_external(),
        current_external,
        journal.old_external,
        journal.new_external.as_ref().map(|f| f.id),
        "recover_data_placed",
    )?;
    restore(
        &paths.checkpoint,
        &paths.backup_checkpoint(),
        current_checkpoint,
        journal.old_checkpoint,
        Some(journal.new_checkpoint.id),
        "recover_ckpt_placed",
    )?;
    Ok(Recovery::RestoredOld)
}

fn restore(
    name: &Path,
    backup: &Path,
    current: Option<FileId>,
    old: Option<FileId>,
    new: Option<FileId>,
    step: &str,
) -> Result<()> {
    match old {
        Some(old) if current != Some(old) => {
            if id_of_name(backup)? != Some(old) {
                return Err(Error::Unrecoverable {
                    path: name.to_path_buf(),
                    detail: format!(
                        "the interrupted save can be neither completed (its new files are gone) nor \
                         undone (the backup {} is gone); the files must be repaired by hand",
                        backup.display()
                    ),
                });
            }
            rename(backup, name, step)
        }
        Some(_) => Ok(()),
        // There was no such file before the save: remove the new one if it got this name.
        None if current.is_some() && current == new => {
            remove_if_present(name)?;
            crash_point(step);
            Ok(())
        }
        None => Ok(()),
    }
}

/// Removes this checkpoint's helper files that no live save owns: backups and journal temps
/// (they matter only while a save holds the directory lock, which we hold now, or to the journal
/// just finished) and temporary files whose own lock is free. Returns whether any was removed.
fn remove_leftovers(paths: &PairPaths) -> Result<bool> {
    let mut removed = false;
    for dir in paths.dirs() {
        for name in helper_names(dir, &paths.prefix)? {
            let path = dir.join(&name);
            let bytes = name.as_bytes();
            if bytes.ends_with(b".journal") {
                continue; // removed last by the caller, once everything else is done
            }
            if bytes.ends_with(b".tmp") {
                // Held locked by its writer for as long as the save lives.
                if let Some(_held) = try_lock_orphan(&path) {
                    remove_if_present(&path)?;
                    removed = true;
                }
            } else if bytes.ends_with(b".old") || bytes.ends_with(b".old-data") || bytes.ends_with(b".jtmp") {
                remove_if_present(&path)?;
                removed = true;
            }
        }
    }
    Ok(removed)
}

fn helper_names(dir: &Path, prefix: &str) -> Result<Vec<std::ffi::OsString>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return Err(Error::io(dir, "list directory", e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, "list directory", e))?;
        let name = entry.file_name();
        if OsStr::as_bytes(&name).starts_with(prefix.as_bytes()) {
            names.push(name);
        }
    }
    Ok(names)
}

/// Paths of this checkpoint's helper files (tests and diagnostics).
pub fn helper_files(path: &Path) -> Result<Vec<PathBuf>> {
    let paths = PairPaths::new(path)?;
    let mut out = Vec::new();
    for dir in paths.dirs() {
        out.extend(helper_names(dir, &paths.prefix)?.into_iter().map(|n| dir.join(n)));
    }
    Ok(out)
}
