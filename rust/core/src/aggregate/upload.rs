//! Reading one upload for aggregation: into private memory (never a shared mapping, which a
//! truncation by another process turns into SIGBUS), within a size limit, and indexed.

use super::rejection::RejectionKind;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use memmap2::MmapMut;

use super::rejection::Rejection;
use super::structure::Located;
use crate::files::open_regular;
use crate::mapped::{anonymous, read_whole, FileStamp};
use crate::paged::index_file;
use crate::values::{decode_into, scan};
use crate::{check_external_ranges, external_data_location, index_checkpoint, CheckpointIndex, Error};

/// Why an upload is not counted: a rejection of its own kind, or the reader's [`Error`] (the kind
/// `unreadable`, with the error's class and message). A verdict, not a second error type: the
/// errors are the core's one `Error`.
#[derive(Debug)]
pub enum Refusal {
    /// Refused by the aggregation's own checks.
    Rejected(Rejection),
    /// The reader's (or the operating system's) error.
    Unreadable(Error),
}

impl From<Rejection> for Refusal {
    fn from(r: Rejection) -> Refusal {
        Refusal::Rejected(r)
    }
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        Refusal::Unreadable(e)
    }
}

/// Bytes read into private memory (an anonymous mapping: `anonymous`), in a buffer reused from
/// one upload to the next: a fresh buffer costs a page fault per page and the kernel's zeroing
/// of it (as much again as the read), a reused one neither.
pub struct Buffer {
    map: Option<MmapMut>,
    used: usize,
    /// Whether the memory goes back to the pool when dropped (see [`Buffer::leave_pool`]).
    pooled: AtomicBool,
}

/// Buffers handed back by dropped uploads (a few: one per upload in flight). A round empties it
/// when it ends ([`release_buffers`]), so no upload-sized memory outlives the round.
static POOL: Mutex<Vec<MmapMut>> = Mutex::new(Vec::new());
const POOLED: usize = 16; // at most a window's uploads (round.rs) are in flight at once

/// Frees the buffers kept for reuse (call when a round ends).
pub fn release_buffers() {
    if let Ok(mut pool) = POOL.lock() {
        pool.clear();
        pool.shrink_to_fit();
    }
}

impl Buffer {
    /// A buffer of `size` bytes (contents unspecified until read into): the smallest pooled
    /// mapping that is large enough, else a new one.
    fn with_size(size: usize) -> std::io::Result<Buffer> {
        let pooled = POOL.lock().ok().and_then(|mut pool| {
            let best = (0..pool.len())
                .filter(|&i| pool.get(i).is_some_and(|m| m.len() >= size))
                .min_by_key(|&i| pool.get(i).map_or(usize::MAX, |m| m.len()))?;
            Some(pool.swap_remove(best))
        });
        let map = match pooled {
            Some(map) => Some(map),
            None => anonymous(size)?,
        };
        Ok(Buffer { map, used: size, pooled: AtomicBool::new(true) })
    }

    /// Frees the memory when dropped instead of keeping it for the next upload: for bytes that
    /// may outlive the round (a state loaded from them), whose end empties the pool.
    pub fn leave_pool(&self) {
        self.pooled.store(false, Ordering::Relaxed);
    }

    fn space(&mut self) -> &mut [u8] {
        self.map.as_deref_mut().unwrap_or_default()
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().and_then(|m| m.get(..self.used)).unwrap_or_default()
    }
}

impl AsRef<[u8]> for Buffer {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if !self.pooled.load(Ordering::Relaxed) {
            return;
        }
        if let (Some(map), Ok(mut pool)) = (self.map.take(), POOL.lock()) {
            if pool.len() < POOLED {
                pool.push(map);
            }
        }
    }
}

/// A local upload read into private memory: the checkpoint, its external data file, the opened
/// files (kept for [`HeldFiles`]) and the checkpoint file's identity (device, inode) to tell the
/// same file given twice.
pub struct FileUpload {
    /// The checkpoint's bytes.
    pub checkpoint: Buffer,
    /// The external data file's bytes, when there is one.
    pub external: Option<Buffer>,
    /// (device, inode) of the checkpoint file.
    pub identity: (u64, u64),
    /// The opened files, to read values again later.
    pub files: HeldFiles,
}

/// An upload past the round's size limit: a rejection, in the words of the core's size-limit error.
fn too_large(path: &Path, size: u64, limit: u64) -> Rejection {
    let error = Error::SizeLimit { path: path.to_path_buf(), size, limit };
    Rejection::new(RejectionKind::TooLarge, error.to_string())
}

