//! The crash-consistent save of a checkpoint pair (`<path>` and, when there is external data,
//! `<path>.data`; ORT dictates both names, so two renames are unavoidable).
//!
//! 0. Every name the save will use is checked first (length, kind, who may replace it): a save
//!    that could not finish fails before it writes anything.
//! 1. The new files are written under fresh random temporary names beside their destinations
//!    (hashed while written) and synced.
//! 2. Under the directory's commit lock, interrupted saves are settled and leftovers removed.
//! 3. The journal (new files' names and BLAKE3 hash, old files' backup names) is written, synced,
//!    renamed into place, and the directory synced: from here on, a crash is completed by recovery.
//! 4. The old files get backup hard links (synced), so they stay reachable whatever happens next.
//! 5. The new data file, then the new checkpoint, are renamed over the old names (synced); an
//!    inline save over an external-data checkpoint then removes the stale `.data`.
//! 6. The journal is removed (synced): the save is committed. Then the backups are removed.
//!
//! The names change only while the journal exists, which is what lets readers detect a mix
//! (see `open.rs`). Every step reports to the test crash hook (`crash.rs`). Every operation is
//! relative to the directories' descriptors and never follows a link at a helper name
//! (`dir.rs`).

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::Path;

use crate::atomic::Temp;
use crate::crash::{crash_point, Step};
use crate::digest::{Digest, HashingWriter};
use crate::dir::{random_hex, try_flock, Dir, Entry};
use crate::journal::{write_journal, Journal, NewFile, OldFile};
use crate::lock::{lock_unsupported, DirLock};
use crate::pair::{place, PairPaths};
use crate::recover::recover_locked;
use crate::target::{check_companion, ensure_replaceable};
use crate::{Error, Result};

/// Writes the bytes of one file of the pair.
pub type WriteFile<'a> = &'a mut dyn FnMut(&mut dyn Write) -> io::Result<()>;

/// Saves the pair at `path`: `write_checkpoint` produces the checkpoint's bytes and
/// `write_external` (when the checkpoint has external data) the `.data` file's. `keep_going` is
/// asked while waiting for the directory lock (false stops with [`Error::Interrupted`]).
pub fn save_pair(
    path: &Path,
    write_checkpoint: WriteFile<'_>,
    write_external: Option<WriteFile<'_>>,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<()> {
    let paths = PairPaths::for_write(path)?;
    let checkpoint_before = check_names(&paths, write_external.is_some())?;

    let external = match write_external {
        Some(write) => {
            let like = match paths.data_entry()? {
                Some(e) if e.is_file() => Some(e),
                _ => checkpoint_before,
            };
            let steps = [Step::DataCreated, Step::DataWritten, Step::DataSynced];
            Some(write_new(&paths, &paths.data_dir, like.as_ref(), write, steps, &paths.external)?)
        }
        None => None,
    };
    let steps = [Step::CkptCreated, Step::CkptWritten, Step::CkptSynced];
    let checkpoint = write_new(
        &paths,
        &paths.ckpt_dir,
        checkpoint_before.as_ref(),
        write_checkpoint,
        steps,
        &paths.checkpoint,
    )?;

    let _lock = DirLock::exclusive(&paths.dir, keep_going)?;
    crash_point(Step::Locked);
    recover_locked(&paths, keep_going)?;
    crash_point(Step::CleanupDone);
    // The names may have been given to something else while we wrote.
    let checkpoint_now = check_names(&paths, external.is_some())?;
    let external_now = paths.data_entry()?.filter(Entry::is_file);

    let journal = Journal {
        checkpoint_name: paths.ckpt_name.clone(),
        new_checkpoint: checkpoint.journal_entry(),
        new_external: external.as_ref().map(NewTemp::journal_entry),
        old_checkpoint: checkpoint_now.map(|e| old_file(&paths, e, ".old")).transpose()?,
        old_external: external_now.map(|e| old_file(&paths, e, ".old-data")).transpose()?,
    };
    write_journal(&paths, &journal)?;
    // From here the journal owns the new files: on any failure, recovery completes or undoes.
    let mut temps = vec![checkpoint];
    temps.extend(external);
    for temp in &mut temps {
        temp.temp.keep();
    }
    if let Err(e) = commit(&paths, &journal) {
        // Closing the temporary files releases their locks, so recovery can remove them.
        drop(temps);
        let _ = recover_locked(&paths, keep_going);
        return Err(e);
    }
    Ok(())
}

/// Checks every final name before anything is written: the checkpoint name (absent or a regular
/// file the caller may replace) and, for an external save, the data name (length; absent, a
/// regular file or a symlink, which is replaced as a name and never followed). Returns what the
/// checkpoint name holds.
fn check_names(paths: &PairPaths, external: bool) -> Result<Option<Entry>> {
    paths.ckpt_dir.check_name(&paths.ckpt_name)?;
    let checkpoint = paths.checkpoint_entry()?;
    if let Some(entry) = checkpoint {
        if !entry.is_file() {
            return Err(Error::io(&paths.checkpoint, "save to", entry.not_regular()));
        }
        ensure_replaceable(&paths.ckpt_dir, &entry, &paths.checkpoint, "save to")?;
    }
    if external {
        paths.data_dir.check_name(&paths.data_name)?;
    }
    check_companion(&paths.data_dir, paths.data_entry()?.as_ref(), &paths.external, "save to")?;
    Ok(checkpoint)
}

