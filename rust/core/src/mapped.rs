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
            let map =
                unsafe { MmapOptions::new().map(&file) }.map_err(|e| Error::io(path, "memory-map", e))?;
            // Indexing touches one small length prefix per tensor, scattered over the file; with the
            // default readahead each touch would read far more than it needs from disk. Tensor ranges
            // get normal readahead back when their values are used (`advise_normal`).
            #[cfg(unix)]
            let _ = map.advise(memmap2::Advice::Random);
            Some(map)
        };
        Ok(MappedFile { path: path.to_path_buf(), map })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Restores normal readahead for `len` bytes at `offset`, before they are read in order.
    /// Advice only: out-of-range requests and platforms without it are ignored.
    pub fn advise_normal(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        if let Some(map) = &self.map {
            let fits = offset.checked_add(len).is_some_and(|end| end <= map.len());
            if fits && len > 0 {
                let _ = map.advise_range(memmap2::Advice::Normal, offset, len);
            }
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_files_and_takes_any_advice_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 10_000]).unwrap();
        let m = MappedFile::open(&path).unwrap();
        assert_eq!(m.bytes().len(), 10_000);
        m.advise_normal(4097, 100);
        m.advise_normal(9_999, 5); // past the end: ignored
        m.advise_normal(usize::MAX, usize::MAX); // overflow: ignored
        assert_eq!(m.bytes()[9_999], 7);

        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        let m = MappedFile::open(&empty).unwrap();
        assert!(m.bytes().is_empty());
        m.advise_normal(0, 1);
        assert!(matches!(MappedFile::open(dir.path()), Err(Error::Io { .. })));
    }
}
