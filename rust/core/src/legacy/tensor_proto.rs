//! One `onnx.TensorProto` decoded from a `.pbseq` file while it is read, into owned values: its
//! name, data type and dims, and its values as the bytes a checkpoint stores (appended to the
//! folder's value buffer) or as strings.
//!
//! Only what a checkpoint tensor can be is accepted. Values come from exactly one place:
//! `raw_data` (copied as is), or the typed field ONNX assigns to the data type (`float_data`,
//! `int32_data`, `int64_data`, `double_data`, `uint64_data`, `string_data`), unpacked the way ORT
//! unpacks it: integers narrower than the field wrap (C++ conversion), `BOOL` is any non-zero value,
//! 16- and 8-bit float types hold their bit pattern and refuse values outside it ("data overflow"),
//! complex numbers are (real, imaginary) pairs. External data and segments are refused. Fields
//! the checkpoint does not use (`doc_string`, `metadata_props`, unknown fields) are skipped by
//! their wire type, as protobuf parsers do; a repeated singular field keeps its last value.
//!
//! Work is bounded by the input: every length is checked against the message before it is used,
//! and every value decoded (typed values, strings, names, dims) is charged to a [`Budget`].

use std::ops::Range;

use std::path::Path;

use super::stream::{Bound, Stream, Within};
use crate::shape::element_count;
use crate::{DataType, Error, Result};

/// What decoding a folder may hold in memory: a multiple of its files' size plus a small
/// allowance. Charged: every value byte (raw or decoded from a typed field, where a one-byte varint
/// of `int64_data` becomes eight bytes), the typed values of the message being decoded, strings,
/// names, dims, and each tensor's index entry. Raw data alone never exceeds it; many tiny tensors
/// or typed fields of small numbers can, and are refused.
pub(crate) struct Budget {
    left: u64,
}

/// Bytes of memory allowed per byte of input, and the allowance on top of it.
pub(crate) const BUDGET_PER_INPUT_BYTE: u64 = 4;
pub(crate) const BUDGET_ALLOWANCE: u64 = 1 << 16;

impl Budget {
    pub(crate) fn for_input(bytes: u64) -> Budget {
        Budget { left: bytes.saturating_mul(BUDGET_PER_INPUT_BYTE).saturating_add(BUDGET_ALLOWANCE) }
    }

    pub(crate) fn charge(&mut self, n: u64, at: u64) -> Result<()> {
        self.left = self.left.checked_sub(n).ok_or_else(|| Error::BadLegacyFolder {
            detail: format!(
                "at byte {at}, the tensors need more than {BUDGET_PER_INPUT_BYTE} bytes of memory per byte of \
                 the folder's files (tiny tensors by the million, or typed values of small numbers); ORT \
                 writes values as raw_data, which needs one byte per byte"
            ),
        })?;
        Ok(())
    }
}

// TensorProto field numbers (onnx.proto).
const DIMS: u64 = 1;
const DATA_TYPE: u64 = 2;
const SEGMENT: u64 = 3;
const FLOAT_DATA: u64 = 4;
const INT32_DATA: u64 = 5;
const STRING_DATA: u64 = 6;
const INT64_DATA: u64 = 7;
const NAME: u64 = 8;
const RAW_DATA: u64 = 9;
const DOUBLE_DATA: u64 = 10;
const UINT64_DATA: u64 = 11;
const DATA_LOCATION: u64 = 14;
/// `TensorProto.DataLocation.EXTERNAL`.
const EXTERNAL: i32 = 1;

// Protobuf wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const START_GROUP: u64 = 3;
const END_GROUP: u64 = 4;
const FIXED32: u64 = 5;

/// The typed value fields, in field-number order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Typed {
    Float,
    Int32,
    String,
    Int64,
    Double,
    Uint64,
}

