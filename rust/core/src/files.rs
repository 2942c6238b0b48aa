//! Low-level file operations shared by the save, load and recovery protocols: opening only regular
//! files without ever blocking, file identities (device + inode), directory locks and syncs, and
//! temporary files with short, bounded names. Unix only (identities, `flock`, `O_NONBLOCK`).

use std::ffi::OsString;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::crash::crash_point;
use crate::{Error, Result};

/// A file's identity: the same (device, inode) pair means the same file for as long as either side
/// holds it open (an inode number is reused only after the file is gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    /// The device holding the file.
    pub dev: u64,
    /// The file's inode number on that device.
    pub ino: u64,
}

impl FileId {
    /// The identity of the file `meta` describes.
    pub fn of(meta: &Metadata) -> FileId {
        FileId { dev: meta.dev(), ino: meta.ino() }
    }
}

/// Whether `e` says that no file has this name: it does not exist, or cannot (a name longer than
/// the file system allows: `<255-byte name>.data`).
pub fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENAMETOOLONG)
}

/// The identity of the file `path` names itself (a symlink is not followed), or `None` when
/// nothing has that name.
pub fn id_of_name(path: &Path) -> Result<Option<FileId>> {
    match fs::symlink_metadata(path) {
        Ok(meta) => Ok(Some(FileId::of(&meta))),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(Error::io(path, "read metadata of", e)),
    }
}

/// The identity of the file `path` leads to (symlinks followed), or `None` when it does not exist.
pub fn id_of_path(path: &Path) -> Result<Option<FileId>> {
    match fs::metadata(path) {
        Ok(meta) => Ok(Some(FileId::of(&meta))),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(Error::io(path, "read metadata of", e)),
    }
}

/// What kind of non-regular file `meta` describes, for error messages.
fn kind_name(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

fn not_regular(meta: &Metadata) -> io::Error {
    if meta.is_dir() {
        // The platform's own error, so Python raises IsADirectoryError.
        return io::Error::from_raw_os_error(libc::EISDIR);
    }
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {}; ortckpt only reads and replaces regular files", kind_name(meta)),
    )
}

/// Opens `path` for reading if (after following symlinks) it is a regular file. The open itself
/// is non-blocking, so a FIFO without a writer or a device cannot hang the caller; a non-regular
/// file is refused before a single byte is read. The returned file is in blocking mode again.
pub fn open_regular(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io(path, "open", e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, "read metadata of", e))?;
    if !meta.is_file() {
        return Err(Error::io(path, "open", not_regular(&meta)));
    }
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; no pointers are passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above: fcntl on a descriptor we own, with an integer argument.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(Error::io(path, "open", io::Error::last_os_error()));
    }
    Ok(file)
}

/// Refuses to replace `dest` unless it is absent or a regular file (`dest` has its symlinks
/// resolved already): replacing `/dev/null`, a FIFO or a socket with a checkpoint is never meant.
pub fn check_save_target(dest: &Path) -> Result<()> {
    match fs::symlink_metadata(dest) {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(meta) => {
            let e = match meta.is_dir() {
                true => io::Error::from_raw_os_error(libc::EISDIR),
                false => io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("it is {}; ortckpt only replaces regular files", kind_name(&meta)),
                ),
            };
            Err(Error::io(dest, "save to", e))
        }
        Err(e) if is_absent(&e) => Ok(()),
        Err(e) => Err(Error::io(dest, "read metadata of", e)),
    }
}

/// `path` with symlinks followed to the file they name (if any); `path` itself otherwise.
pub fn resolve_symlinks(path: &Path) -> PathBuf {
    let mut current = path.to_path_buf();
    // A bounded walk (like the kernel's 40-link limit), so a link loop cannot spin forever.
    for _ in 0..40 {
        let is_link = fs::symlink_metadata(&current).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            return current;
        }
        match fs::read_link(&current) {
            Ok(target) if target.is_absolute() => current = target,
            Ok(target) => current = parent_dir(&current).join(target),
            Err(_) => return current,
        }
    }
    current
}