/// A new file of the save, written and synced under its temporary name.
struct NewTemp {
    temp: Temp,
    digest: Digest,
}

impl NewTemp {
    fn journal_entry(&self) -> NewFile {
        NewFile { temp_name: self.temp.name().clone(), digest: self.digest, id: self.temp.id() }
    }
}

fn write_new(
    paths: &PairPaths,
    dir: &Dir,
    like: Option<&Entry>,
    write: WriteFile<'_>,
    steps: [Step; 3],
    dest: &Path,
) -> Result<NewTemp> {
    let mut temp = create_locked_temp(paths, dir, like)?;
    crash_point(steps[0]);
    let mut out = HashingWriter::new(temp.file_mut());
    write(&mut out).map_err(|e| Error::io(dest, "write", e))?;
    let digest = out.finish();
    crash_point(steps[1]);
    temp.sync()?;
    crash_point(steps[2]);
    Ok(NewTemp { temp, digest })
}

/// A fresh temporary file holding its own `flock` while the save lives, so a cleanup of crash
/// leftovers (`recover.rs`) can tell it from an orphan.
fn create_locked_temp(paths: &PairPaths, dir: &Dir, like: Option<&Entry>) -> Result<Temp> {
    for _ in 0..10 {
        if let Some(temp) = lock_new_temp(dir, Temp::create(dir, &paths.prefix, ".tmp", like)?)? {
            return Ok(temp);
        }
    }
    Err(Error::io(dir.path(), "create temporary file in", io::Error::other("removed repeatedly")))
}

/// Takes `temp`'s own lock; `None` when a concurrent cleanup got to the new file first and took
/// it for an orphan: it holds the file's lock and is about to remove it (CI once saw a save
/// whose lock attempt failed that way go on unlocked, and its file vanish before the rename),
/// or has removed it already. The caller starts again under a new name.
pub(crate) fn lock_new_temp(dir: &Dir, temp: Temp) -> Result<Option<Temp>> {
    match try_flock(temp.file(), libc::LOCK_EX) {
        Ok(true) => {}
        Ok(false) => return Ok(None),
        Err(e) if lock_unsupported(&e) => {}
        Err(e) => return Err(Error::io(temp.path(), "lock", e)),
    }
    // The cleanup may also have removed the file between its creation and our lock; then the
    // name no longer leads to it.
    let here = dir.stat(temp.name()).ok().flatten().is_some_and(|e| e.id == temp.id());
    Ok(here.then_some(temp))
}

fn old_file(paths: &PairPaths, entry: Entry, suffix: &str) -> Result<OldFile> {
    let random = random_hex(16).map_err(|e| Error::io(&paths.checkpoint, "save to", e))?;
    let backup_name = OsString::from(format!("{}{random}{suffix}", paths.prefix));
    Ok(OldFile { backup_name, len: entry.size, id: entry.id })
}

fn commit(paths: &PairPaths, journal: &Journal) -> Result<()> {
    if let Some(old) = &journal.old_checkpoint {
        backup(&paths.ckpt_dir, &paths.ckpt_name, &old.backup_name, Step::BackupCkptLinked)?;
    }
    if let Some(old) = &journal.old_external {
        backup(&paths.data_dir, &paths.data_name, &old.backup_name, Step::BackupDataLinked)?;
    }
    paths.sync_dirs()?;
    crash_point(Step::BackupsSynced);

    if let Some(new) = &journal.new_external {
        place(&paths.data_dir, &new.temp_name, &paths.data_name, new.id, Step::DataRenamed)?;
    }
    let new = &journal.new_checkpoint;
    place(&paths.ckpt_dir, &new.temp_name, &paths.ckpt_name, new.id, Step::CkptRenamed)?;
    paths.sync_dirs()?;
    crash_point(Step::RenamesSynced);
    if journal.new_external.is_none() && paths.data_entry()?.is_some() {
        // The data name holds the old pair's file or a symlink: neither belongs to an inline pair.
        paths.data_dir.remove_if_present(&paths.data_name)?;
        paths.data_dir.sync()?;
        crash_point(Step::StaleDataRemoved);
    }

    paths.ckpt_dir.remove_if_present(&paths.journal_name())?;
    paths.ckpt_dir.sync()?;
    crash_point(Step::JournalRemoved);
    if let Some(old) = &journal.old_checkpoint {
        paths.ckpt_dir.remove_if_present(&old.backup_name)?;
    }
    if let Some(old) = &journal.old_external {
        paths.data_dir.remove_if_present(&old.backup_name)?;
    }
    crash_point(Step::BackupsRemoved);
    Ok(())
}

/// Keeps the file `name` reachable as `backup`: a hard link, or (on file systems without hard
/// links) a rename, after which the name is briefly absent (readers wait on the journal).
fn backup(dir: &Dir, name: &OsString, backup: &OsString, step: Step) -> Result<()> {
    match dir.link(name, backup) {
        Ok(()) => {}
        Err(e) if no_hard_links(&e) => {
            dir.rename_to(name, dir, backup).map_err(|e| Error::io(dir.show(backup), "create backup", e))?;
        }
        Err(e) => return Err(Error::io(dir.show(backup), "create backup", e)),
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