impl Typed {
    fn field_name(self) -> &'static str {
        match self {
            Typed::Float => "float_data",
            Typed::Int32 => "int32_data",
            Typed::String => "string_data",
            Typed::Int64 => "int64_data",
            Typed::Double => "double_data",
            Typed::Uint64 => "uint64_data",
        }
    }

    /// The field ONNX keeps `data_type`'s values in when `raw_data` is not used.
    fn of(data_type: DataType) -> Typed {
        use DataType::*;
        match data_type {
            Float | Complex64 => Typed::Float,
            Uint8 | Int8 | Uint16 | Int16 | Int32 | Bool | Float16 | Bfloat16 | Float8E4M3Fn
            | Float8E4M3Fnuz | Float8E5M2 | Float8E5M2Fnuz => Typed::Int32,
            Int64 => Typed::Int64,
            String => Typed::String,
            Double | Complex128 => Typed::Double,
            Uint32 | Uint64 => Typed::Uint64,
        }
    }
}

/// Where a decoded tensor's values are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Values {
    /// No values (a tensor of zero elements has none).
    Absent,
    /// Bytes of the folder's value buffer.
    Bytes(Range<usize>),
    /// [`TensorProto::strings`].
    Strings,
}

/// The reusable state of the tensor being decoded (buffers kept from message to message).
#[derive(Debug, Default)]
pub(crate) struct TensorProto {
    pub(crate) name: String,
    pub(crate) dims: Vec<i64>,
    pub(crate) data_type: i32,
    pub(crate) values: Option<Values>,
    pub(crate) strings: Vec<String>,
    name_bytes: Vec<u8>,
    has_name: bool,
    raw: Option<Range<usize>>,
    /// Typed values as read: 32-bit fields as `u32` bits, 64-bit ones as `u64` bits.
    words32: Vec<u32>,
    words64: Vec<u64>,
    typed: Vec<Typed>,
    string_bytes: Vec<u8>,
    string_ends: Vec<usize>,
    segment: bool,
    data_location: i32,
}

/// The values of one serialized `onnx.TensorProto` (`message`), decoded by the same rules as a
/// 1.15 folder's tensors and within the same budget (4 bytes per input byte + 64 KiB): little-endian
/// bytes of its data type, bit-exact (a float32 NaN keeps its payload, which Python's float
/// conversion of `float_data` would not). Used by `onnx_io` for tensors stored in typed fields.
pub fn tensor_proto_values(message: &[u8]) -> Result<Vec<u8>> {
    let mut reader = message;
    let mut keep_going = || true;
    let len = message.len() as u64;
    let mut s = Stream::new(&mut reader, len, Path::new("<TensorProto>"), &mut keep_going);
    let bound = Bound { end: len, what: Within::Message(0) };
    let mut tensor = TensorProto::default();
    let mut out = Vec::new();
    tensor.decode(&mut s, bound, 0, &mut out, &mut Budget::for_input(len))?;
    Ok(out)
}

/// What a decoding error is about: message `i`, and its tensor once the name is known.
fn about(message: u64, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("message {message} (tensor {name:?})"),
        None => format!("message {message}"),
    }
}

fn not_proto(message: u64, detail: impl Into<String>) -> Error {
    Error::BadTensorProto { message, detail: detail.into() }
}

impl TensorProto {
    fn clear(&mut self) {
        self.name.clear();
        self.dims.clear();
        self.data_type = 0;
        self.values = None;
        self.strings.clear();
        self.name_bytes.clear();
        self.has_name = false;
        self.raw = None;
        self.words32.clear();
        self.words64.clear();
        self.typed.clear();
        self.string_bytes.clear();
        self.string_ends.clear();
        self.segment = false;
        self.data_location = 0;
    }

    fn mark(&mut self, typed: Typed) {
        if !self.typed.contains(&typed) {
            self.typed.push(typed);
        }
    }

    /// Decodes message `message` (whose bytes end at `bound.end`), appending its values to
    /// `out`. On success `name`, `dims`, `data_type` and `values` describe the tensor.
    pub(crate) fn decode(
        &mut self,
        s: &mut Stream<'_>,
        bound: Bound,
        message: u64,
        out: &mut Vec<u8>,
        budget: &mut Budget,
    ) -> Result<()> {
        self.clear();
        let values_start = out.len();
        let result =
            self.read_fields(s, bound, message, out, budget).and_then(|()| self.finish(message, out, budget));
        if result.is_err() {
            out.truncate(values_start);
        }
        result
    }

