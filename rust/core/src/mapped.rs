//! A checkpoint file's bytes: a read-only memory map (pages read from disk only when touched), or
//! the whole file read into private memory. Either keeps the opened file, so that a change of the
//! file on disk since it was opened can be detected ([`MappedFile::check_unchanged`]).

use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::files::{open_regular, FileId};
use crate::parallel::{in_parallel, threads};
use crate::{Error, Result};

/// What identifies one version of a file's content, as far as the file system tells: a rewrite in
/// place (what ORT's `save_checkpoint` does) changes the size or the modification time. (Not the
/// change time: it also moves when a save links or renames the file, which leaves the content
/// alone.) Times have the file system's timestamp granularity (often the kernel tick, a few ms),
/// so a same-size rewrite within one tick of the open cannot be seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    pub id: FileId,
    pub size: u64,
    pub mtime_ns: i128,
}

impl FileStamp {
    pub fn of(meta: &Metadata) -> FileStamp {
        FileStamp {
            id: FileId::of(meta),
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        }
    }

    pub(crate) fn of_file(file: &File, path: &Path) -> Result<FileStamp> {
        Ok(FileStamp::of(&file.metadata().map_err(|e| Error::io(path, "read metadata of", e))?))
    }
}

enum Contents {
    /// `None` for an empty file, which cannot be mapped.
    Mapped(Option<Mmap>),
    Owned(OwnedBytes),
}

/// Private memory of `size` bytes for reading a file into (`None` when `size` is 0): an
/// anonymous mapping, zeroed by the kernel as it is first touched (no pass of our own), with
/// transparent huge pages asked for on Linux (as numpy does; `platform.rs`). Never backed by a file, so
/// no other program's truncation can make touching it raise SIGBUS.
pub(crate) fn anonymous(size: usize) -> std::io::Result<Option<MmapMut>> {
    if size == 0 {
        return Ok(None);
    }
    let map = MmapOptions::new().len(size).map_anon()?;
    crate::platform::advise_huge_pages(&map);
    Ok(Some(map))
}

/// A file's bytes in private memory: an anonymous mapping the size of the file, with transparent
/// huge pages asked for on Linux (as numpy does for large arrays), so that reading 1 GiB takes 512 page
/// faults instead of 262,144 and runs at `np.fromfile` speed.
struct OwnedBytes {
    /// `None` for an empty file.
    map: Option<MmapMut>,
    /// Bytes read (at most the map's length).
    len: usize,
}

impl OwnedBytes {
    fn new(size: usize) -> std::io::Result<OwnedBytes> {
        Ok(OwnedBytes { map: anonymous(size)?, len: 0 })
    }

    fn buffer_mut(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or_default()
    }

    fn bytes(&self) -> &[u8] {
        self.map.as_deref().and_then(|m| m.get(..self.len)).unwrap_or_default()
    }
}

/// A file's bytes, mapped or owned. A mapping shares the page cache with the file: if another
/// program rewrites the file in place (rather than replacing it by rename, as ortckpt does), the
/// mapped bytes change, and pages past a truncation raise SIGBUS when touched. Call
/// [`MappedFile::check_unchanged`] before using bytes that were not used yet; use owned contents
/// when the file may be rewritten in place.
pub struct MappedFile {
    path: PathBuf,
    /// The file the bytes come from: kept open so its identity (and inode number) stays reserved
    /// and its current state can be compared with `stamp`.
    file: File,
    stamp: FileStamp,
    contents: Contents,
}

/// Ranges shorter than this are read without asking for readahead: a few pages cost less to fault
/// in one by one than the system call costs (100,000 tiny tensors would make 100,000 calls).
pub const READAHEAD_MIN: usize = 16 << 10;

/// Owned reads go in chunks of this size, a round of them on every core, with an interruption
/// check between rounds.
const READ_CHUNK: usize = 8 << 20;

/// Reads all of `file` (of `stamp.size` bytes, when it was opened) into `dst`: the file layer's one
/// loop for reading a whole file into private memory (checkpoints read with `mmap=False`, and
/// every upload of an aggregation). Large files are read a few chunks at a time, the chunks of a
/// round with `pread` on every core (one core copies out of the page cache at about half the
/// memory's speed), with `keep_going` asked between rounds (false stops with
/// [`Error::Interrupted`]). A file that shrank, grew or changed while it was read is
/// [`Error::CheckpointChanged`]: its bytes could be a mix of versions.
pub(crate) fn read_whole(
    file: &File,
    stamp: &FileStamp,
    path: &Path,
    dst: &mut [u8],
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<()> {
    use std::os::unix::fs::FileExt;

    let size = usize::try_from(stamp.size).unwrap_or(usize::MAX);
    let Some(space) = dst.get_mut(..size) else {
        return Err(Error::Internal { detail: "a read buffer smaller than its file".into() });
    };
    let changed = |when: &str| Error::CheckpointChanged {
        path: path.to_path_buf(),
        detail: format!("was modified while it was being read{when}"),
    };
    let round = READ_CHUNK * threads();
    for (r, part) in space.chunks_mut(round).enumerate() {
        if !keep_going() {
            return Err(Error::Interrupted { path: path.to_path_buf() });
        }
        let (first, bytes) = (r * round, part.len());
        let pieces: Vec<(usize, &mut [u8])> = part
            .chunks_mut(READ_CHUNK)
            .enumerate()
            .map(|(k, piece)| (first + k * READ_CHUNK, piece))
            .collect();
        let read = |(offset, piece): (usize, &mut [u8])| file.read_exact_at(piece, offset as u64);
        for outcome in in_parallel(pieces, bytes, read) {
            match outcome {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(changed(" (now shorter)"))
                }
                Err(e) => return Err(Error::io(path, "read", e)),
            }
        }
    }
    if FileStamp::of_file(file, path)? != *stamp {
        return Err(changed(""));
    }
    Ok(())
}

