//! Where a write to a path the user gave lands: its directory (held open) and final name, after
//! following only the symlinks that cannot be turned against the user.
//!
//! The rule (the same as Linux's `fs.protected_symlinks`, applied in user space and in every
//! directory, since a save resolves its target itself): a symlink at the given name is followed
//! when it is owned by the caller (effective uid) or by the owner of the directory holding it —
//! links the caller or the directory's owner made, who could replace the name anyway. A link
//! anyone else planted (e.g. another user in a sticky `/tmp` or a group-writable directory) is
//! never followed: the write fails with an error naming the link and its owner. Directory
//! components of the path are the caller's choice and are resolved by the kernel as usual.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use crate::dir::{effective_uid, Dir, Entry};
use crate::{Error, Result};

/// The kernel's limit on symlinks followed in one lookup; a loop ends with ELOOP, not a hang.
const MAX_LINKS: usize = 40;

/// A write's destination: the directory, the final name in it, and what the name holds now.
#[derive(Debug)]
pub struct Target {
    /// The directory holding the final name.
    pub dir: Dir,
    /// The final name (a plain file name).
    pub name: OsString,
    /// What `name` is now (`None`: nothing; never a symlink).
    pub entry: Option<Entry>,
}

impl Target {
    /// The final path, for messages.
    pub fn path(&self) -> PathBuf {
        self.dir.show(&self.name)
    }
}

/// The directory of `path` (`.` for a bare name) and its last component.
pub fn split(path: &Path) -> Result<(PathBuf, OsString)> {
    let name = match path.file_name() {
        Some(name) if !path.as_os_str().as_encoded_bytes().ends_with(b"/") => name.to_owned(),
        _ => {
            let e = match path.as_os_str().is_empty() {
                true => io::Error::from_raw_os_error(libc::ENOENT),
                false => io::Error::new(io::ErrorKind::InvalidInput, "the path does not name a file"),
            };
            return Err(Error::io(path, "use", e));
        }
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name))
}

/// Whether [`resolve`] applies the write policy or only finds where a reader's path leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A write: links others planted are refused, and so is anything but a regular file.
    Write,
    /// A read (finding a checkpoint's journal): every link is followed, as `open(2)` would.
    Read,
}

/// Resolves `path` to the destination a write replaces (see the module documentation). For a
/// write the destination must be absent or a regular file; `action` names the operation in errors.
pub fn resolve(path: &Path, action: &'static str) -> Result<Target> {
    resolve_for(path, action, Purpose::Write)
}

/// [`resolve`] for the given purpose.
pub fn resolve_for(path: &Path, action: &'static str, purpose: Purpose) -> Result<Target> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let (dir_path, name) = split(&current)?;
        let dir = open_parent(&dir_path, &current, action)?;
        let entry = match dir.stat(&name) {
            Err(e) if purpose == Purpose::Read && e.raw_os_error() == Some(libc::ENAMETOOLONG) => None,
            other => other.map_err(|e| Error::io(&current, "read metadata of", e))?,
        };
        match entry {
            Some(link) if link.is_symlink() => {
                let dir_owner = dir.entry().map_err(|e| Error::io(&dir_path, "read metadata of", e))?.uid;
                let me = effective_uid();
                if purpose == Purpose::Write && link.uid != me && link.uid != dir_owner {
                    return Err(Error::io(
                        &current,
                        action,
                        io::Error::new(
                            io::ErrorKind::PermissionDenied,
                            format!(
                                "it is a symbolic link owned by uid {}, neither you (uid {me}) nor the \
                                 directory's owner (uid {dir_owner}); ortckpt does not follow links others \
                                 planted: remove it or write elsewhere",
                                link.uid
                            ),
                        ),
                    ));
                }
                let to = dir.read_link(&name).map_err(|e| Error::io(&current, "read link", e))?;
                current = if to.is_absolute() { to } else { dir_path.join(to) };
            }
            Some(found) if purpose == Purpose::Write && !found.is_file() => {
                return Err(Error::io(&current, action, found.not_regular()))
            }
            entry => return Ok(Target { dir, name, entry }),
        }
    }
    Err(Error::io(path, action, io::Error::from_raw_os_error(libc::ELOOP)))
}

/// The rule for a companion name, a file named after a destination and written with it
/// (`<checkpoint>.data`, an exported model's `<model>.data`): it is replaced as a name and never
/// followed, so a symlink there (anyone's: the directory's owner's too) is replaced itself, never
/// written through. What it holds (`entry`) must be nothing, a regular file or a symlink, and
/// replaceable by the caller (in a sticky directory: the caller's own, or the directory's);
/// `path` and `action` name it in errors.
pub fn check_companion(dir: &Dir, entry: Option<&Entry>, path: &Path, action: &'static str) -> Result<()> {
    let Some(entry) = entry else { return Ok(()) };
    if !entry.is_file() && !entry.is_symlink() {
        return Err(Error::io(path, action, entry.not_regular()));
    }
    ensure_replaceable(dir, entry, path, action)
}

/// Fails unless the caller may replace `entry` in `dir` (a sticky directory lets only the
/// file's owner, the directory's owner and root do it): checked before anything is written, so a
/// write that cannot finish never starts.
pub fn ensure_replaceable(dir: &Dir, entry: &Entry, path: &Path, action: &'static str) -> Result<()> {
    if dir.may_replace(entry) {
        return Ok(());
    }
    let e = io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "it is {} in a sticky directory, which only its owner can replace; nothing was written",
            entry.describe()
        ),
    );
    Err(Error::io(path, action, e))
}

/// Opens the directory `dir_path` holding `path`. When it is missing or not a directory, the
/// error names `path` (what the user asked for) and the directory, so no helper's name leaks.
fn open_parent(dir_path: &Path, path: &Path, action: &'static str) -> Result<Dir> {
    Dir::open(dir_path).map_err(|e| {
        let errno = match &e {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        };
        let (kind, problem) = match errno {
            Some(libc::ENOENT) => {
                (io::ErrorKind::NotFound, format!("directory {} does not exist", dir_path.display()))
            }
            Some(libc::ENOTDIR) => {
                (io::ErrorKind::NotADirectory, format!("{} is not a directory", dir_path.display()))
            }
            _ => return e,
        };
        Error::io(path, action, io::Error::new(kind, problem))
    })
}