    fn read_fields(
        &mut self,
        s: &mut Stream<'_>,
        bound: Bound,
        message: u64,
        out: &mut Vec<u8>,
        budget: &mut Budget,
    ) -> Result<()> {
        while s.pos() < bound.end {
            let at = s.pos();
            let key = s.varint(bound, "field key")?;
            let (field, wire) = (key >> 3, key & 7);
            let wrong_wire =
                || not_proto(message, format!("field {field} has wire type {wire} (at byte {at})"));
            match (field, wire) {
                (0, _) => return Err(not_proto(message, format!("field number 0 (at byte {at})"))),
                (DIMS, VARINT) => {
                    budget.charge(8, at)?;
                    self.dims.push(s.varint(bound, "dimension")? as i64);
                }
                (DIMS, LEN) => self.packed(s, bound, budget, Packed::Dims)?,
                (DATA_TYPE, VARINT) => self.data_type = s.varint(bound, "data type")? as i32,
                (DATA_LOCATION, VARINT) => self.data_location = s.varint(bound, "data location")? as i32,
                (SEGMENT, LEN) => {
                    self.segment = true;
                    let n = s.varint(bound, "segment length")?;
                    s.skip(n, bound, "segment")?;
                }
                (NAME, LEN) => {
                    let n = s.varint(bound, "name length")?;
                    s.check_len(n, bound, "name")?;
                    budget.charge(n, at)?;
                    self.name_bytes.clear();
                    s.read_into(n, bound, "name", &mut self.name_bytes)?;
                    self.has_name = true;
                }
                (RAW_DATA, LEN) => {
                    let n = s.varint(bound, "raw_data length")?;
                    // The last raw_data wins; typed values are converted only at the end, so an
                    // earlier raw_data is the last thing in `out`.
                    if let Some(previous) = self.raw.take() {
                        out.truncate(previous.start);
                    }
                    let start = out.len();
                    s.check_len(n, bound, "raw_data")?;
                    budget.charge(n, at)?;
                    s.read_into(n, bound, "raw_data", out)?;
                    self.raw = Some(start..out.len());
                }
                (STRING_DATA, LEN) => {
                    let n = s.varint(bound, "string length")?;
                    s.check_len(n, bound, "string")?;
                    // A string costs its bytes and a `String` in the index.
                    budget.charge(n.saturating_add(32), at)?;
                    s.read_into(n, bound, "string", &mut self.string_bytes)?;
                    self.string_ends.push(self.string_bytes.len());
                    self.mark(Typed::String);
                }
                (FLOAT_DATA, FIXED32) => {
                    budget.charge(4, at)?;
                    self.words32.push(u32::from_le_bytes(s.array(bound, "float")?));
                    self.mark(Typed::Float);
                }
                (FLOAT_DATA, LEN) => self.packed(s, bound, budget, Packed::Fixed32(Typed::Float))?,
                (INT32_DATA, VARINT) => {
                    budget.charge(4, at)?;
                    self.words32.push(s.varint(bound, "int32")? as u32);
                    self.mark(Typed::Int32);
                }
                (INT32_DATA, LEN) => self.packed(s, bound, budget, Packed::Varint32)?,
                (INT64_DATA | UINT64_DATA, VARINT) => {
                    budget.charge(8, at)?;
                    self.words64.push(s.varint(bound, "int64")?);
                    self.mark(if field == INT64_DATA { Typed::Int64 } else { Typed::Uint64 });
                }
                (INT64_DATA, LEN) => self.packed(s, bound, budget, Packed::Varint64(Typed::Int64))?,
                (UINT64_DATA, LEN) => self.packed(s, bound, budget, Packed::Varint64(Typed::Uint64))?,
                (DOUBLE_DATA, FIXED64) => {
                    budget.charge(8, at)?;
                    self.words64.push(u64::from_le_bytes(s.array(bound, "double")?));
                    self.mark(Typed::Double);
                }
                (DOUBLE_DATA, LEN) => self.packed(s, bound, budget, Packed::Fixed64)?,
                (
                    DIMS | DATA_TYPE | DATA_LOCATION | SEGMENT | NAME | RAW_DATA | STRING_DATA | FLOAT_DATA
                    | INT32_DATA | INT64_DATA | UINT64_DATA | DOUBLE_DATA,
                    _,
                ) => return Err(wrong_wire()),
                // Any other field (doc_string, external_data, metadata_props, fields of newer
                // ONNX versions) is skipped, as a protobuf parser would.
                (_, VARINT) => {
                    s.varint(bound, "field value")?;
                }
                (_, FIXED64) => s.skip(8, bound, "field value")?,
                (_, FIXED32) => s.skip(4, bound, "field value")?,
                (_, LEN) => {
                    let n = s.varint(bound, "field length")?;
                    s.skip(n, bound, "field value")?;
                }
                (_, START_GROUP | END_GROUP) => {
                    return Err(not_proto(message, format!("field {field} is a (deprecated) group")));
                }
                (_, _) => return Err(wrong_wire()),
            }
        }
        Ok(())
    }

