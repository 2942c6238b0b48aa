//! A checkpoint loaded for use: its index together with the bytes the index's ranges point into,
//! and every decision about using those bytes — how strictly to verify them (lengths compared
//! while indexing, or on first use for a mapped file), the external data file's presence and
//! ranges, the checks before a tensor's bytes are first used (file unchanged since it was opened,
//! stored length), readahead, and where each tensor's values lie. Bindings only convert types.

#[cfg(feature = "fs")]
use std::path::Path;

use crate::index::{CheckpointIndex, Storage};
#[cfg(feature = "fs")]
use crate::open::{open_checkpoint, OpenMode};
use crate::reader::{index_checkpoint_raw, LengthCheck};
#[cfg(feature = "fs")]
use crate::MappedFile;
use crate::{check_external_ranges, Error, Result};

/// Bytes a [`LoadedCheckpoint`] points into: a [`MappedFile`], or memory nobody can change while
/// it lives (a binding's immutable buffer, a byte slice).
pub trait CheckpointBytes {
    /// The bytes' address and length, valid for as long as `self` lives. The contents may change
    /// meanwhile only when they are a mapped file ([`CheckpointBytes::file`]).
    fn raw(&self) -> (*const u8, usize);

    /// The file the bytes are, when they are one: its changes are looked for before each first use.
    /// Memory by default: nobody changes it while it is read.
    #[cfg(feature = "fs")]
    fn file(&self) -> Option<&MappedFile> {
        None
    }

    /// Makes `offset..offset + len` hold the bytes it stands for, before they are used: a paged
    /// input ([`crate::PagedBytes`]) fetches them from its source. Nothing to do by default.
    fn fill(&self, offset: usize, len: usize) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// [`CheckpointBytes::fill`] for many `(offset, len)` ranges at once: a paged input fetches
    /// neighbouring ranges together. One by one by default.
    fn fill_all(&self, ranges: &mut [(usize, usize)]) -> Result<()> {
        ranges.iter().try_for_each(|&(offset, len)| self.fill(offset, len))
    }
}

#[cfg(feature = "fs")]
impl CheckpointBytes for MappedFile {
    fn raw(&self) -> (*const u8, usize) {
        let bytes = self.bytes();
        (bytes.as_ptr(), bytes.len())
    }

    fn file(&self) -> Option<&MappedFile> {
        Some(self)
    }
}

impl CheckpointBytes for &[u8] {
    fn raw(&self) -> (*const u8, usize) {
        (self.as_ptr(), self.len())
    }
}

#[cfg(feature = "fs")]
impl<S: crate::BlockSource> CheckpointBytes for std::sync::Arc<crate::PagedBytes<S>> {
    fn raw(&self) -> (*const u8, usize) {
        crate::PagedBytes::raw(self)
    }

    fn fill(&self, offset: usize, len: usize) -> Result<()> {
        self.fill_range(offset, len).map_err(|e| self.error(e))
    }

    /// Ranges at most a block apart are fetched as one (a run of unfilled blocks is one read).
    fn fill_all(&self, ranges: &mut [(usize, usize)]) -> Result<()> {
        ranges.sort_unstable();
        let mut run: Option<(usize, usize)> = None;
        for &(offset, len) in ranges.iter() {
            let end = offset.saturating_add(len);
            run = match run {
                Some((start, stop)) if offset <= stop.saturating_add(self.block()) => {
                    Some((start, stop.max(end)))
                }
                Some((start, stop)) => {
                    self.fill(start, stop - start)?;
                    Some((offset, end))
                }
                None => Some((offset, end)),
            };
        }
        match run {
            Some((start, stop)) => self.fill(start, stop - start),
            None => Ok(()),
        }
    }
}

/// Fills an inline tensor's values, and its length prefix (the 4 bytes before them) when its
/// length is still to be compared.
fn fill_inline<B: CheckpointBytes>(bytes: &B, offset: usize, len: usize, length_checked: bool) -> Result<()> {
    let prefix = if length_checked { 0 } else { offset.min(4) };
    bytes.fill(offset - prefix, len.saturating_add(prefix))
}

