//! Atomic replacement of one output file, for every writer that is not a checkpoint save (npz,
//! safetensors, ONNX exports, third-party libraries): the new bytes go to a fresh temporary file
//! beside the destination and replace it in one rename, so readers see the old file or the whole
//! new one, never a part.
//!
//! The permission rule, shared with saves (`commit.rs`): a new file gets `0666 & !umask` (what
//! `open(2)` gives any new file); a replaced file's permission bits are kept.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::dir::{fstat, set_permissions, Dir, Entry, FileId};
use crate::target::{check_companion, ensure_replaceable, resolve, Target};
use crate::{Error, Result};

/// Temporary names of atomic outputs: `.ortckpt-out-<32 random hex digits>.tmp` (files) and
/// `.ortckpt-out-<32 random hex digits>.d` (staging directories of by-path writers).
const TEMP_PREFIX: &str = ".ortckpt-out-";

/// A temporary file in `dir`, created with `O_EXCL` under an unpredictable name; removed on drop
/// unless [`Temp::keep`] was called (and only while its name still leads to this file).
#[derive(Debug)]
pub struct Temp {
    dir: Dir,
    name: OsString,
    file: File,
    id: FileId,
    keep: bool,
}

impl Temp {
    /// Creates `<prefix><random><suffix>` in `dir`, with the permissions of `like` when given
    /// (the file it will replace) and `0666 & !umask` otherwise.
    pub fn create(dir: &Dir, prefix: &str, suffix: &str, like: Option<&Entry>) -> Result<Temp> {
        let (name, file) = dir
            .create_unique(prefix, suffix)
            .map_err(|e| Error::io(dir.show(prefix.as_ref()), "create temporary file in", e))?;
        let id = fstat(&file).map_err(|e| Error::io(dir.show(&name), "read metadata of", e))?.id;
        let temp = Temp { dir: dir.clone(), name, file, id, keep: false };
        if let Some(like) = like {
            set_permissions(&temp.file, like.permissions())
                .map_err(|e| Error::io(temp.path(), "set permissions of", e))?;
        }
        Ok(temp)
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The open file, for writing.
    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }

    /// The temporary name.
    pub fn name(&self) -> &OsString {
        &self.name
    }

    /// The temporary file's path (messages).
    pub fn path(&self) -> PathBuf {
        self.dir.show(&self.name)
    }

    /// The file's identity.
    pub fn id(&self) -> FileId {
        self.id
    }

    /// Flushes the file's data and metadata to disk.
    pub fn sync(&self) -> Result<()> {
        self.file.sync_all().map_err(|e| Error::io(self.path(), "sync", e))
    }

    /// The file was renamed into place (or handed to a journal): do not remove it on drop.
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.keep && self.dir.stat(&self.name).ok().flatten().is_some_and(|e| e.id == self.id) {
            let _ = self.dir.unlink(&self.name);
        }
    }
}

/// The destination of an output, checked before anything is written: its name fits the file
/// system, and (in a sticky directory) the caller may replace what it holds.
fn checked_target(path: &Path) -> Result<Target> {
    let target = resolve(path, "write to")?;
    target.dir.check_name(&target.name)?;
    if let Some(entry) = &target.entry {
        ensure_replaceable(&target.dir, entry, &target.path(), "write to")?;
    }
    Ok(target)
}

/// One output file being written: [`AtomicOutput::commit`] replaces the destination with it;
/// dropping it uncommitted removes it and leaves the destination untouched.
#[derive(Debug)]
pub struct AtomicOutput {
    target: Target,
    temp: Temp,
}

impl AtomicOutput {
    /// Starts an output to `path`. Refuses a destination that is a directory, FIFO, socket or
    /// device, a name too long for the file system, and symlinks others planted (see
    /// `target.rs`); the caller's own symlink is followed to the file it names.
    pub fn create(path: &Path) -> Result<AtomicOutput> {
        let target = checked_target(path)?;
        let temp = Temp::create(&target.dir, TEMP_PREFIX, ".tmp", target.entry.as_ref())?;
        Ok(AtomicOutput { target, temp })
    }

    /// The temporary file to write the output into.
    pub fn file(&self) -> &File {
        self.temp.file()
    }

    /// The temporary file's path (for messages).
    pub fn temp_path(&self) -> PathBuf {
        self.temp.path()
    }

    /// The destination's path (after following the caller's own symlinks).
    pub fn path(&self) -> PathBuf {
        self.target.path()
    }