    /// A packed repeated field: a length, then values back to back.
    fn packed(&mut self, s: &mut Stream<'_>, bound: Bound, budget: &mut Budget, kind: Packed) -> Result<()> {
        let n = s.varint(bound, "packed field length")?;
        s.check_len(n, bound, "packed field")?;
        let inner = Bound { end: s.pos() + n, what: bound.what };
        while s.pos() < inner.end {
            let at = s.pos();
            match kind {
                Packed::Dims => {
                    budget.charge(8, at)?;
                    self.dims.push(s.varint(inner, "dimension")? as i64);
                }
                Packed::Varint32 => {
                    budget.charge(4, at)?;
                    self.words32.push(s.varint(inner, "int32")? as u32);
                }
                Packed::Varint64(_) => {
                    budget.charge(8, at)?;
                    self.words64.push(s.varint(inner, "int64")?);
                }
                Packed::Fixed32(_) => {
                    budget.charge(4, at)?;
                    self.words32.push(u32::from_le_bytes(s.array(inner, "float")?));
                }
                Packed::Fixed64 => {
                    budget.charge(8, at)?;
                    self.words64.push(u64::from_le_bytes(s.array(inner, "double")?));
                }
            }
        }
        match kind {
            Packed::Dims => {}
            Packed::Varint32 => self.mark(Typed::Int32),
            Packed::Varint64(t) | Packed::Fixed32(t) => self.mark(t),
            Packed::Fixed64 => self.mark(Typed::Double),
        }
        Ok(())
    }

