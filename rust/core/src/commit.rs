//! The crash-consistent save of a checkpoint pair (`<path>` and, when there is external data,
//! `<path>.data`; ORT dictates both names, so two renames are unavoidable).
//!
//! 1. The new files are written under temporary names beside their destinations and synced.
//! 2. Under the directory's commit lock, leftovers of interrupted saves are recovered/removed.
//! 3. The journal (old and new file identities) is written, synced, renamed into place, and the
//!    directory synced: from here on, a crash is completed by recovery.
//! 4. The old files get backup hard links (synced), so they stay reachable whatever happens next.
//! 5. The new data file, then the new checkpoint, are renamed over the old names (synced); an
//!    inline save over an external-data checkpoint then removes the stale `.data`.
//! 6. The journal is removed (synced): the save is committed. Then the backups are removed.
//!
//! The names change only while the journal exists, which is what lets readers detect a mix
//! (see `open.rs`). Every step reports to the test crash hook (`crash.rs`).

use std::fs;
use std::io;
use std::path::Path;

use crate::crash::crash_point;
use crate::files::{check_save_target, id_of_name, remove_if_present, rename, sync_dir, DirLock, TempFile};
use crate::journal::{write_journal, Journal, NewFile, PairPaths};
use crate::recover::recover_locked;
use crate::{Error, Result};

/// Writes the bytes of one file of the pair into its temporary file.
pub type WriteFile<'a> = &'a mut dyn FnMut(&mut TempFile) -> Result<()>;

/// Saves the pair at `path`: `write_checkpoint` produces the checkpoint's bytes and
/// `write_external` (when the checkpoint has external data) the `.data` file's.
pub fn save_pair(
    path: &Path,
    write_checkpoint: WriteFile<'_>,
    write_external: Option<WriteFile<'_>>,
) -> Result<()> {
    let paths = PairPaths::new(path)?;
    check_save_target(&paths.checkpoint)?;
    check_save_target(&paths.external)?;

    let mut external = match write_external {
        Some(write) => {
            let like = if paths.external.exists() { &paths.external } else { &paths.checkpoint };
            let mut temp = TempFile::create(&paths.ext_dir, &paths.prefix, like)?;
            crash_point("data_created");
            write(&mut temp)?;
            crash_point("data_written");
            temp.sync()?;
            crash_point("data_synced");
            Some(temp)
        }
        None => None,
    };
    let mut checkpoint = TempFile::create(&paths.dir, &paths.prefix, &paths.checkpoint)?;
    crash_point("ckpt_created");
    write_checkpoint(&mut checkpoint)?;
    crash_point("ckpt_written");
    checkpoint.sync()?;
    crash_point("ckpt_synced");

    let _lock = DirLock::exclusive(&paths.dir)?;
    crash_point("locked");
    recover_locked(&paths)?;
    crash_point("cleanup_done");
    // The targets may have been replaced by something else while we wrote.
    check_save_target(&paths.checkpoint)?;
    check_save_target(&paths.external)?;

    let journal = Journal {
        checkpoint_name: paths.checkpoint.file_name().unwrap_or_default().to_owned(),
        new_checkpoint: new_file(&checkpoint),
        new_external: external.as_ref().map(new_file),
        old_checkpoint: id_of_name(&paths.checkpoint)?,
        old_external: id_of_name(&paths.external)?,
    };
    write_journal(&paths, &journal)?;
    // From here the journal owns the new files: on any failure, recovery completes or undoes.
    checkpoint.disarm();
    if let Some(temp) = external.as_mut() {
        temp.disarm();
    }
    if let Err(e) = commit(&paths, &journal) {
        let _ = recover_locked(&paths);
        return Err(e);
    }
    Ok(())
}

fn new_file(temp: &TempFile) -> NewFile {
    NewFile { temp_name: temp.path().file_name().unwrap_or_default().to_owned(), id: temp.id() }
}

fn commit(paths: &PairPaths, journal: &Journal) -> Result<()> {
    if journal.old_checkpoint.is_some() {
        backup(&paths.checkpoint, &paths.backup_checkpoint(), "backup_ckpt_linked")?;
    }
    if journal.old_external.is_some() {
        backup(&paths.external, &paths.backup_external(), "backup_data_linked")?;
    }
    sync_dirs(paths)?;
    crash_point("backups_synced");

    if let Some(temp) = journal.new_external_path(paths) {
        rename(&temp, &paths.external, "data_renamed")?;
    }
    rename(&journal.new_checkpoint_path(paths), &paths.checkpoint, "ckpt_renamed")?;
    sync_dirs(paths)?;
    crash_point("renames_synced");
    if journal.new_external.is_none() && journal.old_external.is_some() {
        remove_if_present(&paths.external)?;
        sync_dir(&paths.ext_dir)?;
        crash_point("stale_data_removed");
    }

    remove_if_present(&paths.journal())?;
    sync_dir(&paths.dir)?;
    crash_point("journal_removed");
    remove_if_present(&paths.backup_checkpoint())?;
    remove_if_present(&paths.backup_external())?;
    crash_point("backups_removed");
    Ok(())
}

/// Keeps the file `name` reachable as `backup`: a hard link, or (on file systems without hard
/// links) a rename, after which the name is briefly absent (readers wait on the journal).
fn backup(name: &Path, backup: &Path, step: &str) -> Result<()> {
    match fs::hard_link(name, backup) {
        Ok(()) => {}
        Err(e) if no_hard_links(&e) => {
            fs::rename(name, backup).map_err(|e| Error::io(backup, "create backup", e))?;
        }
        Err(e) => return Err(Error::io(backup, "create backup", e)),
    }
    crash_point(step);
    Ok(())
}

fn no_hard_links(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM) | Some(libc::EOPNOTSUPP) | Some(libc::EMLINK) | Some(libc::EXDEV)
    )
}

fn sync_dirs(paths: &PairPaths) -> Result<()> {
    for dir in paths.dirs() {
        sync_dir(dir)?;
    }
    Ok(())
}
