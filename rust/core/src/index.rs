//! The owned result of reading a checkpoint: what it holds and where each tensor's bytes are.
//!
//! Compact: a tensor costs one 32-byte entry plus its name, dims and doc string in shared arenas
//! (no `String` or `Vec` per tensor). Names, dims and strings were copied out of the input exactly
//! once (the input may change under us); tensor values are given as byte ranges, never copied.

use std::ops::Range;

use crate::input::Input;
use crate::{DataType, Error, Result};

/// Everything a checkpoint holds. Built only by the reader ([`crate::index_checkpoint`]), which
/// guarantees what the accessors document.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointIndex {
    /// The checkpoint format version (one of [`crate::SUPPORTED_VERSIONS`]).
    pub version: i32,
    /// Whether parameters carry names and types only (values come from the ONNX model).
    pub is_nominal: bool,
    /// Whether some tensor bytes live in the external data file beside the checkpoint.
    pub has_external_data: bool,
    /// File order: trainable parameters, frozen parameters, then every momentum (group by group,
    /// state by state, in file order).
    pub(crate) tensors: Vec<TensorEntry>,
    pub(crate) trainable_count: usize,
    pub(crate) parameter_count: usize,
    /// Arenas; entry `i` owns `[end of entry i - 1, its end)` of each.
    pub(crate) names: String,
    pub(crate) doc_strings: String,
    pub(crate) dims: Vec<i64>,
    /// The values of every string tensor; an entry with `Kind::Strings` holds a range of it.
    pub(crate) strings: Vec<String>,
    /// Parameter positions sorted by name (the names are unique).
    pub(crate) params_by_name: Vec<u32>,
    /// The optimizer groups, in file order.
    pub optimizer_groups: Vec<OptimizerGroupIndex>,
    /// Integer, then float, then string properties, each in file order.
    pub properties: Vec<Property>,
}

/// Where an entry's values are; see [`Storage`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Inline,
    /// Inline, with the length prefix not compared yet ([`crate::LengthCheck::OnFirstUse`]).
    InlineUnchecked,
    External,
    Strings,
    Nominal,
}

/// One tensor, 32 bytes: `offset`/`len` mean what [`Storage`] says for its kind (for strings: the
/// range in `CheckpointIndex::strings`); the arena ends locate its name, doc string and dims.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TensorEntry {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) name_end: u32,
    pub(crate) doc_end: u32,
    pub(crate) dims_end: u32,
    /// `DataType::code()`, which fits a byte (1..=20).
    pub(crate) data_type: u8,
    pub(crate) kind: Kind,
}

/// A borrowed view of one tensor of an index.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorRef<'a> {
    /// The tensor's name (for a momentum: e.g. `momentum0`).
    pub name: &'a str,
    /// The tensor's `doc_string`, `""` when the file has none.
    pub doc_string: &'a str,
    /// The element type.
    pub data_type: DataType,
    /// The shape (empty for a scalar, and for the tensors of a nominal checkpoint).
    pub dims: &'a [i64],
    /// Where the values are.
    pub storage: Storage<'a>,
}

/// Where a tensor's values are. The reader decided the kind; nobody needs to re-derive it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Storage<'a> {
    /// `len` bytes at `offset` in the checkpoint buffer (`len` may be 0). Guaranteed by the
    /// reader: `offset + len <= buffer length` and `len == element count × element size`.
    Inline {
        /// Start of the bytes in the checkpoint buffer.
        offset: usize,
        /// Number of bytes.
        len: usize,
        /// False when the reader left the comparison of the stored length (the 4 bytes before
        /// `offset`) with `len` for first use ([`crate::LengthCheck::OnFirstUse`]): call
        /// [`CheckpointIndex::check_inline_length`] before using the bytes.
        length_checked: bool,
    },
    /// `len` bytes at `offset` in the external data file (`len == element count × element size`,
    /// `offset + len <= i64::MAX`; checked against the file by [`crate::check_external_ranges`]).
    External {
        /// Start of the bytes in the external data file.
        offset: u64,
        /// Number of bytes.
        len: u64,
    },
    /// The values of a string tensor (as many as its element count).
    Strings(&'a [String]),
    /// A parameter of a nominal checkpoint: name and type only, no values.
    Nominal,
}

/// Which list a parameter is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A parameter with `requires_grad`.
    Trainable,
    /// A frozen parameter.
    Frozen,
}

