//! The rules ORT relies on, applied to what the parser read: version, data types, dims, sizes,
//! storage kinds and unique names. The parser (`reader.rs`) feeds owned, already-copied values in
//! file order; this module decides each tensor's storage and fills the compact index. Keeping the
//! rules apart from the parsing lets tests feed the same rules from the flatbuffers crate's own
//! accessors and compare (see `test_support::oracle`).

use crate::index::{CheckpointIndex, Kind, OptimizerGroupIndex, ParameterStateIndex, TensorEntry};
use crate::names::{ensure_unique, ensure_unique_sorted};
use crate::shape::{byte_size, element_count};
use crate::versions::SUPPORTED_VERSIONS;
use crate::{DataType, Error, Property, PropertyValue, Result};

/// A tensor's fields as read from the file (absent fields as their schema defaults).
pub(crate) struct TensorFields<'f> {
    pub name: Option<&'f str>,
    /// `None` when absent; an absent doc string reads as "".
    pub doc_string: Option<&'f str>,
    /// An absent `dims` reads as empty.
    pub dims: &'f [i64],
    pub data_type: i32,
    /// `raw_data`, checked to lie inside the buffer.
    pub raw_data: RawData,
    /// Number of entries of `string_data` (0 when absent); read on demand.
    pub string_count: usize,
    pub external_data_offset: i64,
}

/// Where a tensor's `raw_data` vector is, as far as the parser read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RawData {
    /// No `raw_data` field.
    Absent,
    /// `len` bytes at `offset` (the length prefix was read: `len` is what the file says).
    Read { offset: usize, len: usize },
    /// `len` bytes at `offset`, where `len` is what the tensor's shape and type call for and the
    /// length prefix (the 4 bytes before `offset`) was not read yet: it is compared when the
    /// tensor's bytes are first used ([`CheckpointIndex::check_inline_length`]). Both the prefix
    /// and the `len` bytes were checked to lie inside the buffer.
    Deferred { offset: usize, len: usize },
}

impl RawData {
    /// The vector's length as far as it is known (`Deferred`: the expected length).
    fn len(self) -> usize {
        match self {
            RawData::Absent => 0,
            RawData::Read { len, .. } | RawData::Deferred { len, .. } => len,
        }
    }

    fn offset(self) -> usize {
        match self {
            RawData::Absent => 0,
            RawData::Read { offset, .. } | RawData::Deferred { offset, .. } => offset,
        }
    }
}

/// Whether a tensor is a parameter or a momentum (momentums always hold values).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Parameter,
    Momentum,
}

/// Builds a [`CheckpointIndex`] from values given in file order.
pub(crate) struct Assembler {
    index: CheckpointIndex,
    group: Option<OptimizerGroupIndex>,
    state: Option<(String, usize)>,
}

fn arena_end(len: usize) -> Result<u32> {
    u32::try_from(len).map_err(|_| Error::Malformed {
        what: "more names, dims or doc strings than an index holds",
        offset: 0,
    })
}