/// Where a tensor's values are: `len` bytes at `data`, inside `owner`'s bytes.
#[derive(Debug)]
pub struct Values<'a, B> {
    /// The buffer holding them (keeps them alive).
    pub owner: &'a B,
    /// Address of the first byte.
    pub data: *const u8,
    /// Number of bytes: the shape's element count times the element size.
    pub len: usize,
}

/// A verified checkpoint: its index and the bytes its ranges point into.
pub struct LoadedCheckpoint<B> {
    index: CheckpointIndex,
    checkpoint: B,
    external: Option<B>,
}

#[cfg(feature = "fs")]
impl<S: crate::BlockSource> LoadedCheckpoint<std::sync::Arc<crate::PagedBytes<S>>> {
    /// A checkpoint read on demand ([`crate::PagedBytes`]): its structure is indexed through the
    /// paged input (only the blocks it lies in are fetched, every length compared), and each
    /// tensor's values are fetched by [`LoadedCheckpoint::prepare`] before their first use.
    /// `external` is the external data file's bytes, paged the same way (named `external_name`
    /// in the error when it is needed and missing).
    pub fn paged(
        checkpoint: std::sync::Arc<crate::PagedBytes<S>>,
        external: Option<std::sync::Arc<crate::PagedBytes<S>>>,
        external_name: Option<&str>,
    ) -> Result<Self> {
        // Lengths on first use: a tensor's length prefix lies beside its values, and fetching a
        // block per tensor to index would fetch much of a large checkpoint.
        let index = checkpoint.index(LengthCheck::OnFirstUse)?;
        LoadedCheckpoint::checked(index, checkpoint, external, external_name)
    }
}

#[cfg(feature = "fs")]
impl LoadedCheckpoint<MappedFile> {
    /// Opens `path` and its external data file as one pair ([`open_checkpoint`], refused past
    /// `limit` bytes in all) and verifies them ([`LoadedCheckpoint::new`]). `keep_going` is asked
    /// between chunks and attempts (false stops with [`Error::Interrupted`]).
    pub fn open(
        path: &Path,
        mode: OpenMode,
        limit: Option<u64>,
        keep_going: &mut dyn FnMut() -> bool,
    ) -> Result<Self> {
        let opened = open_checkpoint(path, mode, limit, keep_going)?;
        let external_name = opened.external_path.display().to_string();
        LoadedCheckpoint::new(opened.checkpoint, opened.external, Some(&external_name))
    }
}

impl<B: CheckpointBytes> LoadedCheckpoint<B> {
    /// Verifies `checkpoint` as a checkpoint and, when it has external data, every external range
    /// against `external` (named `external_name` in the error when it is missing; `None` means the
    /// bytes were given in memory). The lengths of a mapped file's inline tensors sit beside their
    /// values, one page per tensor: they are compared on first use ([`LoadedCheckpoint::prepare`])
    /// so that loading reads the structure alone; every other input is compared while indexing.
    pub fn new(checkpoint: B, external: Option<B>, external_name: Option<&str>) -> Result<Self> {
        #[cfg(feature = "fs")]
        let mapped = checkpoint.file().is_some_and(MappedFile::is_mapped);
        // Without the file layer every input is memory nobody changes: compare lengths now.
        #[cfg(not(feature = "fs"))]
        let mapped = false;
        let lengths = if mapped { LengthCheck::OnFirstUse } else { LengthCheck::WhenIndexing };
        let (base, len) = checkpoint.raw();
        // SAFETY: `checkpoint` keeps its bytes readable while it lives, which outlasts this call;
        // a mapped file's contents may change meanwhile, which the raw reader allows.
        let index = unsafe { index_checkpoint_raw(base, len, lengths) }?;
        LoadedCheckpoint::checked(index, checkpoint, external, external_name)
    }