/// Opens `path` (regular files only, never blocking: the core's file layer) with its stamp.
fn open_stamped(path: &Path) -> Result<(File, FileStamp), Error> {
    let file = open_regular(path)?;
    let stamp = FileStamp::of(&file.metadata().map_err(|e| Error::io(path, "read metadata of", e))?);
    Ok((file, stamp))
}

/// Reads all of `file` (of `stamp.size` bytes) into a pooled buffer, with the file layer's read
/// loop ([`read_whole`]: on every core for large files, a changed file refused).
fn read_all(
    file: &File,
    stamp: &FileStamp,
    path: &Path,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<Buffer, Error> {
    let size = usize::try_from(stamp.size)
        .map_err(|_| Error::io(path, "read", std::io::ErrorKind::OutOfMemory.into()))?;
    let mut buffer = Buffer::with_size(size).map_err(|e| Error::io(path, "allocate memory for", e))?;
    read_whole(file, stamp, path, buffer.space(), keep_going)?;
    Ok(buffer)
}

/// Opens `path` and its external data file (when present: where `load` finds it,
/// [`external_data_location`]) for aggregation, refusing more than `max_bytes` in all: the
/// opened files' sizes are checked before a byte is read.
pub fn open_files(path: &Path, max_bytes: Option<u64>) -> Result<HeldFiles, Refusal> {
    let checkpoint = open_stamped(path)?;
    let ext_path = external_data_location(path);
    let external = match open_stamped(&ext_path) {
        Ok(e) => Some(e),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let size = checkpoint.1.size.saturating_add(external.as_ref().map_or(0, |e| e.1.size));
    if let Some(limit) = max_bytes.filter(|&l| size > l) {
        return Err(too_large(path, size, limit).into());
    }
    Ok(HeldFiles { path: path.to_path_buf(), checkpoint, external, external_path: ext_path })
}

/// Reads `path` (and `path.data`, when present) into private memory, refusing more than
/// `max_bytes` in all ([`open_files`]); a file that changes size while read is refused, so no
/// more than `max_bytes` are ever read.
pub fn read_file(
    path: &Path,
    max_bytes: Option<u64>,
    keep_going: &mut dyn FnMut() -> bool,
) -> Result<FileUpload, Refusal> {
    let files = open_files(path, max_bytes)?;
    let bytes = read_all(&files.checkpoint.0, &files.checkpoint.1, path, keep_going)?;
    let ext_bytes = match &files.external {
        Some((file, stamp)) => Some(read_all(file, stamp, files.external_path(), keep_going)?),
        None => None,
    };
    Ok(FileUpload { checkpoint: bytes, external: ext_bytes, identity: files.identity(), files })
}

/// An upload's files kept open after its check, so its values can be read again piece by piece
/// with `pread` (the robust methods stream all uploads chunk by chunk instead of holding them):
/// never a mapping. [`HeldFiles::confirm_unchanged`] tells whether the files are still the
/// versions that were checked.
pub struct HeldFiles {
    path: PathBuf,
    checkpoint: (File, FileStamp),
    external: Option<(File, FileStamp)>,
    /// Where the external data file is (opened or not).
    external_path: PathBuf,
}

fn changed(path: &Path, when: &str) -> Error {
    Error::CheckpointChanged { path: path.to_path_buf(), detail: format!("was modified {when}") }
}

impl HeldFiles {
    /// Reads `out.len()` lanes of the tensor at `loc`, from lane `first`, as float64; fails when
    /// the range is outside the tensor, the file is now shorter, or a value is not finite (which
    /// the check excluded: the file changed). Whether the file is otherwise still the version
    /// that was checked is [`HeldFiles::confirm_unchanged`]'s, asked once when the reads are
    /// done (one `fstat` per read was a twentieth of a 1,000-upload median).
    pub fn read_lanes(
        &self,
        loc: &Located,
        first: usize,
        out: &mut [f64],
        buf: &mut Vec<u8>,
    ) -> Result<(), Error> {
        buf.resize(out.len().saturating_mul(loc.lanes.width()), 0);
        self.read_stored(loc, first, buf)?;
        decode_into(loc.lanes, buf, out);
        Ok(())
    }

    /// [`HeldFiles::read_lanes`] of `dst.len() / width` lanes into `dst`, as stored (the file's
    /// bytes, checked finite).
    pub fn read_stored(&self, loc: &Located, first: usize, dst: &mut [u8]) -> Result<(), Error> {
        self.read_raw(loc, first, dst)?;
        if !scan(loc.lanes, dst).0 {
            return Err(changed(&self.path, "after it was checked (a value is no longer finite)"));
        }
        Ok(())
    }

    /// The file's bytes of `dst.len() / width` lanes of the tensor at `loc`, from lane `first`,
    /// unchecked; fails when the range is outside the tensor or the file is now shorter.
    pub fn read_raw(&self, loc: &Located, first: usize, dst: &mut [u8]) -> Result<(), Error> {
        let (file, _) = match (&self.external, loc.external) {
            (Some(e), true) => e,
            (None, true) => return Err(changed(&self.path, "after it was checked")),
            (_, false) => &self.checkpoint,
        };
        let width = loc.lanes.width() as u64;
        let start = loc.bytes.start.saturating_add(first as u64 * width);
        if !(dst.len() as u64).is_multiple_of(width) || start.saturating_add(dst.len() as u64) > loc.bytes.end
        {
            return Err(Error::Internal { detail: "a lane range past the end of its tensor".into() });
        }
        file.read_exact_at(dst, start).map_err(|_| changed(&self.path, "after it was checked (now shorter)"))
    }

    /// The stamps (identity, size, modification time) of the checkpoint file and of its external
    /// data file, as they were when opened.
    pub fn stamps(&self) -> (FileStamp, Option<FileStamp>) {
        (self.checkpoint.1, self.external.as_ref().map(|e| e.1))
    }

    /// Opens `path` (and `path.data`) again, for another process of a cluster: `Err`
    /// (CheckpointChanged) unless both files are still the versions `stamps` describe.
    pub fn reopen(path: &Path, stamps: (FileStamp, Option<FileStamp>)) -> Result<HeldFiles, Error> {
        let files = match open_files(path, None) {
            Ok(files) => files,
            Err(Refusal::Unreadable(e)) => return Err(e),
            Err(Refusal::Rejected(r)) => {
                return Err(changed(path, &format!("after it was checked ({})", r.message)))
            }
        };
        if files.stamps() != stamps {
            return Err(changed(path, "after it was checked, before the round read it again"));
        }
        Ok(files)
    }

    /// The sizes of the checkpoint file and of its external data file (when there is one), as
    /// checked when they were opened.
    pub fn sizes(&self) -> (u64, Option<u64>) {
        (self.checkpoint.1.size, self.external.as_ref().map(|e| e.1.size))
    }

    /// The opened checkpoint file and its size, and the external data file's when there is one:
    /// for a reader that reads them on demand (a round's reference, whose structure is read and
    /// whose values are not).
    pub fn into_parts(self) -> ((File, u64), Option<(File, u64)>) {
        let (file, stamp) = self.checkpoint;
        ((file, stamp.size), self.external.map(|(f, s)| (f, s.size)))
    }

    /// (device, inode) of the checkpoint file.
    pub fn identity(&self) -> (u64, u64) {
        (self.checkpoint.1.id.dev, self.checkpoint.1.id.ino)
    }

    /// The checkpoint file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where its external data file is (beside the given name, or beside a link's target).
    pub fn external_path(&self) -> &Path {
        &self.external_path
    }

    /// Indexes the checkpoint without reading it whole (only the blocks its structure lies in:
    /// `paged.rs`) and checks its external ranges against the external file's size.
    pub fn index(&self) -> Result<CheckpointIndex, Error> {
        let index = index_file(&self.checkpoint.0, self.checkpoint.1.size, &self.path)?;
        if index.has_external_data {
            match &self.external {
                Some((_, stamp)) => check_external_ranges(&index, stamp.size)?,
                None => {
                    return Err(Error::ExternalDataMissing {
                        detail: "its external data file is missing".into(),
                    })
                }
            }
        }
        Ok(index)
    }
}

impl HeldFiles {
    /// Whether both files are still the versions that were checked (size and modification
    /// time): asked after a round's last read, so that values read from a file changed in place
    /// during the round never reach its result.
    pub fn confirm_unchanged(&self) -> Result<(), Error> {
        let files = std::iter::once(&self.checkpoint).chain(self.external.as_ref());
        for (file, stamp) in files {
            let now =
                FileStamp::of(&file.metadata().map_err(|e| Error::io(&self.path, "read metadata of", e))?);
            if now != *stamp {
                return Err(changed(&self.path, "after it was checked, while the round was reading it"));
            }
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