    /// Applies the rules to what was read and puts the values in place.
    fn finish(&mut self, message: u64, out: &mut Vec<u8>, budget: &mut Budget) -> Result<()> {
        let bytes = std::mem::take(&mut self.name_bytes);
        let name = match std::str::from_utf8(&bytes) {
            Ok(n) if self.has_name && !n.is_empty() => n,
            Ok(_) => {
                return Err(Error::MissingField { what: format!("the tensor name of message {message}") });
            }
            Err(_) => {
                return Err(not_proto(
                    message,
                    format!("the tensor name is not valid UTF-8 ({:?})", String::from_utf8_lossy(&bytes)),
                ))
            }
        };
        self.name.push_str(name);
        self.name_bytes = bytes;
        let name = self.name.as_str();
        let fail = |detail: String| Err(Error::TensorProtoValues { tensor: name.to_owned(), detail });
        if self.data_location == EXTERNAL {
            return Err(Error::ExternalDataMissing {
                detail: format!(
                    "tensor {name:?} ({}) refers to it: ORT 1.15 checkpoint folders hold their data inline",
                    about(message, None)
                ),
            });
        }
        if self.segment {
            return fail("segmented TensorProtos are not supported".into());
        }
        let code = self.data_type;
        let data_type = DataType::from_code(code)
            .ok_or_else(|| Error::UnknownDataType { tensor: name.to_owned(), code })?;
        if self.raw.is_some() && !self.typed.is_empty() || self.typed.len() > 1 {
            let mut places: Vec<&str> = self.raw.iter().map(|_| "raw_data").collect();
            places.extend(self.typed.iter().map(|t| t.field_name()));
            return fail(format!("values in more than one place ({}); ONNX allows one", places.join(", ")));
        }
        let expected_field = Typed::of(data_type);
        if let Some(&found) = self.typed.first() {
            if found != expected_field {
                return fail(format!(
                    "{} values belong in {}, found {}",
                    data_type.numpy_name(),
                    expected_field.field_name(),
                    found.field_name()
                ));
            }
        }
        if data_type == DataType::String {
            if self.raw.is_some() {
                return fail("strings must be in string_data, not raw_data".into());
            }
            let mut start = 0;
            for (i, &end) in self.string_ends.iter().enumerate() {
                let text = self.string_bytes.get(start..end).unwrap_or_default();
                match std::str::from_utf8(text) {
                    Ok(t) => self.strings.push(t.to_owned()),
                    Err(_) => {
                        return fail(format!("element {i} is not valid UTF-8 (checkpoints store text)"))
                    }
                }
                start = end;
            }
            self.values = Some(Values::Strings);
            return Ok(());
        }
        if let Some(raw) = self.raw.clone() {
            self.values = Some(Values::Bytes(raw));
            return Ok(());
        }
        if self.typed.is_empty() {
            self.values = Some(Values::Absent);
            return Ok(());
        }
        let count = check_count(
            name,
            data_type,
            &self.dims,
            found_words(expected_field, &self.words32, &self.words64),
        )?;
        let start = out.len();
        // The values' bytes (the values read were charged already; this is the copy made here).
        budget.charge(count.saturating_mul(data_type.element_size().unwrap_or(0)), 0)?;
        if let Err(detail) = unpack(data_type, &self.words32, &self.words64, out) {
            return fail(detail);
        }
        self.values = Some(Values::Bytes(start..out.len()));
        Ok(())
    }
}

/// How many values the typed field `field` holds (32-bit fields in `words32`, 64-bit ones in
/// `words64`).
fn found_words(field: Typed, words32: &[u32], words64: &[u64]) -> usize {
    match field {
        Typed::Float | Typed::Int32 => words32.len(),
        Typed::String | Typed::Int64 | Typed::Double | Typed::Uint64 => words64.len(),
    }
}

/// The element count of `dims`, checked against the `found` values of `data_type`'s typed field
/// (complex numbers take two: real, imaginary).
fn check_count(name: &str, data_type: DataType, dims: &[i64], found: usize) -> Result<u64> {
    let count = element_count(name, dims)?;
    let per_element = if matches!(data_type, DataType::Complex64 | DataType::Complex128) { 2 } else { 1 };
    if count.checked_mul(per_element) != Some(found as u64) {
        return Err(Error::TensorProtoValues {
            tensor: name.to_owned(),
            detail: format!(
                "{} shape {dims:?} needs {} values in {}, found {found}",
                data_type.numpy_name(),
                count.saturating_mul(per_element),
                Typed::of(data_type).field_name()
            ),
        });
    }
    Ok(count)
}