    /// A checkpoint `index` (indexed from `checkpoint` by the caller), with its external ranges
    /// checked against `external`.
    fn checked(
        index: CheckpointIndex,
        checkpoint: B,
        external: Option<B>,
        external_name: Option<&str>,
    ) -> Result<Self> {
        if index.has_external_data {
            match &external {
                Some(bytes) => check_external_ranges(&index, bytes.raw().1 as u64)?,
                None => {
                    let detail = match external_name {
                        Some(name) => format!("its external data file {name} is missing"),
                        None => "no external data was given (pass external_data=)".to_owned(),
                    };
                    return Err(Error::ExternalDataMissing { detail });
                }
            }
        }
        Ok(LoadedCheckpoint { index, checkpoint, external })
    }

    /// A checkpoint the core indexed from another format (an ORT 1.15 folder) over `values`, the
    /// buffer its inline ranges point into. Each range is checked against the buffer once more,
    /// so that no index handed out can point past its bytes.
    pub fn from_index(index: CheckpointIndex, values: B) -> Result<Self> {
        let len = values.raw().1;
        for tensor in index.tensors() {
            if let Storage::Inline { offset, len: n, .. } = tensor.storage {
                if offset.checked_add(n).is_none_or(|end| end > len) {
                    return Err(Error::Internal {
                        detail: format!(
                            "tensor {:?}: values at {offset}+{n} lie outside the {len}-byte buffer",
                            tensor.name
                        ),
                    });
                }
            }
        }
        Ok(LoadedCheckpoint { index, checkpoint: values, external: None })
    }

    /// The checkpoint's index.
    pub fn index(&self) -> &CheckpointIndex {
        &self.index
    }

    /// The checkpoint's bytes.
    pub fn checkpoint(&self) -> &B {
        &self.checkpoint
    }

    /// The external data file's bytes, when they were given.
    pub fn external(&self) -> Option<&B> {
        self.external.as_ref()
    }

    /// The same checkpoint over other holders of the same bytes (a binding's handles); `f` must
    /// return a holder of the very bytes it is given.
    pub fn map_bytes<C, E>(self, mut f: impl FnMut(B) -> Result<C, E>) -> Result<LoadedCheckpoint<C>, E> {
        let checkpoint = f(self.checkpoint)?;
        let external = self.external.map(f).transpose()?;
        Ok(LoadedCheckpoint { index: self.index, checkpoint, external })
    }

    /// Call before the values of the tensor at `position` are used for the first time: fails with
    /// [`Error::CheckpointChanged`] when its file was modified on disk since it was opened,
    /// compares its stored length when indexing left that for first use, and gives a long range of
    /// a mapped file normal readahead. A no-op for strings, nominal tensors and bad positions.
    pub fn prepare(&self, position: usize) -> Result<()> {
        let Some(tensor) = self.index.tensor(position) else { return Ok(()) };
        match tensor.storage {
            #[cfg_attr(not(feature = "fs"), allow(unused_variables))] // readahead needs the file layer
            Storage::Inline { offset, len, length_checked } => {
                fill_inline(&self.checkpoint, offset, len, length_checked)?;
                #[cfg(feature = "fs")]
                if let Some(file) = self.checkpoint.file() {
                    file.prepare(offset, len)?;
                }
                if !length_checked {
                    self.check_lengths(position..position + 1)?;
                }
            }
            #[cfg(feature = "fs")]
            Storage::External { offset, len } => {
                if let (Some(bytes), Ok(at), Ok(n)) =
                    (&self.external, usize::try_from(offset), usize::try_from(len))
                {
                    bytes.fill(at, n)?;
                }
                if let Some(file) = self.external.as_ref().and_then(CheckpointBytes::file) {
                    // A range past usize gets no readahead (advice only); the file check still runs.
                    let (offset, len) = (usize::try_from(offset), usize::try_from(len));
                    file.prepare(offset.unwrap_or(usize::MAX), len.unwrap_or(0))?;
                }
            }
            #[cfg(not(feature = "fs"))]
            Storage::External { offset, len } => {
                if let (Some(bytes), Ok(at), Ok(n)) =
                    (&self.external, usize::try_from(offset), usize::try_from(len))
                {
                    bytes.fill(at, n)?;
                }
            }
            Storage::Strings(_) | Storage::Nominal => {}
        }
        Ok(())
    }