/// One optimizer group.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerGroupIndex {
    /// The group's name (unique among groups).
    pub name: String,
    /// The optimizer step count.
    pub step: i64,
    /// The learning rate the group started with.
    pub initial_learning_rate: f32,
    /// One state per parameter, in file order.
    pub states: Vec<ParameterStateIndex>,
}

/// The optimizer state of one parameter: its momentum tensors (e.g. `momentum0`), given as a
/// range of tensor positions in the index (see [`CheckpointIndex::tensor`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ParameterStateIndex {
    /// The parameter this state belongs to (unique within its group).
    pub param_name: String,
    /// Positions of the momentum tensors.
    pub momentums: Range<usize>,
}

/// A named checkpoint property.
#[derive(Clone, Debug, PartialEq)]
pub struct Property {
    /// The property's name (unique among all properties).
    pub name: String,
    /// Its value.
    pub value: PropertyValue,
}

/// The value of a [`Property`].
#[derive(Clone, Debug, PartialEq)]
pub enum PropertyValue {
    /// An `IntProperty`.
    Int(i64),
    /// A `FloatProperty`.
    Float(f32),
    /// A `StringProperty`.
    Str(String),
}

impl CheckpointIndex {
    /// An empty index of `version`, for the reader to fill.
    pub(crate) fn empty(version: i32) -> CheckpointIndex {
        CheckpointIndex {
            version,
            is_nominal: false,
            has_external_data: false,
            tensors: Vec::new(),
            trainable_count: 0,
            parameter_count: 0,
            names: String::new(),
            doc_strings: String::new(),
            dims: Vec::new(),
            strings: Vec::new(),
            params_by_name: Vec::new(),
            optimizer_groups: Vec::new(),
            properties: Vec::new(),
        }
    }

