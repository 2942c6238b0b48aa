//! Indexing a checkpoint file without reading it whole: the parser's reads are served from a
//! private buffer the size of the file that is filled block by block, with `pread`, as the
//! parser first reaches each block ([`Fill`]). The structure of a checkpoint is a small part of
//! it (tables, names, dims, length prefixes), so a large upload is indexed after reading a few
//! blocks, and its values can then be streamed through a small buffer that stays in cache
//! (`aggregate/stream.rs`) instead of being copied whole into memory first.
//!
//! The buffer is an anonymous mapping (never the file's: a truncation by another program cannot
//! raise SIGBUS); pages never filled are never touched, so they cost no memory. A file that is
//! shorter than its size said (truncated while indexed) fails the index as a changed file.

use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use memmap2::MmapMut;

use crate::input::{Fill, Input};
use crate::reader::index_input;
use crate::{CheckpointIndex, Error, Result};

/// Bytes read at a time: a checkpoint's metadata is usually one or two blocks, and each tensor's
/// length prefix one more when tensors' values lie between their tables.
const BLOCK: usize = 16 << 10;

/// A file's bytes filled into private memory on demand.
struct Pager<'f> {
    file: &'f File,
    /// Owns the memory `base` points into (`None` for an empty file).
    _map: Option<MmapMut>,
    base: *mut u8,
    len: usize,
    /// One flag per block: filled already.
    filled: RefCell<Vec<bool>>,
    /// The first failed read: the file is shorter than its size said, or unreadable.
    failure: RefCell<Option<std::io::Error>>,
}

impl<'f> Pager<'f> {
    fn new(file: &'f File, len: usize) -> std::io::Result<Pager<'f>> {
        // Small pages on purpose (no huge-page advice, unlike `mapped::anonymous`): a block
        // read into a huge page would have the kernel clear 2 MiB for 16 KiB of structure.
        let mut map = if len == 0 { None } else { Some(memmap2::MmapOptions::new().len(len).map_anon()?) };
        let base = map.as_mut().map_or(std::ptr::NonNull::dangling().as_ptr(), |m| m.as_mut_ptr());
        let blocks = len.div_ceil(BLOCK);
        Ok(Pager {
            file,
            _map: map,
            base,
            len,
            filled: RefCell::new(vec![false; blocks]),
            failure: RefCell::new(None),
        })
    }

    /// Reads blocks `first..end` (all unfilled) with one `pread`.
    fn read_blocks(&self, first: usize, end: usize) -> std::io::Result<()> {
        let start = first * BLOCK;
        let stop = (end * BLOCK).min(self.len);
        if start >= stop {
            return Ok(());
        }
        // SAFETY: start < stop <= len, and the mapping holds `len` bytes owned by `self`. No
        // reference into it outlives a read: `Input` copies values out with volatile loads, and
        // it reads only blocks already filled, never this range while it is being written.
        let space = unsafe { std::slice::from_raw_parts_mut(self.base.add(start), stop - start) };
        self.file.read_exact_at(space, start as u64)
    }
}

impl Fill for Pager<'_> {
    fn fill(&self, pos: usize, n: usize) -> bool {
        if self.failure.borrow().is_some() {
            return false;
        }
        let Ok(mut filled) = self.filled.try_borrow_mut() else { return false };
        let first = pos / BLOCK;
        let end = pos.saturating_add(n).div_ceil(BLOCK).min(filled.len());
        let mut block = first;
        while block < end {
            if filled.get(block).copied().unwrap_or(true) {
                block += 1;
                continue;
            }
            let run_end = (block..end).find(|&b| filled.get(b).copied().unwrap_or(true)).unwrap_or(end);
            if let Err(e) = self.read_blocks(block, run_end) {
                *self.failure.borrow_mut() = Some(e);
                return false;
            }
            for flag in filled.get_mut(block..run_end).unwrap_or_default() {
                *flag = true;
            }
            block = run_end;
        }
        true
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
    let Ok(len) = usize::try_from(size) else {
        return (Err(Error::io(path, "read", std::io::ErrorKind::OutOfMemory.into())), 0);
    };
    let pager = match Pager::new(file, len) {
        Ok(pager) => pager,
        Err(e) => return (Err(Error::io(path, "allocate memory for", e)), 0),
    };
    // SAFETY: `pager` owns `len` bytes at `base`, alive until it is dropped after the parse; it
    // writes into them only inside `fill`, which `Input` calls before reading a range.
    let input = unsafe { Input::paged(pager.base, pager.len, &pager) };
    let indexed = index_input(input);
    let blocks = pager.filled.borrow().iter().filter(|&&f| f).count();
    let read = (blocks * BLOCK).min(len);
    let outcome = match pager.failure.into_inner() {
        None => indexed,
        Some(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(Error::CheckpointChanged {
            path: path.to_path_buf(),
            detail: "became shorter while it was being read".into(),
        }),
        Some(e) => Err(Error::io(path, "read", e)),
    };
    (outcome, read)
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

    /// The file is shorter than its size said (truncated after its `fstat`): a changed file.
    #[test]
    fn a_file_truncated_while_indexed_is_a_changed_file() {
        let bytes = std::fs::read(test_data_dir().join("mlp_adamw_with_optimizer.ckpt")).unwrap();
        let (index, _) = paged(&bytes[..bytes.len() / 2], bytes.len() as u64);
        assert!(matches!(index, Err(Error::CheckpointChanged { .. })), "{index:?}");
    }
}
