//! Check an ORT adapter file in one pass over its bytes.
//!
//! The checkpoint reader's rules and primitives (`flatbuf.rs`), for the adapter schema: every structural value is
//! read exactly once through [`Input`], checked against the input length when it is read, with
//! checked arithmetic; no allocation is sized by a value not checked against the input length
//! first; at most `len / 4 + 1` tables and `2 × len` bytes of structure are visited, so buffers
//! whose objects share or overlap cannot make the work grow; offsets, vtable entries, lengths and
//! scalars are aligned to their size, as ORT's flatbuffers verifier requires.
//!
//! Beyond the verifier, the rules ORT relies on without checking them (it builds tensors straight
//! over the bytes, see `CreateOrtValueOverLoraParameter`): every parameter has a unique non-empty
//! name, at least one dim and no negative one, a data type ORT maps (numeric, not bool or complex),
//! and exactly the `raw_data` bytes its dims and type call for. The format version must be one
//! ORT reads.

#[cfg(feature = "fs")]
use std::path::Path;

use super::rules::{check_parameter, ADAPTER_FILE_IDENTIFIER};
use super::schema::fbs;
use crate::flatbuf::{self, Walker, OUTSIDE};
use crate::input::Input;
use crate::shape::byte_size;
use crate::versions::ADAPTER_FORMAT_VERSION;
#[cfg(feature = "fs")]
use crate::MappedFile;
use crate::{DataType, Error, Result};

/// One tensor of an adapter: its bytes are `offset..offset + len` of the indexed buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterParameter {
    /// The name (the ONNX model input or initializer it replaces).
    pub name: String,
    /// The element type.
    pub data_type: DataType,
    /// The shape (no negative entry).
    pub dims: Vec<i64>,
    /// Where its little-endian values start in the buffer.
    pub offset: usize,
    /// How many bytes they take (what `dims` and `data_type` call for).
    pub len: usize,
}

/// What [`index_adapter`] found in an adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterIndex {
    /// The format version (always [`ADAPTER_FORMAT_VERSION`] once checked).
    pub format_version: i32,
    /// The adapter's version, as its writer numbered it.
    pub adapter_version: i32,
    /// The version of the model the adapter is for, as its writer numbered it.
    pub model_version: i32,
    /// The parameters in file order.
    pub parameters: Vec<AdapterParameter>,
}

/// An adapter file read into private memory, with its index.
#[cfg(feature = "fs")]
pub struct AdapterFile {
    /// What the file holds.
    pub index: AdapterIndex,
    file: MappedFile,
}

#[cfg(feature = "fs")]
impl AdapterFile {
    /// The whole file; each parameter's values are `offset..offset + len` of it.
    pub fn bytes(&self) -> &[u8] {
        self.file.bytes()
    }

    /// The index and the file's bytes, apart (to hand the bytes to a [`crate::LoadedCheckpoint`]).
    pub fn into_parts(self) -> (AdapterIndex, MappedFile) {
        (self.index, self.file)
    }
}

impl AdapterIndex {
    /// The adapter as a checkpoint index over the same bytes: every parameter trainable, its
    /// values where the adapter has them (nothing is copied), format version 2, no properties
    /// (the caller adds the adapter's versions). The checkpoint's own rules are applied on top
    /// (data types, sizes, unique names), so what the index hands out is what `load` would.
    pub fn to_checkpoint_index(&self) -> Result<crate::CheckpointIndex> {
        use crate::assemble::{Assembler, RawData, Role, TensorFields};
        let mut assembler = Assembler::new(2)?;
        assembler.module_state(false, false);
        assembler.reserve_tensors(self.parameters.len())?;
        for p in &self.parameters {
            let fields = TensorFields {
                name: Some(&p.name),
                doc_string: None,
                dims: &p.dims,
                data_type: p.data_type.code(),
                raw_data: RawData::Read { offset: p.offset, len: p.len },
                string_count: 0,
                external_data_offset: -1,
            };
            assembler.tensor(&fields, Role::Parameter, &mut |_| Ok(()))?;
        }
        assembler.end_trainable();
        assembler.end_parameters()?;
        assembler.end_groups()?;
        assembler.finish()
    }
}

/// Opens `path` (a regular file, never blocking on FIFOs or devices), reads it into private
/// memory (so other programs rewriting it cannot change what was checked) and indexes it.
/// `keep_going` is asked between read chunks; false stops with [`Error::Interrupted`].
#[cfg(feature = "fs")]
pub fn read_adapter_file(path: &Path, keep_going: &mut dyn FnMut() -> bool) -> Result<AdapterFile> {
    let file = MappedFile::read_path(path, keep_going)?;
    let index = index_adapter(file.bytes())?;
    Ok(AdapterFile { index, file })
}

