//! A directory held open by descriptor, and every file operation the save protocol, recovery and
//! atomic outputs do in it: by name, relative to that descriptor (the `openat` family), so a
//! directory renamed or a path component swapped for a symlink mid-save cannot redirect them.
//!
//! Rules every operation here keeps:
//! * names are single path components, never followed when they are symlinks (`O_NOFOLLOW`,
//!   `AT_SYMLINK_NOFOLLOW`, `linkat` without `AT_SYMLINK_FOLLOW`);
//! * every open is non-blocking and checked with `fstat` to be a regular file before a byte is
//!   read or written (a FIFO, device or socket at any name is refused at once);
//! * new files are created with `O_EXCL` (an existing name, link or not, is never opened).
//!
//! `libc` rather than `rustix`: the crate already depends on it, and the dozen calls needed sit
//! behind the safe functions of this one module.

use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// An open directory (cheap to clone: clones share the descriptor).
#[derive(Clone, Debug)]
pub struct Dir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
}

/// What `fstat`/`fstatat` says about one name (a symlink is described, not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Device and inode.
    pub id: FileId,
    /// The owner's user id.
    pub uid: u32,
    /// `st_mode`: file type and permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
}

// The `stat` field types differ between platforms (e.g. `st_mode` is 16 bits on macOS): the casts
// below are identities only on some.
#[allow(clippy::unnecessary_cast)]
impl Entry {
    fn of(st: &libc::stat) -> Entry {
        Entry {
            id: FileId { dev: st.st_dev as u64, ino: st.st_ino as u64 },
            uid: st.st_uid,
            mode: st.st_mode as u32,
            size: u64::try_from(st.st_size).unwrap_or(0),
        }
    }

    fn file_type(&self) -> u32 {
        self.mode & libc::S_IFMT as u32
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.file_type() == libc::S_IFREG as u32
    }

    /// A symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.file_type() == libc::S_IFLNK as u32
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.file_type() == libc::S_IFDIR as u32
    }

    /// The sticky bit (a directory where only a file's owner may rename or remove it).
    pub fn is_sticky(&self) -> bool {
        self.mode & libc::S_ISVTX as u32 != 0
    }

    /// The permission bits (`rwx` for owner, group and others; no set-id or sticky bits).
    pub fn permissions(&self) -> u32 {
        self.mode & 0o777
    }

    /// What kind of file this is, for error messages ("a FIFO (named pipe)", ...).
    pub fn kind_name(&self) -> &'static str {
        match self.file_type() {
            t if t == libc::S_IFREG as u32 => "a regular file",
            t if t == libc::S_IFDIR as u32 => "a directory",
            t if t == libc::S_IFIFO as u32 => "a FIFO (named pipe)",
            t if t == libc::S_IFSOCK as u32 => "a socket",
            t if t == libc::S_IFCHR as u32 => "a character device",
            t if t == libc::S_IFBLK as u32 => "a block device",
            t if t == libc::S_IFLNK as u32 => "a symbolic link",
            _ => "not a regular file",
        }
    }

    /// "a FIFO (named pipe) owned by uid N" (or "owned by you"), for messages.
    pub fn describe(&self) -> String {
        let owner = if self.uid == effective_uid() { "you".to_owned() } else { format!("uid {}", self.uid) };
        format!("{} owned by {owner}", self.kind_name())
    }

    /// The error for "this is not a regular file": the platform's EISDIR for a directory (so
    /// Python raises IsADirectoryError), a sentence naming the kind otherwise.
    pub fn not_regular(&self) -> io::Error {
        if self.is_dir() {
            return io::Error::from_raw_os_error(libc::EISDIR);
        }
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {}; ortckpt only reads and replaces regular files", self.kind_name()),
        )
    }
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    if name.is_empty() || name.as_bytes().contains(&b'/') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a plain file name"));
    }
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a file name"))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Retries `f` while it fails with EINTR.
fn retry<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// Checks that `file` (opened non-blocking) is a regular file and makes it blocking again.
pub(crate) fn regular_and_blocking(file: File) -> io::Result<(File, Entry)> {
    let entry = fstat(&file)?;
    if !entry.is_file() {
        return Err(entry.not_regular());
    }
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with integer arguments only.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) })?;
    Ok((file, entry))
}