/// The directory holding `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Makes renames and unlinks in `dir` durable. File systems that cannot sync a directory
/// (EINVAL) are skipped: there is nothing more we could do on them.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let handle = match File::open(dir) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(()),
        Err(e) => return Err(Error::io(dir, "open directory", e)),
    };
    match handle.sync_all() {
        Err(e) if e.raw_os_error() != Some(libc::EINVAL) => Err(Error::io(dir, "sync directory", e)),
        _ => Ok(()),
    }
}

fn flock(file: &File, op: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// True when `e` says the file system has no `flock` (some network and FUSE file systems).
fn lock_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOLCK) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP))
}

/// An exclusive `flock` on a directory, held while a save commits (or a recovery runs) in it.
///
/// Why the directory and not a lock file: a lock file would be one more file left beside every
/// checkpoint forever (and itself a crash leftover to explain); the directory always exists, a
/// crashed holder's lock vanishes with its process, and readers can probe it without creating
/// anything (they may have no write access). The price is that commits of different checkpoints
/// in one directory take turns, which only serializes the few renames and syncs of each commit.
/// Where the file system has no `flock`, saves proceed unlocked (see docs/format.md).
pub struct DirLock {
    _dir: Option<File>,
}

impl DirLock {
    pub fn exclusive(dir: &Path) -> Result<DirLock> {
        let handle = File::open(dir).map_err(|e| Error::io(dir, "open directory", e))?;
        match flock(&handle, libc::LOCK_EX) {
            Ok(()) => Ok(DirLock { _dir: Some(handle) }),
            Err(e) if lock_unsupported(&e) => Ok(DirLock { _dir: None }),
            Err(e) => Err(Error::io(dir, "lock directory", e)),
        }
    }
}

/// Whether a save may be committing in `dir` right now: `Some(false)` when nobody holds the
/// directory's commit lock (so a journal found there belongs to a dead save), `Some(true)` when
/// someone does, `None` when it cannot be told (no `flock`, or the directory cannot be opened).
pub fn commit_in_progress(dir: &Path) -> Option<bool> {
    let handle = File::open(dir).ok()?;
    match flock(&handle, libc::LOCK_SH | libc::LOCK_NB) {
        Ok(()) => Some(false), // released when `handle` closes
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Some(true),
        Err(_) => None,
    }
}

