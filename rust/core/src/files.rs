//! Opening files a caller names for reading (checkpoints, their data files), file identities,
//! and probing a directory's commit lock. Unix only (identities, `flock`, `O_NONBLOCK`). The
//! operations of saves, recovery and atomic outputs live in `dir.rs` (relative to a directory
//! descriptor, never following helper names).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

// Re-exported: readers (`open.rs`, `mapped.rs`) compare identities through this module.
pub use crate::dir::FileId;
use crate::dir::{fstat, Dir};
use crate::{Error, Result};

/// Whether `e` says that no file has this name: it does not exist, or cannot (a name longer than
/// the file system allows: `<255-byte name>.data`).
pub fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENAMETOOLONG)
}

/// The identity of the file `path` leads to (symlinks followed), or `None` when it does not exist.
pub fn id_of_path(path: &Path) -> Result<Option<FileId>> {
    match fs::metadata(path) {
        Ok(meta) => Ok(Some(FileId::of(&meta))),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(Error::io(path, "read metadata of", e)),
    }
}

/// Opens `path` for reading if (after following symlinks: a path the caller chose to read) it is
/// a regular file. The open itself is non-blocking, so a FIFO without a writer or a device cannot
/// hang the caller; a non-regular file is refused before a single byte is read. The returned file
/// is in blocking mode again.
pub fn open_regular(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io(path, "open", e))?;
    let entry = fstat(&file).map_err(|e| Error::io(path, "read metadata of", e))?;
    if !entry.is_file() {
        return Err(Error::io(path, "open", entry.not_regular()));
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

/// What kind of file `path` is (`sniff.rs`), from its first bytes, opened as `open_regular`
/// opens (a FIFO or device is refused, never waited on); `None` when no rule recognizes it.
pub fn sniff_file(path: &Path) -> Result<Option<crate::FileKind>> {
    use std::io::Read;
    let file = open_regular(path)?;
    let len = file.metadata().map_err(|e| Error::io(path, "read metadata of", e))?.len();
    let mut head = Vec::with_capacity(crate::SNIFF_LEN);
    file.take(crate::SNIFF_LEN as u64).read_to_end(&mut head).map_err(|e| Error::io(path, "read", e))?;
    Ok(crate::sniff(&head, len))
}

/// A directory's commit lock, probed once without waiting.
pub enum Commits {
    /// Someone holds it: a save or recovery may be committing there right now.
    Running,
    /// Nobody held it, and it is now held *shared* by this value: until it is dropped no save or
    /// recovery can commit there, so a journal read meanwhile belongs to a dead save (a reader may
    /// have no write access; a shared `flock` on the directory needs none).
    Paused(#[allow(dead_code)] Dir),
    /// It cannot be told (no `flock`, or the directory cannot be opened).
    Unknown,
}

/// Probes `dir`'s commit lock; see [`Commits`].
pub fn pause_commits(dir: &Path) -> Commits {
    let Ok(handle) = Dir::open(dir) else { return Commits::Unknown };
    match handle.try_flock(libc::LOCK_SH) {
        Ok(true) => Commits::Paused(handle), // released when `handle` closes
        Ok(false) => Commits::Running,
        Err(_) => Commits::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