/// Indexes `buf` as an ORT adapter file, every check done.
pub fn index_adapter(buf: &[u8]) -> Result<AdapterIndex> {
    parse(Input::from_slice(buf))
}

fn malformed(what: &'static str, offset: usize) -> Error {
    Error::MalformedAdapter { what, offset }
}

/// Both tables of the schema have 4 fields; fields a newer schema adds are ignored, as
/// flatbuffers readers do.
type Table = flatbuf::Table<4>;

fn i32_field(p: &mut Walker<'_>, t: &Table, slot: u16) -> Result<i32> {
    p.scalar(t, slot, 0, i32::from_le_bytes)
}

/// The string in `slot` of `t`, `None` when absent.
fn string(p: &mut Walker<'_>, t: &Table, slot: u16) -> Result<Option<String>> {
    let Some(field) = t.field(slot) else { return Ok(None) };
    let pos = p.follow(field)?;
    let mut bytes = Vec::new();
    p.string(pos, &mut bytes)?;
    String::from_utf8(bytes).map(Some).map_err(|_| malformed("a string is not valid UTF-8", pos))
}

fn parameter(p: &mut Walker<'_>, pos: usize) -> Result<AdapterParameter> {
    use fbs::Parameter as P;
    let t = p.table(pos)?;
    let name = string(p, &t, P::VT_NAME)?
        .filter(|n| !n.is_empty())
        .ok_or_else(|| malformed("a parameter has no name", pos))?;
    let (start, count) =
        p.vector(&t, P::VT_DIMS, 8)?.ok_or_else(|| malformed("a parameter has no dims", pos))?;
    // `count` dims were checked to fit in the input (8 bytes each).
    let mut dims = crate::alloc::vec_for(count)?;
    for i in 0..count {
        let at = start + 8 * i;
        dims.push(p.input.i64(at).ok_or_else(|| malformed(OUTSIDE, at))?);
    }
    let code = i32_field(p, &t, P::VT_DATA_TYPE)?;
    let data_type =
        DataType::from_code(code).ok_or_else(|| Error::UnknownDataType { tensor: name.clone(), code })?;
    check_parameter(&name, data_type, &dims)?;
    // Strings were refused just above: every other type has an element size.
    let expected = byte_size(&name, data_type, &dims)?.unwrap_or(u64::MAX);
    let (offset, len) =
        p.vector(&t, P::VT_RAW_DATA, 1)?.ok_or_else(|| malformed("a parameter has no raw_data", pos))?;
    if len as u64 != expected {
        return Err(Error::DataLengthMismatch { tensor: name, dims, expected, found: len as u64 });
    }
    Ok(AdapterParameter { name, data_type, dims, offset, len })
}

fn parse(input: Input<'_>) -> Result<AdapterIndex> {
    let len = input.len();
    // ORT wants more than the 8 header bytes before it looks at the identifier.
    let found: [u8; 4] = match input.array(4) {
        Some(found) if len > 8 => found,
        _ => {
            return Err(Error::NotAnAdapter {
                detail: format!("{len} bytes is too short for a flatbuffer header"),
            })
        }
    };
    if &found != ADAPTER_FILE_IDENTIFIER {
        let detail =
            format!("file identifier is {} (expected \"TORT\")", crate::error::show_identifier(&found));
        return Err(crate::kind_check::not_a(
            crate::FileKind::Adapter,
            input.kind(),
            Error::NotAnAdapter { detail },
        ));
    }
    let mut walker = Walker::new(input, malformed, "objects share or overlap more than an adapter can");
    let p = &mut walker;
    use fbs::Adapter as A;
    let root_pos = p.follow(0)?;
    let root = p.table(root_pos)?;
    let format_version = i32_field(p, &root, A::VT_FORMAT_VERSION)?;
    if format_version != ADAPTER_FORMAT_VERSION {
        return Err(Error::UnsupportedAdapterVersion { found: format_version });
    }
    let adapter_version = i32_field(p, &root, A::VT_ADAPTER_VERSION)?;
    let model_version = i32_field(p, &root, A::VT_MODEL_VERSION)?;
    let (start, count) = p
        .vector(&root, A::VT_PARAMETERS, 4)?
        .ok_or_else(|| malformed("the adapter has no parameter list", root_pos))?;
    // `count` offsets were checked to fit in the input (4 bytes each).
    let mut parameters = crate::alloc::vec_for(count)?;
    for i in 0..count {
        let pos = p.follow(start + 4 * i)?;
        parameters.push(parameter(p, pos)?);
    }
    // sorted, not hashed: no copy of each name (names in file order for the first duplicate)
    crate::names::ensure_unique("parameter", parameters.iter().map(|p| p.name.as_str()))?;
    Ok(AdapterIndex { format_version, adapter_version, model_version, parameters })
}