    /// Number of tensors: parameters and momentums.
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// The tensor at `position` (0..tensor_count, file order), `None` when out of range.
    pub fn tensor(&self, position: usize) -> Option<TensorRef<'_>> {
        (position < self.tensors.len()).then(|| self.at(position))
    }

    /// Number of parameters: they are positions `0..parameter_count` (trainable, then frozen).
    pub fn parameter_count(&self) -> usize {
        self.parameter_count
    }

    /// Number of trainable parameters: positions `0..trainable_count`.
    pub fn trainable_count(&self) -> usize {
        self.trainable_count
    }

    /// Whether the tensor at `position` is a trainable or frozen parameter; `None` for momentums
    /// and out-of-range positions.
    pub fn param_kind(&self, position: usize) -> Option<ParamKind> {
        if position < self.trainable_count {
            Some(ParamKind::Trainable)
        } else if position < self.parameter_count {
            Some(ParamKind::Frozen)
        } else {
            None
        }
    }

    /// The trainable parameters, in file order.
    pub fn trainable(&self) -> impl ExactSizeIterator<Item = TensorRef<'_>> + '_ {
        self.range(0..self.trainable_count)
    }

    /// The frozen parameters, in file order.
    pub fn frozen(&self) -> impl ExactSizeIterator<Item = TensorRef<'_>> + '_ {
        self.range(self.trainable_count..self.parameter_count)
    }

    /// Parameter positions sorted by name (each name is unique: the reader guarantees it).
    pub fn parameters_by_name(&self) -> &[u32] {
        &self.params_by_name
    }

    /// [`CheckpointIndex::find_parameter`], trying first the parameter `rank`-th in name order
    /// (one comparison when the caller walks names in the same order, as an aggregation does
    /// against its reference).
    pub fn find_parameter_ranked(&self, name: &str, rank: usize) -> Option<usize> {
        match self.params_by_name.get(rank) {
            Some(&p) if self.name_at(p as usize) == name => Some(p as usize),
            _ => self.find_parameter(name),
        }
    }

    /// Position of the parameter called `name`.
    pub fn find_parameter(&self, name: &str) -> Option<usize> {
        let found = self.params_by_name.binary_search_by(|&p| self.name_at(p as usize).cmp(name)).ok()?;
        self.params_by_name.get(found).map(|&p| p as usize)
    }

    /// The momentum tensors of one parameter state of this index.
    pub fn momentums<'a>(
        &'a self,
        state: &'a ParameterStateIndex,
    ) -> impl ExactSizeIterator<Item = TensorRef<'a>> + 'a {
        let end = state.momentums.end.min(self.tensors.len());
        self.range(state.momentums.start.min(end)..end)
    }

    /// Compares the stored length of the inline tensor at `position` with its expected length,
    /// when the reader left that for first use ([`crate::LengthCheck::OnFirstUse`]); `Ok` for
    /// every other tensor. `buf` is the buffer the index was read from.
    pub fn check_inline_length(&self, position: usize, buf: &[u8]) -> Result<()> {
        self.compare_length(position, Input::from_slice(buf))
    }

    /// [`CheckpointIndex::check_inline_length`] for memory that may change while it is read.
    ///
    /// # Safety
    /// `base..base + len` must stay mapped and readable until this returns. Its contents may change.
    pub unsafe fn check_inline_length_raw(&self, position: usize, base: *const u8, len: usize) -> Result<()> {
        // SAFETY: the caller guarantees the range stays readable for the duration of the call.
        self.compare_length(position, unsafe { Input::from_raw(base, len) })
    }

    /// Whether some tensor's length is still to be compared on first use.
    pub fn has_unchecked_lengths(&self) -> bool {
        self.tensors.iter().any(|e| e.kind == Kind::InlineUnchecked)
    }

    fn compare_length(&self, position: usize, input: Input<'_>) -> Result<()> {
        let Some(entry) = self.tensors.get(position) else { return Ok(()) };
        if entry.kind != Kind::InlineUnchecked {
            return Ok(());
        }
        // The reader checked that the prefix lies inside this buffer; a different (shorter)
        // buffer reads as a mismatch, not a panic.
        let at = (entry.offset as usize).wrapping_sub(4);
        let found = input.u32(at).map_or(u64::MAX, u64::from);
        if found == entry.len {
            return Ok(());
        }
        // The error eager indexing gives for the same bytes.
        if usize::try_from(found).map_or(true, |n| !input.contains(at.saturating_add(4), n)) {
            return Err(Error::Malformed { what: "a vector runs past the end of the buffer", offset: at });
        }
        let tensor = self.at(position);
        Err(Error::DataLengthMismatch {
            tensor: tensor.name.to_owned(),
            dims: tensor.dims.to_vec(),
            expected: entry.len,
            found,
        })
    }

    /// Every tensor (parameters, then momentums) in file order.
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TensorRef<'_>> + '_ {
        self.range(0..self.tensors.len())
    }

    fn range(&self, positions: Range<usize>) -> impl ExactSizeIterator<Item = TensorRef<'_>> + '_ {
        positions.map(move |i| self.at(i))
    }

    /// Where entry `i`'s arena ranges start: where entry `i - 1`'s end.
    fn starts(&self, i: usize) -> (usize, usize, usize) {
        match i.checked_sub(1).and_then(|p| self.tensors.get(p)) {
            Some(e) => (e.name_end as usize, e.doc_end as usize, e.dims_end as usize),
            None => (0, 0, 0),
        }
    }

    /// The name of tensor `i` ("" when out of range).
    pub(crate) fn name_at(&self, i: usize) -> &str {
        let (start, _, _) = self.starts(i);
        let end = self.tensors.get(i).map_or(start, |e| e.name_end as usize);
        self.names.get(start..end).unwrap_or_default()
    }

    /// The tensor at `i < tensors.len()`. The ranges it slices were built by the reader, which
    /// only appends whole UTF-8 strings to the arenas, so the `get`s cannot fail.
    fn at(&self, i: usize) -> TensorRef<'_> {
        let e = &self.tensors[i];
        let (name, doc, dims) = self.starts(i);
        let storage = match e.kind {
            // Inline ranges lie inside the input, whose length is a usize: the casts are lossless.
            Kind::Inline | Kind::InlineUnchecked => Storage::Inline {
                offset: e.offset as usize,
                len: e.len as usize,
                length_checked: e.kind == Kind::Inline,
            },
            Kind::External => Storage::External { offset: e.offset, len: e.len },
            Kind::Strings => {
                let start = e.offset as usize;
                Storage::Strings(self.strings.get(start..start + e.len as usize).unwrap_or_default())
            }
            Kind::Nominal => Storage::Nominal,
        };
        TensorRef {
            name: self.names.get(name..e.name_end as usize).unwrap_or_default(),
            doc_string: self.doc_strings.get(doc..e.doc_end as usize).unwrap_or_default(),
            data_type: DataType::from_code(i32::from(e.data_type)).unwrap_or(DataType::Float),
            dims: self.dims.get(dims..e.dims_end as usize).unwrap_or_default(),
            storage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_32_bytes() {
        assert_eq!(std::mem::size_of::<TensorEntry>(), 32);
    }
}