    /// Syncs the file, renames it over the destination and syncs the directory. The destination
    /// is checked again first: something other than a regular file put there meanwhile is refused.
    pub fn commit(mut self) -> Result<()> {
        self.temp.sync()?;
        let (dir, name) = (&self.target.dir, &self.target.name);
        match dir.stat(name).map_err(|e| Error::io(self.target.path(), "read metadata of", e))? {
            Some(found) if !found.is_file() => {
                return Err(Error::io(self.target.path(), "write to", found.not_regular()));
            }
            _ => {}
        }
        dir.rename_to(self.temp.name(), dir, name)
            .map_err(|e| Error::io(self.target.path(), "replace", e))?;
        self.temp.keep();
        dir.sync()
    }
}

/// An output for writers that take only a path and create the file themselves (safetensors'
/// `serialize_file`, `onnx.save_model`): they write into a private (0700) staging directory made
/// beside the destination, where nobody else can plant a name; [`StagedOutput::commit`] then
/// applies the permission rule to the file they wrote and renames it over the destination.
///
/// A writer may also write companion files named after the destination (ONNX external data:
/// `<model>.data`): [`StagedOutput::create_with`] names their suffixes, and each one written is
/// committed before the main file (so a reader of the new main file finds its companion in
/// place), under the companion rule a checkpoint save's `.data` follows (`target.rs`,
/// `check_companion`): beside the destination, replaced as a name, never followed.
#[derive(Debug)]
pub struct StagedOutput {
    target: Target,
    /// (name in the staging directory, destination) of each companion.
    companions: Vec<(OsString, Target)>,
    staging_name: OsString,
    staging: Dir,
    done: bool,
}

impl StagedOutput {
    /// Starts an output to `path` (the destination is checked as in [`AtomicOutput::create`]).
    pub fn create(path: &Path) -> Result<StagedOutput> {
        StagedOutput::create_with(path, &[])
    }

    /// Starts an output to `path` with companion files `<destination><suffix>` for each suffix,
    /// beside the destination (own symlinks at `path` followed) and named after it; each companion
    /// name is checked by the companion rule before anything is written.
    pub fn create_with(path: &Path, companion_suffixes: &[&str]) -> Result<StagedOutput> {
        let target = checked_target(path)?;
        let mut companions = Vec::with_capacity(companion_suffixes.len());
        for suffix in companion_suffixes {
            // a suffix names a file beside the destination, never another directory
            if suffix.is_empty() || suffix.contains('/') || suffix.contains('\0') {
                return Err(Error::io(
                    path,
                    "stage a companion of",
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("bad companion suffix {suffix:?}"),
                    ),
                ));
            }
            let mut name = target.name.clone();
            name.push(suffix);
            target.dir.check_name(&name)?;
            let companion = companion_target(&target.dir, name)?;
            companions.push((companion.name.clone(), companion));
        }
        let (staging_name, staging) = target
            .dir
            .create_private_dir(TEMP_PREFIX, ".d")
            .map_err(|e| Error::io(target.dir.path(), "create a staging directory in", e))?;
        Ok(StagedOutput { target, companions, staging_name, staging, done: false })
    }

    /// The path the writer writes to (inside the staging directory, with the destination's name);
    /// companions go beside it, named with their suffixes.
    pub fn writer_path(&self) -> PathBuf {
        self.staging.show(&self.target.name)
    }

    /// Syncs each written file, gives it the permissions of the file it replaces (`0666 & !umask`
    /// for a new one) and renames it over its destination, companions first (one a writer did not
    /// write leaves its destination alone), then syncs the directories.
    pub fn commit(mut self) -> Result<()> {
        for (staged, target) in &self.companions {
            let written = self
                .staging
                .stat(staged)
                .map_err(|e| Error::io(self.staging.show(staged), "read metadata of", e))?;
            if written.is_some() {
                // checked again: what the name holds now is what the rename replaces
                let now = companion_target(&target.dir, target.name.clone())?;
                self.install(staged, &now)?;
                target.dir.sync()?;
            }
        }
        let (dir, name) = (&self.target.dir, &self.target.name);
        match dir.stat(name).map_err(|e| Error::io(self.target.path(), "read metadata of", e))? {
            Some(found) if !found.is_file() => {
                return Err(Error::io(self.target.path(), "write to", found.not_regular()));
            }
            _ => {}
        }
        self.install(&self.target.name, &self.target)?;
        self.done = true;
        self.remove_staging();
        self.target.dir.sync()
    }

    /// Renames the staged file `staged` over `target` (permission rule applied, synced).
    fn install(&self, staged: &OsString, target: &Target) -> Result<()> {
        let written = self.staging.show(staged);
        let (file, _) = self.staging.open_regular(staged).map_err(|e| Error::io(&written, "open", e))?;
        let mode = match target.entry {
            Some(old) if old.is_file() => old.permissions(),
            _ => 0o666 & !current_umask(), // new, or a symlink replaced as a name
        };
        set_permissions(&file, mode).map_err(|e| Error::io(&written, "set permissions of", e))?;
        file.sync_all().map_err(|e| Error::io(&written, "sync", e))?;
        let (dir, name) = (&target.dir, &target.name);
        self.staging.rename_to(staged, dir, name).map_err(|e| Error::io(target.path(), "replace", e))
    }

    fn remove_staging(&self) {
        if let Ok(names) = self.staging.names_with_prefix(b"") {
            for name in names {
                let _ = self.staging.unlink(&name);
            }
        }
        let _ = self.target.dir.remove_dir(&self.staging_name);
    }
}

