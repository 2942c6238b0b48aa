//! Write an ORT adapter file.
//!
//! The layout is written front to back, every offset pointing forward (flatbuffers offsets are
//! unsigned): the header, the `Adapter` table, the parameter list, then for each parameter its
//! table, name, dims and values. Each table carries its own vtable just before it. Dims and values
//! start on 8-byte boundaries (the schema's `force_align: 8` for `raw_data`): ORT builds tensors
//! straight over these bytes.

use std::collections::HashSet;

use super::rules::{check_parameter, ADAPTER_FILE_IDENTIFIER};
use super::schema::fbs;
use crate::shape::byte_size;
use crate::versions::ADAPTER_FORMAT_VERSION;
use crate::{DataType, Error, Result};

/// One tensor to write into an adapter.
#[derive(Clone, Copy, Debug)]
pub struct AdapterParameterSpec<'a> {
    /// The name (the ONNX model input or initializer it replaces); unique and non-empty.
    pub name: &'a str,
    /// The element type (not `String`).
    pub data_type: DataType,
    /// The shape.
    pub dims: &'a [i64],
    /// The little-endian values: exactly the bytes `dims` and `data_type` call for.
    pub data: &'a [u8],
}

/// A flatbuffer (32-bit offsets) holds at most `2^31 - 1` bytes; ORT's verifier refuses more.
const MAX_BYTES: u64 = i32::MAX as u64;

/// Both tables of the schema have four fields, each 4 bytes wide (an `int` or an offset).
const VTABLE_LEN: u16 = 4 + 2 * 4;
const TABLE_LEN: u16 = 4 + 4 * 4;

