//! Atomic file replacement: write a temporary file beside the target, fsync it, rename it over
//! the target, fsync the directory. A crash or error at any point leaves the old file intact.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Error, Result};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A file being written under a temporary name in its destination's directory. It becomes the
/// destination only on [`PendingFile::commit`]; dropping it uncommitted deletes it.
pub struct PendingFile {
    file: Option<File>,
    temp: PathBuf,
    dest: PathBuf,
}

impl PendingFile {
    pub fn create(dest: &Path) -> Result<PendingFile> {
        // Saving through a symlink replaces the file it points to, not the link itself.
        let dest = &resolve_symlinks(dest);
        let file_name = dest.file_name().ok_or_else(|| Error::InvalidSpec {
            detail: format!("cannot save to {}: the path does not name a file", dest.display()),
        })?;
        let dir = parent_dir(dest);
        let mut name = std::ffi::OsString::from(".");
        name.push(file_name);
        name.push(format!(".{}.{}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
        let temp = dir.join(name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| Error::io(&temp, "create temporary file", e))?;
        let pending = PendingFile { file: Some(file), temp, dest: dest.to_path_buf() };
        // A replaced file keeps its permissions (a 0600 checkpoint must not become 0644).
        if let Ok(meta) = fs::metadata(dest) {
            fs::set_permissions(&pending.temp, meta.permissions())
                .map_err(|e| Error::io(&pending.temp, "set permissions of", e))?;
        }
        Ok(pending)
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        let file = self.file.as_mut().ok_or_else(|| closed(&self.temp))?;
        file.write_all(bytes).map_err(|e| Error::io(&self.temp, "write", e))
    }

    /// Flushes the data to disk; call on every file of a group before committing any of them.
    pub fn sync(&mut self) -> Result<()> {
        let file = self.file.as_mut().ok_or_else(|| closed(&self.temp))?;
        file.sync_all().map_err(|e| Error::io(&self.temp, "sync", e))
    }

    /// Renames the (synced) file over its destination and syncs the directory entry.
    pub fn commit(mut self) -> Result<()> {
        drop(self.file.take());
        fs::rename(&self.temp, &self.dest).map_err(|e| Error::io(&self.dest, "replace", e))?;
        // The rename is durable only once the directory is synced; some platforms cannot open a
        // directory for that, and the data itself is already safe, so failure here is ignored.
        if let Ok(dir) = File::open(parent_dir(&self.dest)) {
            let _ = dir.sync_all();
        }
        self.temp.clear();
        Ok(())
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            drop(self.file.take());
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// `path` with symlinks followed to the file they name (if any); `path` itself otherwise.
fn resolve_symlinks(path: &Path) -> PathBuf {
    let is_link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return path.to_path_buf();
    }
    match fs::canonicalize(path) {
        Ok(target) => target,
        // A dangling link: replace what it points at, relative to the link's directory.
        Err(_) => match fs::read_link(path) {
            Ok(target) if target.is_absolute() => target,
            Ok(target) => parent_dir(path).join(target),
            Err(_) => path.to_path_buf(),
        },
    }
}

fn closed(path: &Path) -> Error {
    Error::io(path, "write", std::io::Error::other("file already closed"))
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes `bytes` to `path` atomically.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut pending = PendingFile::create(path)?;
    pending.write_all(bytes)?;
    pending.sync()?;
    pending.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ckpt");
        write_file_atomically(&path, b"one").unwrap();
        write_file_atomically(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn dropped_pending_file_leaves_old_file_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ckpt");
        write_file_atomically(&path, b"old").unwrap();
        {
            let mut pending = PendingFile::create(&path).unwrap();
            pending.write_all(b"partial").unwrap();
        }
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn keeps_permissions_and_writes_through_symlinks() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("real.ckpt");
        write_file_atomically(&target, b"old").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link.ckpt");
        symlink(&target, &link).unwrap();

        write_file_atomically(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced");
        assert_eq!(fs::read(&target).unwrap(), b"new");
        assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2, "a temporary file was left behind");
    }

    #[test]
    fn missing_directory_is_an_io_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/a.ckpt");
        let err = write_file_atomically(&path, b"x").unwrap_err();
        assert!(matches!(err, Error::Io { .. }));
        assert!(err.to_string().contains("no/such/dir"));
    }
}
