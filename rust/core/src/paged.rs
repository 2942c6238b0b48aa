//! Indexing a checkpoint without reading it whole: the parser's reads are served from a private
//! buffer the size of the input that is filled block by block from a [`BlockSource`] (a file
//! read with `pread`, or a binding's source such as range requests to an object store) as the
//! parser first reaches each block ([`Fill`]). The structure of a checkpoint is a small part of
//! it (tables, names, dims, length prefixes), so a large upload is indexed after reading a few
//! blocks, and its values can then be streamed through a small buffer that stays in cache
//! (`aggregate/stream.rs`), or filled tensor by tensor when first used ([`PagedBytes`] as the
//! bytes of a [`crate::LoadedCheckpoint`]) instead of being copied whole into memory first.
//!
//! The buffer is an anonymous mapping (never the file's: a truncation by another program cannot
//! raise SIGBUS); pages never filled are never touched, so they cost no memory. A source that is
//! shorter than its size said (truncated while indexed) fails the index as a changed file.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use memmap2::MmapMut;

use crate::input::{Fill, Input};
use crate::reader::{index_input, LengthCheck};
use crate::{CheckpointIndex, Error, Result};

/// Bytes read at a time from a file: a checkpoint's metadata is usually one or two blocks, and
/// each tensor's length prefix one more when tensors' values lie between their tables.
const BLOCK: usize = 16 << 10;

/// Where a paged input's bytes come from: "fill this byte range".
pub trait BlockSource: Send + Sync {
    /// Fills all of `buf` with the bytes at `offset`. A source shorter than that fails with
    /// [`std::io::ErrorKind::UnexpectedEof`] (a changed input); any other failure with its error.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
}

impl BlockSource for &File {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.read_exact_at(buf, offset)
    }
}

/// An input's bytes filled into private memory on demand, in blocks, from a [`BlockSource`].
/// Runs of unfilled blocks a read needs are fetched with one call of the source.
pub struct PagedBytes<S> {
    source: S,
    /// The input's name in errors (a path or a URL).
    name: PathBuf,
    /// Owns the memory `base` points into (`None` for an empty input).
    _map: Option<MmapMut>,
    base: *mut u8,
    len: usize,
    block: usize,
    /// One flag per block: filled already. Held while a block is being filled, so that no two
    /// threads fill one block and nobody writes into a block that is read.
    filled: Mutex<Vec<bool>>,
    /// Bytes fetched from the source so far.
    fetched: AtomicU64,
    /// The first failed fill while indexing (the parser sees only "not there").
    failure: Mutex<Option<std::io::Error>>,
}

// SAFETY: `base` points into `_map`, owned by `self`; it is written only inside `fill_range`,
// into blocks not yet filled, while the `filled` lock is held, and blocks are read (by `Input` or
// through `CheckpointBytes::raw`) only after they were filled. `S` is `Send + Sync`.
unsafe impl<S: Send + Sync> Send for PagedBytes<S> {}
// SAFETY: as for `Send`: every write happens under the `filled` lock, into blocks nobody reads.
unsafe impl<S: Send + Sync> Sync for PagedBytes<S> {}

impl<S: BlockSource> PagedBytes<S> {
    /// `len` bytes of `source` (named `name` in errors), fetched `block` bytes at a time (at
    /// least 1) when first needed. Nothing is fetched here.
    pub fn new(source: S, len: u64, block: usize, name: impl Into<PathBuf>) -> Result<PagedBytes<S>> {
        let name = name.into();
        let Ok(len) = usize::try_from(len) else {
            return Err(Error::io(&name, "read", std::io::ErrorKind::OutOfMemory.into()));
        };
        // Small pages on purpose (no huge-page advice, unlike `mapped::anonymous`): a block
        // read into a huge page would have the kernel clear 2 MiB for 16 KiB of structure.
        let mut map = if len == 0 {
            None
        } else {
            Some(
                memmap2::MmapOptions::new()
                    .len(len)
                    .map_anon()
                    .map_err(|e| Error::io(&name, "allocate memory for", e))?,
            )
        };
        let base = map.as_mut().map_or(std::ptr::NonNull::dangling().as_ptr(), |m| m.as_mut_ptr());
        let block = block.max(1);
        Ok(PagedBytes {
            source,
            name,
            _map: map,
            base,
            len,
            block,
            filled: Mutex::new(vec![false; len.div_ceil(block)]),
            fetched: AtomicU64::new(0),
            failure: Mutex::new(None),
        })
    }