/// Serializes `parameters` (in the order given) as an adapter file ORT loads.
pub fn serialize_adapter(
    parameters: &[AdapterParameterSpec<'_>],
    adapter_version: i32,
    model_version: i32,
) -> Result<Vec<u8>> {
    let size = check(parameters)?;
    let capacity = usize::try_from(size).map_err(|_| too_large(size))?;
    let mut w = Writer { buf: Vec::with_capacity(capacity) };
    w.buf.extend_from_slice(&[0; 4]); // root offset, patched below
    w.buf.extend_from_slice(ADAPTER_FILE_IDENTIFIER);
    let root = w.table();
    w.patch(0, root);
    use fbs::Adapter as A;
    w.put_i32(root, A::VT_FORMAT_VERSION, ADAPTER_FORMAT_VERSION);
    w.put_i32(root, A::VT_ADAPTER_VERSION, adapter_version);
    w.put_i32(root, A::VT_MODEL_VERSION, model_version);
    let list = w.buf.len();
    w.patch(field(root, A::VT_PARAMETERS), list);
    w.buf.extend_from_slice(&len_u32(parameters.len()).to_le_bytes());
    w.buf.resize(list + 4 + 4 * parameters.len(), 0);
    use fbs::Parameter as P;
    for (i, parameter) in parameters.iter().enumerate() {
        let table = w.table();
        w.patch(list + 4 + 4 * i, table);
        w.put_i32(table, P::VT_DATA_TYPE, parameter.data_type as i32);
        let name = w.vector(4, parameter.name.len());
        w.patch(field(table, P::VT_NAME), name);
        w.buf.extend_from_slice(parameter.name.as_bytes());
        w.buf.push(0);
        let dims = w.vector(8, parameter.dims.len());
        w.patch(field(table, P::VT_DIMS), dims);
        for d in parameter.dims {
            w.buf.extend_from_slice(&d.to_le_bytes());
        }
        let data = w.vector(8, parameter.data.len());
        w.patch(field(table, P::VT_RAW_DATA), data);
        w.buf.extend_from_slice(parameter.data);
    }
    Ok(w.buf)
}

/// Checks the parameters as the reader will, and returns an upper bound of the file's size.
fn check(parameters: &[AdapterParameterSpec<'_>]) -> Result<u64> {
    let invalid = |detail: String| Error::InvalidSpec { detail };
    let mut names = HashSet::with_capacity(parameters.len());
    // Header, root vtable and table, list length, and padding.
    let mut size: u64 = 8 + u64::from(VTABLE_LEN + TABLE_LEN) + 4 + 8;
    for p in parameters {
        if p.name.is_empty() {
            return Err(invalid("an adapter parameter needs a non-empty name".to_owned()));
        }
        if !names.insert(p.name) {
            return Err(Error::DuplicateName { kind: "parameter", name: p.name.to_owned() });
        }
        check_parameter(p.name, p.data_type, p.dims)?;
        // Strings were refused just above: every other type has an element size.
        let expected = byte_size(p.name, p.data_type, p.dims)?.unwrap_or(u64::MAX);
        if expected != p.data.len() as u64 {
            return Err(Error::DataLengthMismatch {
                tensor: p.name.to_owned(),
                dims: p.dims.to_vec(),
                expected,
                found: p.data.len() as u64,
            });
        }
        // List entry, vtable and table, then name, dims and data, each with a length and up to
        // 7 bytes of padding (8 with the name's terminator).
        let parts = [
            4,
            u64::from(VTABLE_LEN + TABLE_LEN) + 4,
            p.name.len() as u64 + 12,
            8 * p.dims.len() as u64 + 11,
            expected + 11,
        ];
        size = parts
            .iter()
            .try_fold(size, |s, &n| s.checked_add(n))
            .filter(|&s| s <= MAX_BYTES)
            .ok_or_else(|| too_large(size))?;
    }
    Ok(size)
}

fn too_large(bytes: u64) -> Error {
    Error::InvalidSpec {
        detail: format!(
            "the adapter would need more than {bytes} bytes, more than an adapter file can hold (2 GiB); \
             export fewer parameters (parameters=...)"
        ),
    }
}

/// A length that `check` bounded by `MAX_BYTES`, so it fits a `u32`.
fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Where the field in vtable slot `slot` lives in the table at `table` (fields in id order).
fn field(table: usize, slot: u16) -> usize {
    table + 4 + 2 * (usize::from(slot) - 4)
}

struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// Pads with zeros until the length is `phase` modulo `align`.
    fn pad(&mut self, align: usize, phase: usize) {
        while self.buf.len() % align != phase {
            self.buf.push(0);
        }
    }

    /// A vtable for a four-field table and the table right after it (fields zeroed, to be set or
    /// patched); returns the table's position.
    fn table(&mut self) -> usize {
        self.pad(4, 0);
        for entry in [VTABLE_LEN, TABLE_LEN, 4, 8, 12, 16] {
            self.buf.extend_from_slice(&entry.to_le_bytes());
        }
        let table = self.buf.len();
        // The vtable sits `VTABLE_LEN` bytes before the table.
        self.buf.extend_from_slice(&i32::from(VTABLE_LEN).to_le_bytes());
        self.buf.resize(table + usize::from(TABLE_LEN), 0);
        table
    }

    /// Starts a vector (or string) of `count` elements whose first element is `align`-aligned;
    /// returns the position of its length.
    fn vector(&mut self, align: usize, count: usize) -> usize {
        // The length is 4 bytes just before the first element, which must be `align`-aligned.
        if align == 8 {
            self.pad(8, 4);
        } else {
            self.pad(4, 0);
        }
        let at = self.buf.len();
        self.buf.extend_from_slice(&len_u32(count).to_le_bytes());
        at
    }

    fn put_i32(&mut self, table: usize, slot: u16, value: i32) {
        self.put(field(table, slot), value.to_le_bytes());
    }

    /// Makes the offset field at `at` point to `target` (always later in the buffer).
    fn patch(&mut self, at: usize, target: usize) {
        self.put(at, len_u32(target - at).to_le_bytes());
    }

    fn put(&mut self, at: usize, bytes: [u8; 4]) {
        if let Some(place) = self.buf.get_mut(at..at + 4) {
            place.copy_from_slice(&bytes);
        }
    }
}