/// `fstat` of an open file.
pub fn fstat(file: &impl AsRawFd) -> io::Result<Entry> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `stat`; the descriptor is open.
    check(unsafe { libc::fstat(file.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded, so it initialized `st`.
    Ok(Entry::of(unsafe { &st.assume_init() }))
}

/// The calling process's effective user id (the owner of every file it creates).
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// `len` bytes from the operating system's random source, as hex: names nobody can predict.
pub fn random_hex(len: usize) -> io::Result<String> {
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(format!("no random source: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl AsRawFd for Dir {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

impl Dir {
    /// Opens the directory `path` (its own path is the caller's choice and is followed like any
    /// path; only names inside it are held to the rules above). Never blocks, even on a FIFO.
    pub fn open(path: &Path) -> Result<Dir> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| Error::io(path, "open directory", io::Error::from(io::ErrorKind::InvalidInput)))?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
        let fd = retry(|| check(unsafe { libc::open(c.as_ptr(), flags) }))
            .map_err(|e| Error::io(path, "open directory", e))?;
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Dir { fd: Arc::new(fd), path: path.to_path_buf() })
    }

    /// The directory's path (for messages only: operations go through the descriptor).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` in this directory, for messages.
    pub fn show(&self, name: &OsStr) -> PathBuf {
        self.path.join(name)
    }

    /// What `name` is (a symlink is described itself), or `None` when nothing has that name.
    pub fn stat(&self, name: &OsStr) -> io::Result<Option<Entry>> {
        let c = c_name(name)?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: valid descriptor, NUL-terminated name and out-pointer for one `stat`.
        let r = unsafe {
            libc::fstatat(self.fd.as_raw_fd(), c.as_ptr(), st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW)
        };
        match check(r) {
            // SAFETY: fstatat succeeded, so it initialized `st`.
            Ok(_) => Ok(Some(Entry::of(unsafe { &st.assume_init() }))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The directory itself.
    pub fn entry(&self) -> io::Result<Entry> {
        fstat(&*self.fd)
    }

    /// Whether the protocol may act on `entry` (a helper file or journal found in this
    /// directory): in a sticky directory (`/tmp`, mode 1777) only files the caller owns — anyone
    /// else's could be planted there to mislead it; elsewhere any file, since whoever can create
    /// files in a non-sticky directory can rename and remove every file in it anyway.
    pub fn trusts(&self, entry: &Entry) -> bool {
        entry.uid == effective_uid() || !self.is_sticky()
    }

    /// Whether the caller may replace or remove `entry` here (in a sticky directory the kernel
    /// allows it only to the file's owner, the directory's owner and root): checked before a
    /// save writes anything, so a save that cannot finish never starts.
    pub fn may_replace(&self, entry: &Entry) -> bool {
        let me = effective_uid();
        !self.is_sticky() || me == 0 || entry.uid == me || self.entry().is_ok_and(|d| d.uid == me)
    }

    fn is_sticky(&self) -> bool {
        // An unreadable mode is taken as sticky: the stricter rule.
        self.entry().map_or(true, |d| d.is_sticky())
    }

    /// Opens `name` for reading when it is a regular file (not a symlink; never blocking).
    pub fn open_regular(&self, name: &OsStr) -> io::Result<(File, Entry)> {
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
        regular_and_blocking(self.open_at(name, flags, 0).map_err(|e| self.symlink_error(name, e))?)
    }

    /// Opens `name` for reading, whatever it is but a symlink (`O_NOFOLLOW`; never blocking):
    /// the caller checks what it got.
    pub fn open_nofollow(&self, name: &OsStr) -> io::Result<File> {
        self.open_at(name, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC, 0)
    }

    /// Opens the directory `name` in this one (a symlink there is refused, never followed).
    pub fn open_dir(&self, name: &OsStr) -> io::Result<Dir> {
        let flags =
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
        let file = self.open_at(name, flags, 0)?;
        Ok(Dir { fd: Arc::new(OwnedFd::from(file)), path: self.show(name) })
    }

    fn open_at(&self, name: &OsStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<File> {
        let c = c_name(name)?;
        let fd = retry(|| {
            // SAFETY: valid descriptor and NUL-terminated name; `mode` is passed as the variadic
            // argument open(2) reads only with O_CREAT.
            check(unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags, mode as libc::c_uint) })
        })?;
        // SAFETY: `fd` was just returned by openat and is owned by nobody else.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// ELOOP from `O_NOFOLLOW` as a sentence.
    fn symlink_error(&self, name: &OsStr, e: io::Error) -> io::Error {
        if e.raw_os_error() == Some(libc::ELOOP)
            && self.stat(name).ok().flatten().is_some_and(|s| s.is_symlink())
        {
            return io::Error::new(
                io::ErrorKind::InvalidInput,
                "it is a symbolic link; ortckpt never follows links at the names of its helper files",
            );
        }
        e
    }

    /// Creates `name` (which must not exist, not even as a symlink) for reading and writing, with
    /// `0666 & !umask` permissions.
    pub fn create_new(&self, name: &OsStr) -> io::Result<File> {
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        self.open_at(name, flags, 0o666)
    }

    /// Creates a file named `<prefix><32 random hex digits><suffix>` (see [`Dir::create_new`]);
    /// returns its name and the open file.
    pub fn create_unique(&self, prefix: &str, suffix: &str) -> io::Result<(OsString, File)> {
        let mut last = None;
        for _ in 0..16 {
            let name = OsString::from(format!("{prefix}{}{suffix}", random_hex(16)?));
            match self.create_new(&name) {
                Ok(file) => return Ok((name, file)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
    }

    /// Creates a private (0700) directory named `<prefix><32 random hex digits><suffix>` and opens
    /// it; returns its name and the open directory. Nobody else can add names to it.
    pub fn create_private_dir(&self, prefix: &str, suffix: &str) -> io::Result<(OsString, Dir)> {
        let mut last = None;
        for _ in 0..16 {
            let name = OsString::from(format!("{prefix}{}{suffix}", random_hex(16)?));
            let c = c_name(&name)?;
            // SAFETY: valid descriptor and NUL-terminated name.
            match retry(|| check(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o700) })) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    last = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            }
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            // SAFETY: valid descriptor and NUL-terminated name.
            let fd = retry(|| check(unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags) }))?;
            // SAFETY: `fd` was just returned by openat and is owned by nobody else.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            return Ok((name.clone(), Dir { fd: Arc::new(fd), path: self.show(&name) }));
        }
        Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
    }

    /// Removes the empty directory `name`.
    pub fn remove_dir(&self, name: &OsStr) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: valid descriptor and NUL-terminated name.
        retry(|| check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) }))?;
        Ok(())
    }

    /// Renames `from` (in this directory) to `to` in `to_dir` (replacing what `to` names, never
    /// following it).
    pub fn rename_to(&self, from: &OsStr, to_dir: &Dir, to: &OsStr) -> io::Result<()> {
        let (f, t) = (c_name(from)?, c_name(to)?);
        retry(|| {
            // SAFETY: valid descriptors and NUL-terminated names.
            check(unsafe {
                libc::renameat(self.fd.as_raw_fd(), f.as_ptr(), to_dir.fd.as_raw_fd(), t.as_ptr())
            })
        })?;
        Ok(())
    }

    /// Makes `to` in this directory a hard link to the file `from` names (a symlink at `from` is
    /// linked itself, never followed). Fails when `to` exists.
    pub fn link(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        let (f, t) = (c_name(from)?, c_name(to)?);
        let fd = self.fd.as_raw_fd();
        // SAFETY: valid descriptor and NUL-terminated names; flags 0 = do not follow `from`.
        retry(|| check(unsafe { libc::linkat(fd, f.as_ptr(), fd, t.as_ptr(), 0) }))?;
        Ok(())
    }

    /// Removes the name `name` (a symlink itself, never its target).
    pub fn unlink(&self, name: &OsStr) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: valid descriptor and NUL-terminated name.
        retry(|| check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }))?;
        Ok(())
    }

    /// Fails unless `name` is the regular file `id` (not a link, not another file): checked
    /// before and after the protocol renames a file it wrote, so a name swapped for a symlink by
    /// someone who may write the directory never ends up at a checkpoint's name.
    pub fn expect_file(&self, name: &OsStr, id: FileId) -> Result<()> {
        match self.stat(name) {
            Ok(Some(e)) if e.is_file() && e.id == id => Ok(()),
            Ok(found) => {
                let now = found.map_or("nothing".to_owned(), |e| e.describe());
                let e = io::Error::other(format!("it was replaced while the save ran (it is now {now})"));
                Err(Error::io(self.show(name), "replace", e))
            }
            Err(e) => Err(Error::io(self.show(name), "read metadata of", e)),
        }
    }

    /// Removes `name` if something has it; absence is not an error.
    pub fn remove_if_present(&self, name: &OsStr) -> Result<()> {
        match self.unlink(name) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::io(self.show(name), "remove", e)),
            _ => Ok(()),
        }
    }

    /// The target of the symlink `name`.
    pub fn read_link(&self, name: &OsStr) -> io::Result<PathBuf> {
        let c = c_name(name)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        // SAFETY: valid descriptor and name; `buf` is writable for `buf.len()` bytes.
        let n =
            unsafe { libc::readlinkat(self.fd.as_raw_fd(), c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        buf.truncate(n.min(buf.len()));
        Ok(PathBuf::from(OsString::from_vec(buf)))
    }

    /// Makes renames and unlinks in the directory durable. File systems that cannot sync a
    /// directory (EINVAL) are skipped: there is nothing more we could do on them.
    pub fn sync(&self) -> Result<()> {
        // fsync on Linux, F_FULLFSYNC on macOS (platform.rs)
        match retry(|| crate::platform::sync_directory(self.fd.as_raw_fd())) {
            Err(e) if e.raw_os_error() != Some(libc::EINVAL) => {
                Err(Error::io(&self.path, "sync directory", e))
            }
            _ => Ok(()),
        }
    }

    /// The longest file name the directory's file system accepts (255 when it does not say).
    pub fn name_max(&self) -> usize {
        // SAFETY: fpathconf on a descriptor we own.
        let n = unsafe { libc::fpathconf(self.fd.as_raw_fd(), libc::_PC_NAME_MAX) };
        usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(255)
    }

    /// ENAMETOOLONG (naming the file) when `name` is longer than the file system allows: checked
    /// before a save writes anything, not at its last rename.
    pub fn check_name(&self, name: &OsStr) -> Result<()> {
        if name.len() > self.name_max() {
            return Err(Error::io(
                self.show(name),
                "save to",
                io::Error::from_raw_os_error(libc::ENAMETOOLONG),
            ));
        }
        Ok(())
    }

    /// Every name in the directory that starts with `prefix`.
    pub fn names_with_prefix(&self, prefix: &[u8]) -> Result<Vec<OsString>> {
        let err = |e| Error::io(&self.path, "list directory", e);
        // A fresh open file description of this directory for the listing (fdopendir takes
        // ownership of the descriptor and reads from its offset).
        let dot = c".";
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: valid descriptor and NUL-terminated name.
        let fd = retry(|| check(unsafe { libc::openat(self.fd.as_raw_fd(), dot.as_ptr(), flags) }))
            .map_err(err)?;
        // SAFETY: `fd` is an open directory descriptor we own; on success the stream owns it.
        let stream = unsafe { libc::fdopendir(fd) };
        if stream.is_null() {
            let e = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `fd` is still ours to close.
            unsafe { libc::close(fd) };
            return Err(err(e));
        }
        let mut names = Vec::new();
        loop {
            // SAFETY: `stream` is a valid open stream; readdir returns null at the end or on error.
            let entry = unsafe { libc::readdir(stream) };
            if entry.is_null() {
                break;
            }
            // SAFETY: `entry` points to a dirent whose d_name is NUL-terminated, valid until the
            // next readdir on this stream.
            let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
            if name.starts_with(prefix) && name != b"." && name != b".." {
                names.push(OsString::from_vec(name.to_vec()));
            }
        }
        // SAFETY: closes the stream (and its descriptor) exactly once.
        unsafe { libc::closedir(stream) };
        Ok(names)
    }

    /// One non-blocking `flock` attempt on the directory's descriptor: `Ok(true)` when taken.
    pub fn try_flock(&self, op: libc::c_int) -> io::Result<bool> {
        try_flock(&*self.fd, op)
    }
}

/// One non-blocking `flock(op)` attempt on `file`: `Ok(true)` when taken, `Ok(false)` when
/// someone else holds a conflicting lock.
pub fn try_flock(file: &impl AsRawFd, op: libc::c_int) -> io::Result<bool> {
    // SAFETY: flock on an open descriptor, integer arguments only.
    match retry(|| check(unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) })) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sets `file`'s permission bits (through its descriptor, never by name).
pub fn set_permissions(file: &File, mode: u32) -> io::Result<()> {
    // SAFETY: fchmod on a descriptor we own.
    check(unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn names_are_never_followed_and_fifos_never_block() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"private").unwrap();
        std::os::unix::fs::symlink(&victim, tmp.path().join("link")).unwrap();
        mkfifo(&tmp.path().join("fifo"));
        let err = dir.open_regular(OsStr::new("link")).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let err = dir.open_regular(OsStr::new("fifo")).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
        for name in ["link", "fifo", "victim"] {
            let e = dir.create_new(OsStr::new(name)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{name}");
        }
        dir.unlink(OsStr::new("link")).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"private");
        assert!(dir.stat(OsStr::new("fifo")).unwrap().is_some_and(|e| !e.is_file()));
        let (a, _) = dir.create_unique(".x.", ".tmp").unwrap();
        let (b, _) = dir.create_unique(".x.", ".tmp").unwrap();
        assert_ne!(a, b);
        assert_eq!(dir.names_with_prefix(b".x.").unwrap().len(), 2);
        assert!(dir.check_name(OsStr::new(&"n".repeat(256))).is_err());
        assert!(dir.check_name(OsStr::new(&"n".repeat(255))).is_ok());
    }
}
