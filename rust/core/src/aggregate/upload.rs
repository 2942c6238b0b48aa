//! Reading one upload for aggregation: into private memory (never a shared mapping, which a
//! truncation by another process turns into SIGBUS), within a size limit, and indexed.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::structure::Located;
use super::values::for_each;
use super::Rejection;
use crate::files::open_regular;
use crate::mapped::{FileStamp, MappedFile};
use crate::{
    check_external_ranges, external_data_path, index_checkpoint, open_checkpoint, CheckpointIndex, Error,
    OpenMode,
};

/// Why an upload could not be used: a rejection of its own kind, or an error of the reader (the
/// kind `unreadable`, with the error's class and message).
#[derive(Debug)]
pub enum UploadError {
    /// Refused by the aggregation's own checks.
    Rejected(Rejection),
    /// The reader's (or the operating system's) error.
    Unreadable(Error),
}

impl From<Rejection> for UploadError {
    fn from(r: Rejection) -> UploadError {
        UploadError::Rejected(r)
    }
}

impl From<Error> for UploadError {
    fn from(e: Error) -> UploadError {
        UploadError::Unreadable(e)
    }
}

/// A local upload read into private memory: the checkpoint, its external data file, and the
/// checkpoint file's identity (device, inode) to tell the same file given twice.
pub struct FileUpload {
    /// The checkpoint's bytes.
    pub checkpoint: MappedFile,
    /// The external data file's bytes, when there is one.
    pub external: Option<MappedFile>,
    /// (device, inode) of the checkpoint file.
    pub identity: (u64, u64),
}

fn too_large(path: &Path, size: &str, limit: u64) -> Rejection {
    Rejection::new(
        "too-large",
        format!(
            "{}: {size} bytes exceed the size limit of {limit} bytes (raise max_bytes if it is legitimate)",
            path.display()
        ),
    )
}

/// Reads `path` (and `path.data`) into private memory, refusing more than `max_bytes` in all:
/// checked on the files' sizes before reading and on the bytes read.
pub fn read_file(
    path: &Path,
    max_bytes: Option<u64>,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<FileUpload, UploadError> {
    if let Some(limit) = max_bytes {
        let size_of = |p: &Path| std::fs::metadata(p).ok().filter(|m| m.is_file()).map_or(0, |m| m.len());
        let size = size_of(path).saturating_add(size_of(&external_data_path(path)));
        if size > limit {
            return Err(too_large(path, &size.to_string(), limit).into());
        }
    }
    let opened = open_checkpoint(path, OpenMode::Read, keep_going)?;
    let read = opened.checkpoint.bytes().len() as u64
        + opened.external.as_ref().map_or(0, |e| e.bytes().len() as u64);
    if let Some(limit) = max_bytes.filter(|&l| read > l) {
        return Err(too_large(path, &read.to_string(), limit).into());
    }
    let id = opened.checkpoint.stamp().id;
    Ok(FileUpload { checkpoint: opened.checkpoint, external: opened.external, identity: (id.dev, id.ino) })
}

/// An upload's files kept open after its check, so its values can be read again piece by piece
/// with `pread` (the robust methods stream all uploads chunk by chunk instead of holding them):
/// never a mapping. Each read first confirms the file is still the version that was checked.
pub struct HeldFiles {
    path: PathBuf,
    checkpoint: (File, FileStamp),
    external: Option<(File, FileStamp)>,
}

fn reopen(path: &Path, read: &MappedFile) -> Result<(File, FileStamp), Error> {
    let file = open_regular(path)?;
    let stamp = FileStamp::of(&file.metadata().map_err(|e| Error::io(path, "read metadata of", e))?);
    if stamp != read.stamp() {
        return Err(changed(path));
    }
    Ok((file, stamp))
}

fn changed(path: &Path) -> Error {
    Error::CheckpointChanged {
        path: path.to_path_buf(),
        detail: "was modified after it was checked, while the round was reading it".into(),
    }
}

impl HeldFiles {
    /// Opens the files `checkpoint` and `external` were read from again (by `path`) and confirms
    /// they are the versions that were read.
    pub fn hold(
        path: &Path,
        checkpoint: &MappedFile,
        external: Option<&MappedFile>,
    ) -> Result<HeldFiles, Error> {
        let checkpoint = reopen(path, checkpoint)?;
        let external = match external {
            Some(e) => Some(reopen(&external_data_path(path), e)?),
            None => None,
        };
        Ok(HeldFiles { path: path.to_path_buf(), checkpoint, external })
    }

    /// Reads `out.len()` lanes of the tensor at `loc`, from lane `first`, as float64; fails when
    /// the range is outside the tensor, the file changed since it was checked, or a value is not
    /// finite (which the check excluded: the file changed).
    pub fn read_lanes(
        &self,
        loc: &Located,
        first: usize,
        out: &mut [f64],
        buf: &mut Vec<u8>,
    ) -> Result<(), Error> {
        let (file, stamp) = match (&self.external, loc.external) {
            (Some(e), true) => e,
            (None, true) => return Err(changed(&self.path)),
            (_, false) => &self.checkpoint,
        };
        let width = loc.lanes.width() as u64;
        let start = loc.bytes.start.saturating_add(first as u64 * width);
        let len = out.len() as u64 * width;
        if start.saturating_add(len) > loc.bytes.end {
            return Err(Error::Internal { detail: "a lane range past the end of its tensor".into() });
        }
        let now = FileStamp::of(&file.metadata().map_err(|e| Error::io(&self.path, "read metadata of", e))?);
        if now != *stamp {
            return Err(changed(&self.path));
        }
        buf.resize(len as usize, 0);
        file.read_exact_at(buf, start).map_err(|_| changed(&self.path))?;
        let mut finite = true;
        for_each(loc.lanes, buf, |i, v| {
            finite &= v.is_finite();
            if let Some(o) = out.get_mut(i) {
                *o = v;
            }
        });
        if !finite {
            return Err(changed(&self.path));
        }
        Ok(())
    }
}

/// Indexes an upload's bytes (memory nobody can change) and checks its external ranges.
pub fn index_upload(checkpoint: &[u8], external: Option<&[u8]>) -> Result<CheckpointIndex, Error> {
    let index = index_checkpoint(checkpoint)?;
    if index.has_external_data {
        match external {
            Some(e) => check_external_ranges(&index, e.len() as u64)?,
            None => {
                return Err(Error::ExternalDataMissing { detail: "its external data file is missing".into() })
            }
        }
    }
    Ok(index)
}