/// The checkpoint bytes (little-endian, as `raw_data` would hold them) of tensor `tensor` whose
/// values are in the typed field named `field` (`"float_data"`, `"int32_data"`, `"int64_data"`,
/// `"double_data"` or `"uint64_data"`; `None` when no typed field holds values: `data_type`'s own
/// field, empty), given as that field's values back to back in little-endian order: 4 bytes each
/// for `float_data` and `int32_data`, 8 for the others. Decoded by the rules the
/// 1.15 folder reader applies: the field must be the one ONNX assigns to `data_type`, `dims` must
/// match the number of values (two per complex number), narrower integers wrap as ORT's
/// conversion does, `BOOL` is any non-zero value, and 16- and 8-bit float types refuse values that
/// are not a bit pattern. Memory is bounded by the input: the count is checked before anything is
/// allocated. `onnx_io` uses it for TensorProtos held by Python's `onnx`.
pub fn tensor_proto_field_values(
    tensor: &str,
    data_type: i32,
    dims: &[i64],
    field: Option<&str>,
    values: &[u8],
) -> Result<Vec<u8>> {
    let fail = |detail: String| Error::TensorProtoValues { tensor: tensor.to_owned(), detail };
    let data_type = DataType::from_code(data_type)
        .ok_or_else(|| Error::UnknownDataType { tensor: tensor.to_owned(), code: data_type })?;
    let expected = Typed::of(data_type);
    let field = field.unwrap_or(expected.field_name());
    let typed = [Typed::Float, Typed::Int32, Typed::String, Typed::Int64, Typed::Double, Typed::Uint64]
        .into_iter()
        .find(|t| t.field_name() == field)
        .ok_or_else(|| fail(format!("{field:?} is not a typed field of a TensorProto")))?;
    if typed != expected {
        return Err(fail(format!(
            "{} values belong in {}, found {field}",
            data_type.numpy_name(),
            expected.field_name()
        )));
    }
    let width = match typed {
        Typed::String => return Err(fail("string_data holds text, not values of fixed size".into())),
        Typed::Float | Typed::Int32 => 4,
        Typed::Int64 | Typed::Double | Typed::Uint64 => 8,
    };
    if !values.len().is_multiple_of(width) {
        return Err(fail(format!("{field} given as {} bytes, not whole {width}-byte values", values.len())));
    }
    check_count(tensor, data_type, dims, values.len() / width)?;
    let mut words32 = Vec::new();
    let mut words64 = Vec::new();
    if width == 4 {
        // chunks_exact gives whole chunks: the conversions cannot fail
        words32.extend(values.chunks_exact(4).map(|c| <[u8; 4]>::try_from(c).map_or(0, u32::from_le_bytes)));
    } else {
        words64.extend(values.chunks_exact(8).map(|c| <[u8; 8]>::try_from(c).map_or(0, u64::from_le_bytes)));
    }
    let mut out = Vec::new();
    unpack(data_type, &words32, &words64, &mut out).map_err(fail)?;
    Ok(out)
}

enum Packed {
    Dims,
    Varint32,
    Varint64(Typed),
    Fixed32(Typed),
    Fixed64,
}