/// Tries to take `path`'s own `flock` without waiting: true means no live save holds the file (it
/// is an orphan of a dead one). The caller removes it while the returned handle keeps it locked.
pub fn try_lock_orphan(path: &Path) -> Option<File> {
    let handle = File::open(path).ok()?;
    flock(&handle, libc::LOCK_EX | libc::LOCK_NB).ok()?;
    Some(handle)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The error for a temporary file that could not be created: when its directory is missing (or
/// not a directory), it names the destination and the directory, not the temporary's inner name.
fn temp_create_error(dir: &Path, temp: &Path, like: &Path, e: io::Error) -> Error {
    let problem = match e.raw_os_error() {
        Some(libc::ENOENT) if !dir.exists() => format!("directory {} does not exist", dir.display()),
        Some(libc::ENOTDIR) => format!("{} is not a directory", dir.display()),
        _ => return Error::io(temp, "create temporary file", e),
    };
    let detail = io::Error::new(e.kind(), problem);
    Error::io(like, "write", detail)
}

/// A temporary file that will replace a destination. While it lives it holds its own `flock`, so a
/// cleanup of crash leftovers can tell it from an orphan; dropping it unrenamed deletes it.
pub struct TempFile {
    file: Option<File>,
    path: PathBuf,
    id: FileId,
    armed: bool,
}

impl TempFile {
    /// Creates `<dir>/<prefix><pid>-<n>.tmp` with the permissions of `like` (when it exists).
    pub fn create(dir: &Path, prefix: &str, like: &Path) -> Result<TempFile> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let mut name = OsString::from(prefix);
            name.push(format!("{}-{n}.tmp", std::process::id()));
            let path = dir.join(name);
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(&path)
                .map_err(|e| temp_create_error(dir, &path, like, e))?;
            let mut temp = TempFile { file: None, path, id: FileId { dev: 0, ino: 0 }, armed: true };
            let meta = file.metadata().map_err(|e| Error::io(&temp.path, "read metadata of", e))?;
            temp.id = FileId::of(&meta);
            match flock(&file, libc::LOCK_EX) {
                Ok(()) => {}
                Err(e) if lock_unsupported(&e) => {}
                Err(e) => return Err(Error::io(&temp.path, "lock", e)),
            }
            // A concurrent cleanup may have taken the file for an orphan between its creation and
            // our lock and deleted it; then the name no longer leads to it: start again.
            if id_of_name(&temp.path)? != Some(temp.id) {
                temp.armed = false;
                if attempts < 10 {
                    continue;
                }
                return Err(Error::io(
                    &temp.path,
                    "create temporary file",
                    io::Error::other("removed repeatedly"),
                ));
            }
            temp.file = Some(file);
            // A replaced file keeps its permissions (a 0600 checkpoint must not become 0644).
            if let Ok(meta) = fs::metadata(like) {
                fs::set_permissions(&temp.path, meta.permissions())
                    .map_err(|e| Error::io(&temp.path, "set permissions of", e))?;
            }
            return Ok(temp);
        }
    }

    /// The temporary file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The temporary file's identity (kept when it is renamed).
    pub fn id(&self) -> FileId {
        self.id
    }

    /// Writes all of `bytes`; an error names this file (tests write through it).
    #[cfg(test)]
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        let file = self.file.as_mut().ok_or_else(|| closed(&self.path))?;
        file.write_all(bytes).map_err(|e| Error::io(&self.path, "write", e))
    }

    /// Runs `write` on the open file (e.g. a streamed, vectored write of many pieces); an error
    /// names this file.
    pub fn write_with(&mut self, write: impl FnOnce(&mut File) -> io::Result<()>) -> Result<()> {
        let file = self.file.as_mut().ok_or_else(|| closed(&self.path))?;
        write(file).map_err(|e| Error::io(&self.path, "write", e))
    }

    /// Flushes the file's data and metadata to disk.
    pub fn sync(&mut self) -> Result<()> {
        let file = self.file.as_mut().ok_or_else(|| closed(&self.path))?;
        file.sync_all().map_err(|e| Error::io(&self.path, "sync", e))
    }

    /// The file was renamed into place (or handed to the journal): do not delete it on drop.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            // Unlink by name only while the name still leads to our file.
            if id_of_name(&self.path).ok().flatten() == Some(self.id) {
                let _ = fs::remove_file(&self.path);
            }
        }
        drop(self.file.take());
    }
}

fn closed(path: &Path) -> Error {
    Error::io(path, "write", io::Error::other("file already closed"))
}

/// Removes `path` if it exists; a missing file is not an error.
pub fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if !is_absent(&e) => Err(Error::io(path, "remove", e)),
        _ => Ok(()),
    }
}

/// Renames `from` over `to`, then reports `step` to the test crash hook.
pub fn rename(from: &Path, to: &Path, step: &str) -> Result<()> {
    fs::rename(from, to).map_err(|e| Error::io(to, "replace", e))?;
    crash_point(step);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn open_regular_refuses_fifos_and_directories_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = open_regular(&fifo).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
        let err = open_regular(dir.path()).unwrap_err();
        match err {
            Error::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(libc::EISDIR)),
            other => panic!("{other}"),
        }
        assert!(check_save_target(&fifo).is_err());
        assert!(check_save_target(&dir.path().join("absent")).is_ok());
    }

    #[test]
    fn temp_files_are_removed_on_drop_and_resolve_link_chains() {
        let dir = tempfile::tempdir().unwrap();
        let like = dir.path().join("absent");
        let temp = TempFile::create(dir.path(), ".ortckpt-x.", &like).unwrap();
        let name = temp.path().file_name().unwrap().len();
        assert!(name < 64, "{name}");
        assert!(try_lock_orphan(temp.path()).is_none(), "a live temp file must be locked");
        drop(temp);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);

        let real = dir.path().join("real");
        symlink(&real, dir.path().join("a")).unwrap();
        symlink("a", dir.path().join("b")).unwrap();
        assert_eq!(resolve_symlinks(&dir.path().join("b")), real);
        symlink("loop", dir.path().join("loop")).unwrap();
        let _ = resolve_symlinks(&dir.path().join("loop")); // terminates
    }
}
