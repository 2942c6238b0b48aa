//! Reading one upload for aggregation: into private memory (never a shared mapping, which a
//! truncation by another process turns into SIGBUS), within a size limit, and indexed.

use std::path::Path;

use super::Rejection;
use crate::mapped::MappedFile;
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
