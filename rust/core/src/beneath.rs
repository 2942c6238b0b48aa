//! Opening a file that an untrusted relative path names inside a directory held open (ONNX
//! external data: a model's `location`), so that "it is inside the directory" and the open are one
//! step: no name is resolved twice, so a component swapped for a symlink between a check and the
//! open cannot redirect it.
//!
//! Where the kernel has `openat2` (Linux >= 5.6) it resolves the path with `RESOLVE_BENEATH`:
//! absolute paths, `..` above the directory and symlinks leading out fail with `EXDEV`, whatever
//! changes during the lookup. Elsewhere (an older kernel, or a sandbox refusing the call) the path
//! is walked here one component at a time, each opened relative to the directory opened before it
//! with `O_NOFOLLOW`: a symlink is read (`readlinkat`) and its relative target walked the same
//! way, `..` goes back to the directory held before (never above the base), an absolute target is
//! refused. Both give the same answers: symlinks that stay inside are followed, nothing outside is
//! ever opened. The file opened must be a regular file (never blocking on a FIFO).

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::dir::{Dir, Entry};
use crate::{Error, Result};

/// Symlinks followed in one lookup at most (the kernel's limit): a loop ends with an error.
const MAX_LINKS: usize = 40;

/// Why a lookup failed: the path leaves the directory, or the operating system's error.
#[derive(Debug)]
enum Failure {
    Outside,
    Os(io::Error),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure::Os(e)
    }
}

/// Opens the regular file `location` names inside `base` (see the module documentation).
/// Errors: [`Error::ExternalDataLocation`] for a location that is empty, holds NUL, is absolute,
/// leads out of `base` or names a directory; [`Error::Io`] for the operating system's errors
/// (a missing file, a FIFO, permissions), naming `base/location`.
pub fn open_beneath(base: &Dir, location: &Path) -> Result<(File, Entry)> {
    let problem = |detail: String| Error::ExternalDataLocation {
        location: location.to_string_lossy().into_owned(),
        detail,
    };
    let bytes = location.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Err(problem("is empty: it must name a file inside the model's directory".into()));
    }
    if bytes.contains(&0) {
        return Err(problem("contains NUL".into()));
    }
    if bytes.starts_with(b"/") {
        return Err(problem(
            "is an absolute path; ONNX external data must be relative to the model's directory".into(),
        ));
    }
    let opened = match kernel_beneath(base, location) {
        Some(result) => result,
        None => walk(base, location),
    };
    let shown = base.path().join(location);
    let file = match opened {
        Ok(file) => file,
        Err(Failure::Outside) => {
            return Err(problem(format!(
                "is not a file inside the model's directory {}: it leads out of it ('..' or a symbolic \
                 link leading out)",
                base.path().display()
            )))
        }
        Err(Failure::Os(e)) => return Err(Error::io(shown, "open", e)),
    };
    let entry = crate::dir::fstat(&file).map_err(|e| Error::io(&shown, "read metadata of", e))?;
    if entry.is_dir() {
        return Err(problem(format!(
            "is not a file inside the model's directory {}: it names a directory",
            base.path().display()
        )));
    }
    crate::dir::regular_and_blocking(file).map_err(|e| Error::io(&shown, "open", e))
}

/// `openat2(base, location, RESOLVE_BENEATH)`; `None` when the kernel has no `openat2` (or a
/// sandbox refuses it): then the path is walked instead.
#[cfg(target_os = "linux")]
fn kernel_beneath(base: &Dir, location: &Path) -> Option<std::result::Result<File, Failure>> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let c = std::ffi::CString::new(location.as_os_str().as_bytes()).ok()?;
    // SAFETY: open_how is plain data; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
    // EAGAIN: a rename raced with a `..` in the lookup (the kernel asks to retry); bounded.
    for _ in 0..64 {
        // SAFETY: a valid directory descriptor, a NUL-terminated path and a pointer to an
        // open_how of the size passed, all alive for the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                base.as_raw_fd(),
                c.as_ptr(),
                std::ptr::addr_of!(how),
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if let Ok(fd) = i32::try_from(fd) {
            if fd >= 0 {
                // SAFETY: the descriptor was just returned by openat2 and is owned by nobody else.
                return Some(Ok(unsafe { File::from_raw_fd(fd) }));
            }
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR | libc::EAGAIN) => continue,
            Some(libc::ENOSYS | libc::EPERM) => return None,
            Some(libc::EXDEV) => return Some(Err(Failure::Outside)),
            _ => return Some(Err(Failure::Os(e))),
        }
    }
    Some(Err(Failure::Os(io::Error::from_raw_os_error(libc::EAGAIN))))
}

#[cfg(not(target_os = "linux"))]
fn kernel_beneath(_base: &Dir, _location: &Path) -> Option<std::result::Result<File, Failure>> {
    None
}

/// The components of a relative path, empty ones (`a//b`, a trailing `/`) dropped.
fn components(path: &[u8]) -> impl Iterator<Item = OsString> + '_ {
    path.split(|b| *b == b'/').filter(|c| !c.is_empty()).map(|c| OsStr::from_bytes(c).to_owned())
}