    /// The source the bytes come from.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The input's size.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the input is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes' address and length: a range holds the input's bytes once filled.
    pub fn raw(&self) -> (*const u8, usize) {
        (self.base.cast_const(), self.len)
    }

    /// Bytes fetched at a time (a run of blocks in one call of the source).
    pub fn block(&self) -> usize {
        self.block
    }

    /// Bytes fetched from the source so far.
    pub fn fetched(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }

    /// Makes `pos..pos + n` hold the input's bytes, fetching each run of unfilled blocks it
    /// covers with one call of the source. A range outside the input is an error.
    pub fn fill_range(&self, pos: usize, n: usize) -> std::io::Result<()> {
        if pos.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("bytes {pos}+{n} lie outside the {}-byte input", self.len),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let mut filled = self.filled.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let first = pos / self.block;
        let end = (pos + n).div_ceil(self.block).min(filled.len());
        let mut block = first;
        while block < end {
            if filled.get(block).copied().unwrap_or(true) {
                block += 1;
                continue;
            }
            let run_end = (block..end).find(|&b| filled.get(b).copied().unwrap_or(true)).unwrap_or(end);
            self.read_blocks(block, run_end)?;
            for flag in filled.get_mut(block..run_end).unwrap_or_default() {
                *flag = true;
            }
            block = run_end;
        }
        Ok(())
    }

    /// Reads blocks `first..end` (all unfilled; the caller holds the `filled` lock) with one call
    /// of the source.
    fn read_blocks(&self, first: usize, end: usize) -> std::io::Result<()> {
        let start = first * self.block;
        let stop = (end * self.block).min(self.len);
        if start >= stop {
            return Ok(());
        }
        // SAFETY: start < stop <= len, and the mapping holds `len` bytes owned by `self`. Nobody
        // reads these blocks while they are unfilled, and the caller's lock keeps other fills out.
        let space = unsafe { std::slice::from_raw_parts_mut(self.base.add(start), stop - start) };
        let result = self.source.read_at(start as u64, space);
        self.fetched.fetch_add((stop - start) as u64, Ordering::Relaxed);
        result
    }

    /// The core's error for a failed fill of these bytes: a source shorter than its size said is
    /// [`Error::CheckpointChanged`].
    pub fn error(&self, e: std::io::Error) -> Error {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::CheckpointChanged {
                path: self.name.clone(),
                detail: "became shorter while it was being read".into(),
            }
        } else {
            Error::io(&self.name, "read", e)
        }
    }

    /// Indexes the checkpoint these bytes hold, filling only the blocks its structure lies in.
    /// Every length is compared while indexing ([`LengthCheck::WhenIndexing`]: a block per
    /// tensor when tensors' length prefixes lie beside their values), or, with
    /// [`LengthCheck::OnFirstUse`], when [`crate::LoadedCheckpoint::prepare`] fetches the tensor.
    pub fn index(&self, lengths: LengthCheck) -> Result<CheckpointIndex> {
        // SAFETY: `self` owns `len` bytes at `base`, alive for the whole parse; it writes into
        // them only inside `fill`, which `Input` calls before reading a range.
        let input = unsafe { Input::paged(self.base, self.len, self) };
        let indexed = index_input(input, lengths);
        let failure = self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        match failure {
            None => indexed,
            Some(e) => Err(self.error(e)),
        }
    }
}

impl<S: BlockSource> Fill for PagedBytes<S> {
    fn fill(&self, pos: usize, n: usize) -> bool {
        let mut failure = self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if failure.is_some() {
            return false;
        }
        match self.fill_range(pos, n) {
            Ok(()) => true,
            // a read outside the input fails as one outside an unpaged input: no failure kept
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => false,
            Err(e) => {
                *failure = Some(e);
                false
            }
        }
    }
}

/// Indexes the checkpoint in `file` (of `size` bytes, from its `fstat`), reading only the blocks
/// its structure lies in; `path` names it in errors. A file found shorter than `size` while
/// indexed is [`Error::CheckpointChanged`].
pub(crate) fn index_file(file: &File, size: u64, path: &Path) -> Result<CheckpointIndex> {
    index_counting(file, size, path).0
}