impl MappedFile {
    /// Opens (regular files only, never blocking) and maps `path`.
    pub fn open(path: &Path) -> Result<MappedFile> {
        MappedFile::map(open_regular(path)?, path)
    }

    /// Opens (regular files only, never blocking) and reads `path` into private memory
    /// ([`MappedFile::read`]): for inputs whose bytes are used after they are checked, which a
    /// mapping would expose to another program's truncation (SIGBUS).
    pub fn read_path(path: &Path, keep_going: &mut dyn FnMut() -> bool) -> Result<MappedFile> {
        MappedFile::read(open_regular(path)?, path, keep_going)
    }

    /// Maps the opened regular file `file` (named `path` in messages).
    pub fn map(file: File, path: &Path) -> Result<MappedFile> {
        let stamp = FileStamp::of_file(&file, path)?;
        let map = if stamp.size == 0 {
            None
        } else {
            // SAFETY: the map is read-only. Changes to the file by other programs show through it
            // (see the type's note): the bytes are only ever read as plain bytes, and every reader
            // of them checks each structural value it reads against the length.
            let map =
                unsafe { MmapOptions::new().map(&file) }.map_err(|e| Error::io(path, "memory-map", e))?;
            // Indexing reads the flatbuffer structure only, which in files ORT wrote lies between
            // the tensors (one small table beside each tensor's values); with the default readahead
            // each touch would read far more than it needs from disk. Tensor ranges get normal
            // readahead back when their values are used (`advise_normal`).
            let _ = map.advise(memmap2::Advice::Random);
            Some(map)
        };
        Ok(MappedFile { path: path.to_path_buf(), file, stamp, contents: Contents::Mapped(map) })
    }

    /// Reads the whole opened regular file `file` into private memory, calling `keep_going`
    /// between chunks (false stops with [`Error::Interrupted`]). Fails with
    /// [`Error::CheckpointChanged`] when the file changed while it was read.
    pub fn read(file: File, path: &Path, keep_going: &mut dyn FnMut() -> bool) -> Result<MappedFile> {
        let stamp = FileStamp::of_file(&file, path)?;
        MappedFile::read_stamped(file, stamp, path, keep_going)
    }

    /// Opens (regular files only, never blocking) and reads `path` into private memory, unless
    /// the opened file is larger than `max_bytes` ([`Error::SizeLimit`], before a byte is
    /// allocated or read; `None`: no limit). A file that grows while it is read is refused like
    /// any change ([`Error::CheckpointChanged`]), so no more than `max_bytes` are ever read.
    pub fn read_path_within(
        path: &Path,
        max_bytes: Option<u64>,
        keep_going: &mut dyn FnMut() -> bool,
    ) -> Result<MappedFile> {
        let file = open_regular(path)?;
        let stamp = FileStamp::of_file(&file, path)?;
        if let Some(limit) = max_bytes.filter(|&limit| stamp.size > limit) {
            return Err(Error::SizeLimit { path: path.to_path_buf(), size: stamp.size, limit });
        }
        MappedFile::read_stamped(file, stamp, path, keep_going)
    }

    /// [`MappedFile::read`] of a file whose state when opened was `stamp`.
    fn read_stamped(
        file: File,
        stamp: FileStamp,
        path: &Path,
        keep_going: &mut dyn FnMut() -> bool,
    ) -> Result<MappedFile> {
        // The size comes from the file system, not from file contents: a sound allocation size.
        let size = usize::try_from(stamp.size)
            .map_err(|_| Error::io(path, "read", std::io::ErrorKind::OutOfMemory.into()))?;
        let mut bytes = OwnedBytes::new(size).map_err(|e| Error::io(path, "allocate memory for", e))?;
        read_whole(&file, &stamp, path, bytes.buffer_mut(), keep_going)?;
        bytes.len = size;
        Ok(MappedFile { path: path.to_path_buf(), file, stamp, contents: Contents::Owned(bytes) })
    }