impl Assembler {
    pub(crate) fn new(version: i32) -> Result<Assembler> {
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(Error::UnsupportedVersion { found: version });
        }
        Ok(Assembler { index: CheckpointIndex::empty(version), group: None, state: None })
    }

    /// An assembler for the ORT 1.15 checkpoint folder (`legacy/folder.rs`): version 0, which no
    /// flatbuffer file may have, inline values only.
    #[cfg(feature = "fs")]
    pub(crate) fn for_legacy_folder() -> Assembler {
        let index = CheckpointIndex::empty(crate::versions::LEGACY_FOLDER_VERSION);
        Assembler { index, group: None, state: None }
    }

    /// Whether the checkpoint is nominal (known once its module state was read).
    pub(crate) fn is_nominal(&self) -> bool {
        self.index.is_nominal
    }

    pub(crate) fn module_state(&mut self, is_nominal: bool, has_external_data: bool) {
        self.index.is_nominal = is_nominal;
        self.index.has_external_data = has_external_data;
    }

    /// Adds one tensor. `read_strings` appends exactly `fields.string_count` strings to the vector
    /// it is given; it is called only for string tensors whose count matches their dims.
    pub(crate) fn tensor(
        &mut self,
        fields: &TensorFields<'_>,
        role: Role,
        read_strings: &mut dyn FnMut(&mut Vec<String>) -> Result<()>,
    ) -> Result<()> {
        let name = fields.name.ok_or_else(|| Error::MissingField { what: "a tensor's name".into() })?;
        let code = fields.data_type;
        let data_type = DataType::from_code(code)
            .ok_or_else(|| Error::UnknownDataType { tensor: name.to_owned(), code })?;
        let dims = fields.dims;
        let raw_len = fields.raw_data.len();
        let external_offset = fields.external_data_offset;
        let tensor = || name.to_owned();

        // A nominal tensor is a name and a type; ORT writes neither dims nor data for it (so it has
        // one element). A tensor of zero elements has no values either, but it is a real, empty
        // tensor: it keeps its storage. Only parameters can be nominal.
        let no_values = raw_len == 0 && fields.string_count == 0 && external_offset == -1;
        let nominal = role == Role::Parameter && self.index.is_nominal && no_values;
        let (kind, offset, len) = if nominal && element_count(name, dims)? != 0 {
            (Kind::Nominal, 0, 0)
        } else if data_type.element_size().is_none() {
            if raw_len != 0 {
                return Err(Error::WrongStorage {
                    tensor: tensor(),
                    detail: "string tensor has raw_data; strings must be in string_data",
                });
            }
            if external_offset != -1 {
                return Err(Error::WrongStorage {
                    tensor: tensor(),
                    detail: "string tensor refers to external data; strings cannot be stored externally",
                });
            }
            let expected = element_count(name, dims)?;
            let found = fields.string_count as u64;
            if found != expected {
                return Err(Error::StringCountMismatch {
                    tensor: tensor(),
                    dims: dims.to_vec(),
                    expected,
                    found,
                });
            }
            let start = self.index.strings.len();
            read_strings(&mut self.index.strings)?;
            let added = self.index.strings.len() - start;
            debug_assert_eq!(added as u64, expected);
            (Kind::Strings, start as u64, added as u64)
        } else {
            if fields.string_count != 0 {
                return Err(Error::WrongStorage {
                    tensor: tensor(),
                    detail: "numeric tensor has string_data",
                });
            }
            let expected = byte_size(name, data_type, dims)?.unwrap_or(0);
            match external_offset {
                -1 => {
                    let found = raw_len as u64;
                    if found != expected {
                        return Err(Error::DataLengthMismatch {
                            tensor: tensor(),
                            dims: dims.to_vec(),
                            expected,
                            found,
                        });
                    }
                    // A deferred length is the expected one by construction (the parser
                    // computed it with `byte_size`); its prefix is compared on first use.
                    let kind = match fields.raw_data {
                        RawData::Deferred { .. } => Kind::InlineUnchecked,
                        _ => Kind::Inline,
                    };
                    (kind, fields.raw_data.offset() as u64, found)
                }
                offset if offset >= 0 => {
                    if raw_len != 0 {
                        return Err(Error::InlineAndExternal { tensor: tensor() });
                    }
                    if !self.index.has_external_data {
                        return Err(Error::ExternalWithoutFlag { tensor: tensor() });
                    }
                    let start = offset as u64;
                    // ORT addresses external data with int64 offsets.
                    if start.checked_add(expected).is_none_or(|end| end > i64::MAX as u64) {
                        return Err(Error::BadExternalOffset { tensor: tensor(), offset });
                    }
                    (Kind::External, start, expected)
                }
                offset => return Err(Error::BadExternalOffset { tensor: tensor(), offset }),
            }
        };

        let index = &mut self.index;
        let doc = fields.doc_string.unwrap_or_default();
        // the arenas grow with the input: an allocation that fails is an error, not an abort
        crate::alloc::reserve_str(&mut index.names, name.len())?;
        crate::alloc::reserve_str(&mut index.doc_strings, doc.len())?;
        crate::alloc::reserve(&mut index.dims, dims.len())?;
        crate::alloc::reserve(&mut index.tensors, 1)?;
        index.names.push_str(name);
        index.doc_strings.push_str(doc);
        index.dims.extend_from_slice(dims);
        let entry = TensorEntry {
            offset,
            len,
            name_end: arena_end(index.names.len())?,
            doc_end: arena_end(index.doc_strings.len())?,
            dims_end: arena_end(index.dims.len())?,
            // Codes are 1..=20.
            data_type: data_type.code() as u8,
            kind,
        };
        index.tensors.push(entry);
        Ok(())
    }

    /// Makes room for `count` more tensors; the parser checked the file has a 4-byte offset for
    /// each, so `count` is bounded by the input's length.
    pub(crate) fn reserve_tensors(&mut self, count: usize) -> Result<()> {
        crate::alloc::reserve(&mut self.index.tensors, count)
    }

    /// The tensors so far are the trainable parameters.
    pub(crate) fn end_trainable(&mut self) {
        self.index.trainable_count = self.index.tensors.len();
    }

    /// The tensors so far are the parameters: sorts them by name, refusing duplicates.
    pub(crate) fn end_parameters(&mut self) -> Result<()> {
        let index = &mut self.index;
        index.parameter_count = index.tensors.len();
        let count = u32::try_from(index.parameter_count)
            .map_err(|_| Error::Malformed { what: "more parameters than an index holds", offset: 0 })?;
        let mut by_name: Vec<u32> = crate::alloc::vec_for(count as usize)?;
        by_name.extend(0..count);
        by_name.sort_unstable_by(|&a, &b| index.name_at(a as usize).cmp(index.name_at(b as usize)));
        ensure_unique_sorted("parameter", by_name.iter().map(|&p| index.name_at(p as usize)))?;
        index.params_by_name = by_name;
        Ok(())
    }

    pub(crate) fn begin_group(
        &mut self,
        name: Option<&str>,
        step: i64,
        initial_learning_rate: f32,
    ) -> Result<()> {
        let name = name.ok_or_else(|| Error::MissingField { what: "an optimizer group's name".into() })?;
        self.group = Some(OptimizerGroupIndex {
            name: name.to_owned(),
            step,
            initial_learning_rate,
            states: Vec::new(),
        });
        Ok(())
    }

    pub(crate) fn begin_state(&mut self, param_name: Option<&str>) -> Result<()> {
        let group = self.group.as_ref().map_or("", |g| g.name.as_str());
        let param_name = param_name.ok_or_else(|| Error::MissingField {
            what: format!("a parameter name in optimizer group {group:?}"),
        })?;
        self.state = Some((param_name.to_owned(), self.index.tensors.len()));
        Ok(())
    }

    pub(crate) fn end_state(&mut self) -> Result<()> {
        let Some((param_name, start)) = self.state.take() else { return Ok(()) };
        let momentums = start..self.index.tensors.len();
        ensure_unique("momentum", momentums.clone().map(|i| self.index.name_at(i)))?;
        if let Some(group) = self.group.as_mut() {
            group.states.push(ParameterStateIndex { param_name, momentums });
        }
        Ok(())
    }

    pub(crate) fn end_group(&mut self) -> Result<()> {
        let Some(group) = self.group.take() else { return Ok(()) };
        ensure_unique("optimizer state parameter", group.states.iter().map(|s| s.param_name.as_str()))?;
        self.index.optimizer_groups.push(group);
        Ok(())
    }

    pub(crate) fn end_groups(&mut self) -> Result<()> {
        ensure_unique("optimizer group", self.index.optimizer_groups.iter().map(|g| g.name.as_str()))
    }

    /// Adds a property; `kind` ("int", "float", "string") names it in errors. `value` is `None`
    /// for a string property without a value.
    pub(crate) fn property(
        &mut self,
        kind: &str,
        name: Option<&str>,
        value: Option<PropertyValue>,
    ) -> Result<()> {
        let name = name.ok_or_else(|| Error::MissingField { what: format!("a {kind} property's name") })?;
        let value = value
            .ok_or_else(|| Error::MissingField { what: format!("the value of string property {name:?}") })?;
        self.index.properties.push(Property { name: name.to_owned(), value });
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<CheckpointIndex> {
        ensure_unique("property", self.index.properties.iter().map(|p| p.name.as_str()))?;
        // The arenas grew by doubling: give the slack back (the index may live long).
        let index = &mut self.index;
        index.tensors.shrink_to_fit();
        index.names.shrink_to_fit();
        index.doc_strings.shrink_to_fit();
        index.dims.shrink_to_fit();
        index.strings.shrink_to_fit();
        Ok(self.index)
    }
}