    /// [`LoadedCheckpoint::prepare`] for every parameter at once: one check of each file, normal
    /// readahead over each, every length left for first use compared.
    pub fn prepare_parameters(&self) -> Result<()> {
        self.prepare_tensors(0..self.index.parameter_count())
    }

    /// [`LoadedCheckpoint::prepare`] for every optimizer momentum at once (the tensors after the
    /// parameters), as [`LoadedCheckpoint::prepare_parameters`] does for the parameters.
    pub fn prepare_momentums(&self) -> Result<()> {
        self.prepare_tensors(self.index.parameter_count()..self.index.tensor_count())
    }

    /// [`LoadedCheckpoint::prepare`] for the tensors at `positions`, each file checked once.
    fn prepare_tensors(&self, positions: std::ops::Range<usize>) -> Result<()> {
        #[cfg(feature = "fs")]
        for bytes in std::iter::once(&self.checkpoint).chain(self.external.as_ref()) {
            if let Some(file) = bytes.file() {
                file.prepare(0, file.bytes().len())?;
            }
        }
        // Every parameter's range, each buffer's in one call: a paged input fetches them together.
        let (mut inline, mut external) = (Vec::new(), Vec::new());
        for tensor in self.index.tensors().skip(positions.start).take(positions.len()) {
            match tensor.storage {
                Storage::Inline { offset, len, length_checked } => {
                    let prefix = if length_checked { 0 } else { offset.min(4) };
                    inline.push((offset - prefix, len.saturating_add(prefix)));
                }
                Storage::External { offset, len } => {
                    if let (Ok(at), Ok(n)) = (usize::try_from(offset), usize::try_from(len)) {
                        external.push((at, n));
                    }
                }
                Storage::Strings(_) | Storage::Nominal => {}
            }
        }
        self.checkpoint.fill_all(&mut inline)?;
        if let Some(bytes) = &self.external {
            bytes.fill_all(&mut external)?;
        }
        self.check_lengths(positions)
    }

    /// Compares the stored lengths that indexing left for first use, for `positions`.
    fn check_lengths(&self, positions: std::ops::Range<usize>) -> Result<()> {
        let (base, len) = self.checkpoint.raw();
        positions.into_iter().try_for_each(|position| {
            // SAFETY: `self.checkpoint` keeps its bytes readable for the whole call; a mapped
            // file's contents may change (another program), which the raw comparison allows.
            unsafe { self.index.check_inline_length_raw(position, base, len) }
        })
    }