    /// The file's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The opened file's state when it was opened.
    pub fn stamp(&self) -> FileStamp {
        self.stamp
    }

    /// Whether the bytes are a memory map (else they were read into private memory).
    pub fn is_mapped(&self) -> bool {
        matches!(self.contents, Contents::Mapped(_))
    }

    /// Fails with [`Error::CheckpointChanged`] when the opened file was modified since it was
    /// opened (size or times differ). Owned contents cannot change: always Ok for them.
    pub fn check_unchanged(&self) -> Result<()> {
        if !self.is_mapped() {
            return Ok(());
        }
        if FileStamp::of_file(&self.file, &self.path)? != self.stamp {
            return Err(self.changed_error("since it was loaded"));
        }
        Ok(())
    }

    fn changed_error(&self, when: &str) -> Error {
        Error::CheckpointChanged { path: self.path.clone(), detail: format!("was modified {when}") }
    }

    /// Restores normal readahead for `len` bytes at `offset`, before they are read in order.
    /// Advice only: out-of-range requests, ranges under `READAHEAD_MIN` bytes and owned
    /// contents are ignored.
    pub fn advise_normal(&self, offset: usize, len: usize) {
        if let Contents::Mapped(Some(map)) = &self.contents {
            let fits = offset.checked_add(len).is_some_and(|end| end <= map.len());
            if fits && len >= READAHEAD_MIN {
                let _ = map.advise_range(memmap2::Advice::Normal, offset, len);
            }
        }
    }

    /// Before `len` bytes at `offset` are used for the first time: [`MappedFile::check_unchanged`],
    /// then [`MappedFile::advise_normal`].
    pub fn prepare(&self, offset: usize, len: usize) -> Result<()> {
        self.check_unchanged()?;
        self.advise_normal(offset, len);
        Ok(())
    }

    /// The file's bytes (a map may show later changes of the file; see the type's note).
    pub fn bytes(&self) -> &[u8] {
        match &self.contents {
            Contents::Mapped(map) => map.as_deref().unwrap_or(&[]),
            Contents::Owned(bytes) => bytes.bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom, Write};

    #[test]
    fn maps_files_and_takes_any_advice_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 100_000]).unwrap();
        let m = MappedFile::open(&path).unwrap();
        assert_eq!(m.bytes().len(), 100_000);
        m.advise_normal(4097, READAHEAD_MIN);
        m.advise_normal(4097, 100); // too short to ask for readahead: ignored
        m.advise_normal(99_999, READAHEAD_MIN); // past the end: ignored
        m.advise_normal(usize::MAX, usize::MAX); // overflow: ignored
        assert_eq!(m.bytes()[99_999], 7);

        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        let m = MappedFile::open(&empty).unwrap();
        assert!(m.bytes().is_empty());
        m.advise_normal(0, 1);
        assert!(matches!(MappedFile::open(dir.path()), Err(Error::Io { .. })));
    }

    #[test]
    fn in_place_rewrites_are_detected_for_maps_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 100]).unwrap();
        let mapped = MappedFile::open(&path).unwrap();
        let owned = MappedFile::read(open_regular(&path).unwrap(), &path, &mut || true).unwrap();
        mapped.check_unchanged().unwrap();
        // Timestamps have the kernel tick's granularity; the size change is seen at once.
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(100)).unwrap();
        f.write_all(b"more").unwrap();
        let err = mapped.check_unchanged().unwrap_err();
        assert!(matches!(err, Error::CheckpointChanged { .. }), "{err}");
        owned.check_unchanged().unwrap();
        assert_eq!(owned.bytes(), &[1u8; 100][..]);

        let mut calls = 0;
        let err = MappedFile::read(open_regular(&path).unwrap(), &path, &mut || {
            calls += 1;
            false
        });
        assert!(matches!(err, Err(Error::Interrupted { .. })));
        assert_eq!(calls, 1);
    }

    #[test]
    fn reads_within_a_budget_refuse_larger_files_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![3u8; 64]).unwrap();
        let read = MappedFile::read_path_within(&path, Some(64), &mut || true).unwrap();
        assert!(!read.is_mapped());
        assert_eq!(read.bytes(), &[3u8; 64][..]);
        // a sparse 1 TiB file: refused from its size, `keep_going` never asked (nothing read)
        let huge = dir.path().join("huge");
        std::fs::File::create(&huge).unwrap().set_len(1 << 40).unwrap();
        let mut calls = 0;
        let refused = MappedFile::read_path_within(&huge, Some(64), &mut || {
            calls += 1;
            true
        });
        assert!(matches!(refused, Err(Error::SizeLimit { size, limit: 64, .. }) if size == 1 << 40));
        assert_eq!(calls, 0);
        assert!(matches!(
            MappedFile::read_path_within(dir.path(), Some(64), &mut || true),
            Err(Error::Io { .. })
        ));
    }
}