/// The lookup done here, one component at a time (see the module documentation).
fn walk(base: &Dir, location: &Path) -> std::result::Result<File, Failure> {
    let mut held: Vec<Dir> = vec![base.clone()];
    let mut pending: VecDeque<OsString> = components(location.as_os_str().as_bytes()).collect();
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        if name == "." {
            continue;
        }
        if name == ".." {
            if held.len() == 1 {
                return Err(Failure::Outside);
            }
            held.pop();
            continue;
        }
        let dir = held.last().ok_or(Failure::Outside)?;
        let entry = dir.stat(&name)?.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        if entry.is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(Failure::Os(io::Error::from_raw_os_error(libc::ELOOP)));
            }
            let target = dir.read_link(&name)?;
            let bytes = target.as_os_str().as_bytes();
            if bytes.starts_with(b"/") {
                return Err(Failure::Outside);
            }
            for (i, part) in components(bytes).enumerate() {
                pending.insert(i, part);
            }
            continue;
        }
        if entry.is_dir() {
            // O_NOFOLLOW: a directory swapped for a symlink since the stat fails, never followed
            let sub = dir.open_dir(&name)?;
            held.push(sub);
            continue;
        }
        if !pending.is_empty() {
            return Err(Failure::Os(io::Error::from_raw_os_error(libc::ENOTDIR)));
        }
        return Ok(dir.open_nofollow(&name)?);
    }
    // the path ends at a directory ("." or "sub/..")
    let last = held.pop().ok_or(Failure::Outside)?;
    Ok(last.open_nofollow(OsStr::new("."))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn layout() -> (tempfile::TempDir, Dir) {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("model");
        std::fs::create_dir_all(base.join("sub/deeper")).unwrap();
        std::fs::write(base.join("sub/deeper/w.bin"), b"inside").unwrap();
        std::fs::write(tmp.path().join("outside.bin"), b"secret").unwrap();
        symlink("sub/deeper", base.join("inner_link")).unwrap();
        symlink("..", base.join("up")).unwrap();
        symlink(tmp.path(), base.join("abs_link")).unwrap();
        symlink("../outside.bin", base.join("file_link")).unwrap();
        symlink("loop", base.join("loop")).unwrap();
        let dir = Dir::open(&base).unwrap();
        (tmp, dir)
    }

    fn read(file: File) -> Vec<u8> {
        use std::io::Read;
        let mut out = Vec::new();
        let mut file = file;
        file.read_to_end(&mut out).unwrap();
        out
    }

    /// The kernel's lookup and the walk agree on every case (the walk is what runs without openat2).
    #[test]
    fn kernel_and_walk_agree() {
        let (_tmp, dir) = layout();
        let inside =
            ["sub/deeper/w.bin", "./sub//deeper/w.bin", "sub/../sub/deeper/w.bin", "inner_link/w.bin"];
        for location in inside {
            let walked = walk(&dir, Path::new(location)).unwrap();
            assert_eq!(read(walked), b"inside", "{location}");
            if let Some(kernel) = kernel_beneath(&dir, Path::new(location)) {
                assert_eq!(read(kernel.unwrap()), b"inside", "{location}");
            }
            assert_eq!(read(open_beneath(&dir, Path::new(location)).unwrap().0), b"inside");
        }
        for location in
            ["../outside.bin", "sub/../../outside.bin", "up/outside.bin", "abs_link/outside.bin", "file_link"]
        {
            assert!(matches!(walk(&dir, Path::new(location)), Err(Failure::Outside)), "{location}");
            if let Some(kernel) = kernel_beneath(&dir, Path::new(location)) {
                assert!(matches!(kernel, Err(Failure::Outside)), "{location}");
            }
            let err = open_beneath(&dir, Path::new(location)).unwrap_err();
            assert!(err.to_string().contains("leads out of it"), "{location}: {err}");
        }
        assert!(
            matches!(walk(&dir, Path::new("loop")), Err(Failure::Os(e)) if e.raw_os_error() == Some(libc::ELOOP))
        );
        for (location, words) in [
            ("", "is empty"),
            ("/etc/passwd", "absolute path"),
            ("a\0b", "NUL"),
            (".", "names a directory"),
            ("sub", "names a directory"),
        ] {
            let err = open_beneath(&dir, Path::new(OsStr::from_bytes(location.as_bytes()))).unwrap_err();
            assert!(err.to_string().contains(words), "{location:?}: {err}");
        }
        let err = open_beneath(&dir, Path::new("missing.bin")).unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound),
            "{err}"
        );
    }

    /// A directory of the path swapped for a symlink leading out, over and over while lookups
    /// run: no lookup ever opens the file outside (each either opens the file inside, or fails).
    #[test]
    fn swapped_directories_never_lead_out() {
        let (tmp, dir) = layout();
        let base = tmp.path().join("model");
        std::fs::create_dir_all(tmp.path().join("evil/deeper")).unwrap();
        std::fs::write(tmp.path().join("evil/deeper/w.bin"), b"secret").unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (stop, base, evil) = (stop.clone(), base.clone(), tmp.path().join("evil"));
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = std::fs::rename(base.join("sub"), base.join("sub.real"));
                    let _ = symlink(&evil, base.join("sub"));
                    let _ = std::fs::remove_file(base.join("sub"));
                    let _ = std::fs::rename(base.join("sub.real"), base.join("sub"));
                }
            })
        };
        for round in 0..4000 {
            let location = Path::new("sub/deeper/w.bin");
            let tries = [Some(walk(&dir, location)), kernel_beneath(&dir, location)];
            // an error is an allowed outcome; a file opened must be the one inside
            for file in tries.into_iter().flatten().flatten() {
                assert_eq!(read(file), b"inside", "round {round}");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
    }
}