/// [`index_file`], and how many bytes it read.
fn index_counting(file: &File, size: u64, path: &Path) -> (Result<CheckpointIndex>, usize) {
    match PagedBytes::new(file, size, BLOCK, path) {
        Ok(paged) => {
            (paged.index(LengthCheck::WhenIndexing), usize::try_from(paged.fetched()).unwrap_or(usize::MAX))
        }
        Err(e) => (Err(e), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::oracle::same_result;
    use crate::test_support::{checkpoint_files, ort_corpus_dir, test_data_dir};

    fn paged(bytes: &[u8], size: u64) -> (Result<CheckpointIndex>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ckpt");
        std::fs::write(&path, bytes).unwrap();
        index_counting(&File::open(&path).unwrap(), size, &path)
    }

    /// ORT's files (tables between the values) and ours (metadata first): the same index, and
    /// the same error for every cut of every file.
    #[test]
    fn a_paged_index_equals_the_index_of_the_whole_file() {
        let files = [checkpoint_files(&test_data_dir()), checkpoint_files(&ort_corpus_dir())].concat();
        assert!(files.len() >= 10, "{files:?}");
        for file in files {
            let bytes = std::fs::read(&file).unwrap();
            let (index, _) = paged(&bytes, bytes.len() as u64);
            assert!(same_result(&index, &crate::index_checkpoint(&bytes)), "{}", file.display());
            for cut in (0..bytes.len()).step_by(bytes.len() / 37 + 1) {
                let (index, _) = paged(&bytes[..cut], cut as u64);
                assert!(
                    same_result(&index, &crate::index_checkpoint(&bytes[..cut])),
                    "{} {cut}",
                    file.display()
                );
            }
        }
    }

    /// Random changes of a few bytes (structure and values alike): the same index or the same
    /// error as the whole file gives.
    #[test]
    fn a_paged_index_of_changed_bytes_equals_the_index_of_the_whole_file() {
        let mut rng = crate::test_support::Rng(0x9e37_79b9_7f4a_7c15);
        for file in checkpoint_files(&test_data_dir()) {
            let bytes = std::fs::read(&file).unwrap();
            for _ in 0..60 {
                let mut changed = bytes.clone();
                for _ in 0..1 + rng.next_u64() % 4 {
                    let at = (rng.next_u64() % changed.len() as u64) as usize;
                    changed[at] = rng.next_u64() as u8;
                }
                let (index, _) = paged(&changed, changed.len() as u64);
                assert!(same_result(&index, &crate::index_checkpoint(&changed)), "{}", file.display());
            }
        }
    }

    /// A large checkpoint as ortckpt writes it: a few blocks read, not the file.
    #[test]
    fn only_the_structure_is_read() {
        let values: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 1 << 20]).collect();
        let tensors: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(i, v)| crate::test_support::u8_tensor(&format!("t{i}"), v))
            .collect();
        let spec = crate::CheckpointSpec { trainable: tensors, ..Default::default() };
        let bytes = crate::serialize_checkpoint(&spec).unwrap();
        let (index, read) = paged(&bytes, bytes.len() as u64);
        assert_eq!(index.unwrap().tensors.len(), 8);
        assert!(read <= 9 * BLOCK, "{read} of {} bytes read", bytes.len());
    }

    /// A source in memory that counts its reads and can be made to fail.
    struct Memory {
        bytes: Vec<u8>,
        calls: std::sync::atomic::AtomicUsize,
        fail_after: usize,
    }

    impl BlockSource for Memory {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
            if self.calls.fetch_add(1, Ordering::Relaxed) >= self.fail_after {
                return Err(std::io::Error::other("the server went away"));
            }
            let start = offset as usize;
            match self.bytes.get(start..start + buf.len()) {
                Some(part) => {
                    buf.copy_from_slice(part);
                    Ok(())
                }
                None => Err(std::io::ErrorKind::UnexpectedEof.into()),
            }
        }
    }

    fn large() -> (Vec<u8>, Vec<Vec<u8>>) {
        let values: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 1 << 20]).collect();
        let tensors: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(i, v)| crate::test_support::u8_tensor(&format!("t{i}"), v))
            .collect();
        let spec = crate::CheckpointSpec { trainable: tensors, ..Default::default() };
        (crate::serialize_checkpoint(&spec).unwrap(), values)
    }

    type PagedMemory = std::sync::Arc<PagedBytes<Memory>>;

    /// [`large`] behind a paged input over memory (64 KiB blocks), loaded: nothing fetched but
    /// the structure.
    fn paged_large() -> (PagedMemory, crate::LoadedCheckpoint<PagedMemory>, Vec<Vec<u8>>) {
        let (bytes, values) = large();
        let len = bytes.len() as u64;
        let source = Memory { bytes, calls: 0.into(), fail_after: usize::MAX };
        let paged = std::sync::Arc::new(PagedBytes::new(source, len, 64 << 10, "mem://a.ckpt").unwrap());
        let loaded = crate::LoadedCheckpoint::paged(paged.clone(), None, None).unwrap();
        (paged, loaded, values)
    }

    /// Any source feeds the paged input; each tensor's bytes are fetched by `prepare`, once.
    #[test]
    fn a_paged_checkpoint_fetches_each_tensor_on_first_use() {
        use crate::CheckpointBytes;
        let (paged, loaded, values) = paged_large();
        let len = paged.len() as u64;
        let structure = paged.fetched();
        assert!(structure <= 2 * (64 << 10), "{structure}");
        let position = (0..8).find(|&p| loaded.index().tensor(p).unwrap().name == "t5").unwrap();
        loaded.prepare(position).unwrap();
        let v = loaded.values(position).unwrap();
        // SAFETY: `prepare` filled the range, which lies inside `paged`, alive here.
        assert_eq!(unsafe { std::slice::from_raw_parts(v.data, v.len) }, values[5].as_slice());
        let after = paged.fetched();
        assert!(after <= structure + (1 << 20) + 2 * (64 << 10), "{after}");
        let calls = paged.source().calls.load(Ordering::Relaxed);
        loaded.prepare(position).unwrap();
        assert_eq!(paged.source().calls.load(Ordering::Relaxed), calls, "fetched twice");
        assert_eq!(CheckpointBytes::raw(&paged).1, len as usize);
    }

    /// Every parameter at once: neighbouring tensors fetched in one call of the source.
    #[test]
    fn prepare_parameters_fetches_neighbours_together() {
        let (paged, loaded, values) = paged_large();
        let before = paged.source().calls.load(Ordering::Relaxed);
        loaded.prepare_parameters().unwrap();
        assert!(paged.source().calls.load(Ordering::Relaxed) - before <= 2);
        for position in 0..8 {
            let v = loaded.values(position).unwrap();
            let name = loaded.index().tensor(position).unwrap().name;
            let i: usize = name[1..].parse().unwrap();
            // SAFETY: `prepare_parameters` filled the range, which lies inside `paged`, alive here.
            assert_eq!(unsafe { std::slice::from_raw_parts(v.data, v.len) }, values[i].as_slice());
        }
    }

    /// A failing source gives an error (the index's, or the tensor's first use), never a panic;
    /// a short one is a changed input.
    #[test]
    fn a_failing_or_short_source_is_an_error() {
        use crate::LoadedCheckpoint;
        let (bytes, _) = large();
        let len = bytes.len() as u64;
        let failing = Memory { bytes: bytes.clone(), calls: 0.into(), fail_after: 0 };
        let paged = std::sync::Arc::new(PagedBytes::new(failing, len, 4096, "mem://a.ckpt").unwrap());
        let err = LoadedCheckpoint::paged(paged, None, None).err().unwrap();
        assert!(
            matches!(&err, Error::Io { source, .. } if source.to_string() == "the server went away"),
            "{err:?}"
        );
        let later = Memory { bytes: bytes.clone(), calls: 0.into(), fail_after: 3 };
        let paged = std::sync::Arc::new(PagedBytes::new(later, len, 1 << 20, "mem://a.ckpt").unwrap());
        let loaded = LoadedCheckpoint::paged(paged, None, None).unwrap();
        assert!((0..8).any(|p| loaded.prepare(p).is_err()));
        let short =
            Memory { bytes: bytes[..bytes.len() / 2].to_vec(), calls: 0.into(), fail_after: usize::MAX };
        let paged = std::sync::Arc::new(PagedBytes::new(short, len, 4096, "mem://a.ckpt").unwrap());
        let loaded = LoadedCheckpoint::paged(paged, None, None).unwrap();
        let err = (0..8).find_map(|p| loaded.prepare(p).err()).unwrap();
        assert!(matches!(err, Error::CheckpointChanged { .. }), "{err:?}");
    }

    /// The file is shorter than its size said (truncated after its `fstat`): a changed file.
    #[test]
    fn a_file_truncated_while_indexed_is_a_changed_file() {
        let bytes = std::fs::read(test_data_dir().join("mlp_adamw_with_optimizer.ckpt")).unwrap();
        let (index, _) = paged(&bytes[..bytes.len() / 2], bytes.len() as u64);
        assert!(matches!(index, Err(Error::CheckpointChanged { .. })), "{index:?}");
    }
}