/// Appends the checkpoint bytes of typed values (little-endian), unpacked as ORT does.
fn unpack(data_type: DataType, words32: &[u32], words64: &[u64], out: &mut Vec<u8>) -> Result<(), String> {
    use DataType::*;
    let bits = |limit: u32| {
        move |&w: &u32| {
            let v = w as i32;
            if v < 0 || v as u32 > limit {
                Err(format!(
                    "{} value {v} in int32_data is not a bit pattern in 0..{limit} (ORT: data overflow)",
                    data_type.numpy_name()
                ))
            } else {
                Ok(v as u32)
            }
        }
    };
    match data_type {
        Float | Complex64 => words32.iter().for_each(|w| out.extend_from_slice(&w.to_le_bytes())),
        Int32 => words32.iter().for_each(|w| out.extend_from_slice(&w.to_le_bytes())),
        Uint8 | Int8 => out.extend(words32.iter().map(|&w| w as u8)),
        Uint16 | Int16 => words32.iter().for_each(|&w| out.extend_from_slice(&(w as u16).to_le_bytes())),
        Bool => out.extend(words32.iter().map(|&w| u8::from(w != 0))),
        Float16 | Bfloat16 => {
            out.reserve(words32.len() * 2);
            for v in words32.iter().map(bits(0xFFFF)) {
                out.extend_from_slice(&(v? as u16).to_le_bytes());
            }
        }
        Float8E4M3Fn | Float8E4M3Fnuz | Float8E5M2 | Float8E5M2Fnuz => {
            out.reserve(words32.len());
            for v in words32.iter().map(bits(0xFF)) {
                out.push(v? as u8);
            }
        }
        Int64 | Uint64 | Double | Complex128 => {
            words64.iter().for_each(|w| out.extend_from_slice(&w.to_le_bytes()))
        }
        Uint32 => words64.iter().for_each(|&w| out.extend_from_slice(&(w as u32).to_le_bytes())),
        String => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::stream::tests::varint;
    use super::super::stream::Within;
    use super::*;

    fn key(field: u64, wire: u64, out: &mut Vec<u8>) {
        varint(field << 3 | wire, out);
    }

    fn bytes_field(field: u64, payload: &[u8], out: &mut Vec<u8>) {
        key(field, LEN, out);
        varint(payload.len() as u64, out);
        out.extend_from_slice(payload);
    }

    /// Decodes `message` as message 0 with `budget` bytes of budget: the tensor and its values.
    fn decode(message: &[u8], budget: u64) -> Result<(TensorProto, Vec<u8>)> {
        let mut reader = message;
        let mut go = || true;
        let mut s = Stream::new(&mut reader, message.len() as u64, Path::new("t"), &mut go);
        let bound = Bound { end: message.len() as u64, what: Within::Message(0) };
        let mut t = TensorProto::default();
        let mut out = Vec::new();
        t.decode(&mut s, bound, 0, &mut out, &mut Budget { left: budget })?;
        Ok((t, out))
    }

    fn float_tensor(name: &[u8], raw: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        key(DIMS, VARINT, &mut m);
        varint((raw.len() / 4) as u64, &mut m);
        key(DATA_TYPE, VARINT, &mut m);
        varint(1, &mut m);
        bytes_field(NAME, name, &mut m);
        bytes_field(RAW_DATA, raw, &mut m);
        m
    }

    #[test]
    fn raw_data_and_skipped_fields() {
        let mut m = float_tensor(b"w", &[1, 2, 3, 4]);
        bytes_field(12, b"a doc string", &mut m); // skipped
        key(99, VARINT, &mut m); // an unknown field
        varint(5, &mut m);
        key(98, FIXED64, &mut m);
        m.extend_from_slice(&[0; 8]);
        bytes_field(RAW_DATA, &[9, 9, 9, 9], &mut m); // the last raw_data wins
        bytes_field(NAME, b"v", &mut m); // the last name wins
        let (t, out) = decode(&m, 1 << 20).unwrap();
        assert_eq!((t.name.as_str(), t.dims.as_slice(), t.data_type), ("v", &[1i64][..], 1));
        assert_eq!(t.values, Some(Values::Bytes(0..4)));
        assert_eq!(out, [9, 9, 9, 9]);
    }

    #[test]
    fn malformed_messages_are_refused() {
        let refused = |m: &[u8]| decode(m, 1 << 20).map(|_| ()).unwrap_err().to_string();
        let mut wrong_wire = Vec::new();
        key(DATA_TYPE, LEN, &mut wrong_wire);
        varint(0, &mut wrong_wire);
        assert!(refused(&wrong_wire).contains("wire type 2"), "{}", refused(&wrong_wire));
        let mut group = Vec::new();
        key(50, START_GROUP, &mut group);
        assert!(refused(&group).contains("group"));
        assert!(refused(&[0]).contains("field number 0"));
        let mut past = Vec::new();
        key(RAW_DATA, LEN, &mut past);
        varint(100, &mut past);
        assert!(refused(&past).contains("raw_data needs 100 bytes"));
        let no_name = float_tensor(b"", &[0; 4]);
        assert!(refused(&no_name).contains("tensor name of message 0 is missing"));
        let bad_name = float_tensor(b"\xff", &[0; 4]);
        assert!(refused(&bad_name).contains("not valid UTF-8"));
        let mut external = float_tensor(b"w", &[0; 4]);
        key(DATA_LOCATION, VARINT, &mut external);
        varint(1, &mut external);
        assert!(refused(&external).contains("hold their data inline"));
    }

    #[test]
    fn the_budget_bounds_typed_values() {
        // 1000 int64 zeros: 1000 bytes of message, 8000 bytes of values (plus the copy)
        let mut m = Vec::new();
        key(DIMS, VARINT, &mut m);
        varint(1000, &mut m);
        key(DATA_TYPE, VARINT, &mut m);
        varint(7, &mut m);
        bytes_field(NAME, b"i", &mut m);
        bytes_field(INT64_DATA, &[0; 1000], &mut m);
        let (t, out) = decode(&m, 17_000).unwrap();
        assert_eq!((t.values, out.len()), (Some(Values::Bytes(0..8000)), 8000));
        let err = decode(&m, 10_000).unwrap_err();
        assert!(err.to_string().contains("bytes of memory per byte"), "{err}");
    }

    #[test]
    fn typed_field_values_follow_the_folder_rules() {
        let le32 = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let le64 = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let int8 = DataType::Int8.code();
        // narrow integers wrap; BOOL is any non-zero value; complex128 takes pairs
        assert_eq!(
            tensor_proto_field_values("i", int8, &[2], Some("int32_data"), &le32(&[300, -1])).unwrap(),
            [44, 255]
        );
        let bool_ = DataType::Bool.code();
        assert_eq!(
            tensor_proto_field_values("b", bool_, &[3], Some("int32_data"), &le32(&[0, 2, -1])).unwrap(),
            [0, 1, 1]
        );
        let pair = [1.5f64, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let c128 = DataType::Complex128.code();
        assert_eq!(tensor_proto_field_values("c", c128, &[1], Some("double_data"), &pair).unwrap(), pair);
        let u32_ = DataType::Uint32.code();
        let wide = u64::MAX.to_le_bytes();
        assert_eq!(tensor_proto_field_values("u", u32_, &[1], Some("uint64_data"), &wide).unwrap(), [255; 4]);
        let refused = |code: i32, dims: &[i64], field: Option<&str>, values: &[u8]| {
            tensor_proto_field_values("t", code, dims, field, values).unwrap_err().to_string()
        };
        let f16 = DataType::Float16.code();
        assert!(refused(f16, &[1], Some("int32_data"), &le32(&[0x10000]))
            .contains("float16 value 65536 in int32_data"));
        assert!(
            refused(DataType::Float8E5M2.code(), &[1], Some("int32_data"), &le32(&[-1])).contains("value -1")
        );
        assert!(refused(int8, &[3], Some("int32_data"), &le32(&[1, 2]))
            .contains("needs 3 values in int32_data, found 2"));
        assert!(refused(c128, &[2], Some("double_data"), &pair).contains("needs 4 values"));
        assert!(
            refused(int8, &[1], Some("int64_data"), &le64(&[1])).contains("int8 values belong in int32_data")
        );
        assert!(refused(int8, &[1], Some("int32_data"), &[0; 3]).contains("not whole 4-byte values"));
        assert!(refused(int8, &[1], Some("bogus"), &[]).contains("not a typed field"));
        assert!(refused(DataType::Float.code(), &[2], None, &[])
            .contains("float32 shape [2] needs 2 values in float_data"));
        assert_eq!(
            tensor_proto_field_values("e", DataType::Float.code(), &[0, 3], None, &[]).unwrap(),
            [0u8; 0]
        );
        assert!(refused(0, &[1], Some("int32_data"), &[]).contains("unknown data type code 0"));
        assert!(refused(int8, &[-1], Some("int32_data"), &[]).contains("negative dimension"));
        // huge dims: refused by count, before anything is allocated
        let huge = [1i64 << 31, 1 << 31];
        assert!(refused(DataType::Int64.code(), &huge, Some("int64_data"), &le64(&[1]))
            .contains("needs 4611686018427387904 values"));
        assert!(refused(DataType::Int64.code(), &[i64::MAX, i64::MAX], Some("int64_data"), &[])
            .contains("too large"));
    }
}