    /// Where the values of the tensor at `position` lie, when they are bytes in one of the buffers
    /// (`None` for strings, nominal tensors and bad positions). Call
    /// [`LoadedCheckpoint::prepare`] (or `prepare_parameters`) before reading them.
    pub fn values(&self, position: usize) -> Option<Values<'_, B>> {
        self.locate(self.index.tensor(position)?.storage)
    }

    /// [`LoadedCheckpoint::values`] of a tensor already looked up (`storage` from this index).
    pub fn locate(&self, storage: Storage<'_>) -> Option<Values<'_, B>> {
        let (owner, offset, len) = match storage {
            Storage::Inline { offset, len, .. } => (&self.checkpoint, offset, len),
            Storage::External { offset, len } => {
                (self.external.as_ref()?, usize::try_from(offset).ok()?, usize::try_from(len).ok()?)
            }
            Storage::Strings(_) | Storage::Nominal => return None,
        };
        let (base, size) = owner.raw();
        if offset.checked_add(len)? > size {
            return None;
        }
        // SAFETY: `offset + len <= size`: the result points inside the buffer's allocation.
        let data = unsafe { base.add(offset) };
        Some(Values { owner, data, len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::bytes_tensor;
    use crate::{serialize_checkpoint, CheckpointSpec, DataType};

    fn checkpoint(values: &[u8]) -> Vec<u8> {
        let spec = CheckpointSpec {
            trainable: vec![bytes_tensor("w", DataType::Uint8, &[values.len() as i64], values)],
            ..CheckpointSpec::default()
        };
        serialize_checkpoint(&spec).unwrap()
    }

    #[test]
    fn memory_is_checked_while_indexing_and_located() {
        let bytes = checkpoint(&[1, 2, 3]);
        let loaded = LoadedCheckpoint::new(bytes.as_slice(), None, None).unwrap();
        assert!(!loaded.index().has_unchecked_lengths());
        loaded.prepare(0).unwrap();
        loaded.prepare_parameters().unwrap();
        let values = loaded.values(0).unwrap();
        // SAFETY: `values` lies inside `bytes`, which outlives this read.
        assert_eq!(unsafe { std::slice::from_raw_parts(values.data, values.len) }, &[1, 2, 3]);
        assert!(loaded.values(1).is_none());
    }

    #[test]
    fn mapped_files_compare_lengths_on_first_use_and_see_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ckpt");
        let mut bytes = checkpoint(&[9; 64]);
        std::fs::write(&path, &bytes).unwrap();
        let loaded = LoadedCheckpoint::open(&path, OpenMode::Map, None, &mut || true).unwrap();
        assert!(loaded.index().has_unchecked_lengths());
        loaded.prepare(0).unwrap();
        let owned = LoadedCheckpoint::open(&path, OpenMode::Read, None, &mut || true).unwrap();
        assert!(!owned.index().has_unchecked_lengths());

        // A wrong stored length is found on first use of a map.
        let Storage::Inline { offset, .. } = loaded.index().tensor(0).unwrap().storage else { panic!() };
        bytes[offset - 4] = 63;
        std::fs::write(dir.path().join("b.ckpt"), &bytes).unwrap();
        let bad =
            LoadedCheckpoint::open(&dir.path().join("b.ckpt"), OpenMode::Map, None, &mut || true).unwrap();
        assert!(matches!(bad.prepare(0), Err(Error::DataLengthMismatch { .. })));
        assert!(matches!(bad.prepare_parameters(), Err(Error::DataLengthMismatch { .. })));

        // A rewrite in place (size changed) is found before the next first use.
        std::fs::write(&path, checkpoint(&[9; 65])).unwrap();
        assert!(matches!(loaded.prepare(0), Err(Error::CheckpointChanged { .. })));
        owned.prepare(0).unwrap();
    }

    #[test]
    fn missing_external_data_names_what_to_pass() {
        let spec = CheckpointSpec {
            trainable: vec![bytes_tensor("w", DataType::Uint8, &[4096], &[1; 4096])],
            ..CheckpointSpec::default()
        };
        let options = crate::SaveOptions { external_data_threshold: Some(0), external_momentums: false };
        let layout = crate::writer::plan_and_layout(&spec, &options).unwrap();
        let bytes = layout.checkpoint.concat();
        let err = LoadedCheckpoint::new(bytes.as_slice(), None, None).err().unwrap();
        assert!(err.to_string().contains("external_data="), "{err}");
        let err = LoadedCheckpoint::new(bytes.as_slice(), None, Some("x.data")).err().unwrap();
        assert!(err.to_string().contains("x.data"), "{err}");
        let data = layout.external.concat();
        let loaded = LoadedCheckpoint::new(bytes.as_slice(), Some(data.as_slice()), None).unwrap();
        let values = loaded.values(0).unwrap();
        assert_eq!((values.len, values.owner.len()), (4096, data.len()));
        let short = &data[..100];
        assert!(LoadedCheckpoint::new(bytes.as_slice(), Some(short), None).is_err());
    }
}
