//! A read-only memory map of a whole file.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapOptions};

use crate::{Error, Result};

/// A file mapped read-only into memory. Pages are read from disk only when touched.
///
/// Like every memory map, it assumes the file is not truncated by someone else while mapped;
/// writers in this crate replace files by rename, which leaves existing maps valid.
pub struct MappedFile {
    path: PathBuf,
    /// `None` for an empty file, which cannot be mapped.
    map: Option<Mmap>,
}

impl MappedFile {
    pub fn open(path: &Path) -> Result<MappedFile> {
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, "read metadata of", e))?;
        if meta.is_dir() {
            // Reading a directory yields the platform's own error (EISDIR), errno included.
            let e = (&file)
                .read(&mut [0u8; 1])
                .err()
                .unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"));
            return Err(Error::io(path, "open", e));
        }
        let map = if meta.len() == 0 {
            None
        } else {
            // SAFETY: the map is read-only; see the type's note on concurrent truncation.
            Some(unsafe { MmapOptions::new().map(&file) }.map_err(|e| Error::io(path, "memory-map", e))?)
        };
        Ok(MappedFile { path: path.to_path_buf(), map })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}