impl Drop for StagedOutput {
    fn drop(&mut self) {
        if !self.done {
            self.remove_staging();
        }
    }
}

/// The companion `name` in `dir` (see [`check_companion`]): what it holds now, checked.
fn companion_target(dir: &Dir, name: OsString) -> Result<Target> {
    let path = dir.show(&name);
    let entry = dir.stat(&name).map_err(|e| Error::io(&path, "read metadata of", e))?;
    check_companion(dir, entry.as_ref(), &path, "write to")?;
    Ok(Target { dir: dir.clone(), name, entry })
}

/// The process's file mode creation mask, read without changing it for other threads where the
/// kernel reports it (Linux >= 4.7: `platform::reported_umask`); otherwise (macOS) by the classic
/// set-and-restore, which is only briefly wrong.
fn current_umask() -> u32 {
    if let Some(mask) = crate::platform::reported_umask() {
        return mask;
    }
    // SAFETY: umask only sets the process's mask; it is restored at once.
    unsafe {
        let mask = libc::umask(0o022);
        libc::umask(mask);
        mask as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn commits_replace_keep_modes_and_drops_leave_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out.bin");
        let out = AtomicOutput::create(&path).unwrap();
        out.file().write_all(b"one").unwrap();
        assert!(!path.exists());
        out.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        // SAFETY: umask only reads and sets the process's mask.
        let umask = unsafe {
            let m = libc::umask(0o022);
            libc::umask(m);
            m
        };
        assert_eq!(mode(&path), 0o666 & !(umask as u32));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let out = AtomicOutput::create(&path).unwrap();
        out.file().write_all(b"two").unwrap();
        out.commit().unwrap();
        assert_eq!((std::fs::read(&path).unwrap(), mode(&path)), (b"two".to_vec(), 0o640));
        let out = AtomicOutput::create(&path).unwrap();
        out.file().write_all(b"three").unwrap();
        drop(out);
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn special_targets_and_long_names_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = AtomicOutput::create(&fifo).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
        let err = AtomicOutput::create(tmp.path()).unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EISDIR)),
            "{err}"
        );
        let err = AtomicOutput::create(&tmp.path().join("n".repeat(256))).unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENAMETOOLONG))
        );
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn own_links_are_followed_to_their_file() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink("real", tmp.path().join("link")).unwrap();
        let out = AtomicOutput::create(&tmp.path().join("link")).unwrap();
        out.file().write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        assert!(std::fs::symlink_metadata(tmp.path().join("link")).unwrap().file_type().is_symlink());
    }

    #[test]
    fn staged_outputs_apply_the_permission_rule_and_leave_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x");
        std::fs::write(&path, b"old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o604)).unwrap();
        let out = StagedOutput::create(&path).unwrap();
        // A by-path writer that makes its own private temp file and renames it (like safetensors).
        let written = out.writer_path();
        std::fs::write(written.with_extension("t"), b"new").unwrap();
        std::fs::set_permissions(written.with_extension("t"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::rename(written.with_extension("t"), &written).unwrap();
        out.commit().unwrap();
        assert_eq!((std::fs::read(&path).unwrap(), mode(&path)), (b"new".to_vec(), 0o604));
        let out = StagedOutput::create(&path).unwrap();
        std::fs::write(out.writer_path(), b"partial").unwrap();
        drop(out);
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }
}
