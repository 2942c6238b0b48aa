//! The JSON header parsed straight into entries by serde_json with our own visitors: each value is
//! checked for its type as it is read (no generic JSON tree is built, nothing is skipped
//! unread), repeated keys inside an entry or in `__metadata__` are refused, and the entry being
//! read is remembered so an error can name its tensor.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::dtypes::{dtype_of, SafetensorsDtype};
use super::error::SafetensorsError as Error;
use super::error::{SafetensorsError, SafetensorsErrorKind};

/// The most dimensions a tensor may have: numpy 1.x's limit (numpy 2 allows 64), so that every
/// tensor read can become a numpy array.
pub const SAFETENSORS_MAX_RANK: usize = 32;

const METADATA_KEY: &str = "__metadata__";

/// One tensor entry as read (its range not yet checked).
pub(super) struct Entry {
    pub(super) name: String,
    pub(super) dtype: &'static SafetensorsDtype,
    pub(super) shape: Vec<u64>,
    pub(super) begin: u64,
    pub(super) end: u64,
}

pub(super) struct Parsed {
    pub(super) metadata: Option<Vec<(String, String)>>,
    pub(super) entries: Vec<Entry>,
}

/// What the parse was doing when it failed: the key whose value was being read, and whether the
/// failure is an unsupported dtype (a valid file ortckpt cannot convert) rather than a malformation.
#[derive(Default)]
struct Context {
    key: RefCell<Option<String>>,
    unsupported: RefCell<bool>,
}

/// Parses the header `json` (which starts with `{`; trailing JSON whitespace is allowed).
pub(super) fn parse(json: &[u8]) -> Result<Parsed, Error> {
    let cx = Context::default();
    let mut de = serde_json::Deserializer::from_slice(json);
    let parsed = HeaderVisitor { cx: &cx }.deserialize(&mut de).and_then(|p| de.end().map(|()| p));
    parsed.map_err(|e| explain(&e, cx))
}

fn explain(e: &serde_json::Error, cx: Context) -> Error {
    let key = cx.key.into_inner();
    if cx.unsupported.into_inner() {
        let detail = e.to_string();
        let detail = detail.split(" at line ").next().unwrap_or_default().to_string();
        return Error { kind: SafetensorsErrorKind::UnsupportedDtype, tensor: key, detail };
    }
    if e.is_syntax() || e.is_eof() {
        return SafetensorsError::malformed(None, format!("its header is not UTF-8 JSON ({e})"));
    }
    match key {
        Some(k) if k == METADATA_KEY => {
            SafetensorsError::malformed(None, format!("its __metadata__ is not an object of strings ({e})"))
        }
        key => SafetensorsError::malformed(key, e.to_string()),
    }
}

/// A bounded excerpt of a string from the file, for messages.
fn clip(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((at, _)) => format!("{:?}...", &s[..at]),
        None => format!("{s:?}"),
    }
}

struct HeaderVisitor<'c> {
    cx: &'c Context,
}

impl<'de> DeserializeSeed<'de> for HeaderVisitor<'_> {
    type Value = Parsed;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Parsed, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderVisitor<'_> {
    type Value = Parsed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object of tensor entries")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let mut entries = Vec::new();
        let mut metadata = None;
        let mut saw_metadata = false;
        while let Some(name) = map.next_key::<String>()? {
            let is_metadata = name == METADATA_KEY;
            *self.cx.key.borrow_mut() = Some(name);
            if is_metadata {
                if saw_metadata {
                    return Err(de::Error::custom("it appears twice"));
                }
                saw_metadata = true;
                metadata = map.next_value_seed(MetadataVisitor)?;
            } else {
                let (dtype, shape, begin, end) = map.next_value_seed(EntryVisitor { cx: self.cx })?;
                let name = self.cx.key.borrow_mut().take().unwrap_or_default();
                entries.push(Entry { name, dtype, shape, begin, end });
            }
            *self.cx.key.borrow_mut() = None;
        }
        Ok(Parsed { metadata, entries })
    }
}

/// `__metadata__`: null, or an object of strings with distinct keys.
struct MetadataVisitor;

impl<'de> DeserializeSeed<'de> for MetadataVisitor {
    type Value = Option<Vec<(String, String)>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MetadataVisitor {
    type Value = Option<Vec<(String, String)>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of strings, or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut pairs = Vec::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<String>()?;
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format_args!("key {} appears twice", clip(&key))));
            }
            pairs.push((key, value));
        }
        Ok(Some(pairs))
    }
}

/// A tensor entry: exactly `dtype`, `shape` and `data_offsets`, each once.
struct EntryVisitor<'c> {
    cx: &'c Context,
}

type EntryValue = (&'static SafetensorsDtype, Vec<u64>, u64, u64);

impl<'de> DeserializeSeed<'de> for EntryVisitor<'_> {
    type Value = EntryValue;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<EntryValue, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntryVisitor<'_> {
    type Value = EntryValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an entry {dtype, shape, data_offsets}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EntryValue, A::Error> {
        let (mut dtype, mut shape, mut offsets) = (None, None, None);
        while let Some(field) = map.next_key_seed(FieldVisitor)? {
            let repeated = match field {
                Field::Dtype => dtype.replace(map.next_value_seed(DtypeVisitor { cx: self.cx })?).is_some(),
                Field::Shape => shape.replace(map.next_value_seed(ShapeVisitor)?).is_some(),
                Field::DataOffsets => offsets.replace(map.next_value_seed(OffsetsVisitor)?).is_some(),
            };
            if repeated {
                return Err(de::Error::custom(format_args!("its entry gives {:?} twice", field.name())));
            }
        }
        let missing = |field: Field| de::Error::custom(format_args!("its entry lacks {:?}", field.name()));
        let dtype = dtype.ok_or_else(|| missing(Field::Dtype))?;
        let shape = shape.ok_or_else(|| missing(Field::Shape))?;
        let (begin, end) = offsets.ok_or_else(|| missing(Field::DataOffsets))?;
        Ok((dtype, shape, begin, end))
    }
}

#[derive(Clone, Copy)]
enum Field {
    Dtype,
    Shape,
    DataOffsets,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Dtype => "dtype",
            Field::Shape => "shape",
            Field::DataOffsets => "data_offsets",
        }
    }
}

struct FieldVisitor;

impl<'de> DeserializeSeed<'de> for FieldVisitor {
    type Value = Field;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Field, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for FieldVisitor {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("one of dtype, shape, data_offsets")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
        match v {
            "dtype" => Ok(Field::Dtype),
            "shape" => Ok(Field::Shape),
            "data_offsets" => Ok(Field::DataOffsets),
            other => Err(E::custom(format_args!(
                "its entry has the unknown key {}: an entry is exactly {{dtype, shape, data_offsets}}",
                clip(other)
            ))),
        }
    }
}

struct DtypeVisitor<'c> {
    cx: &'c Context,
}

impl<'de> DeserializeSeed<'de> for DtypeVisitor<'_> {
    type Value = &'static SafetensorsDtype;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for DtypeVisitor<'_> {
    type Value = &'static SafetensorsDtype;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a dtype name such as \"F32\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        dtype_of(v).ok_or_else(|| {
            *self.cx.unsupported.borrow_mut() = true;
            E::custom(format_args!(
                "it has safetensors dtype {}, which ONNX Runtime checkpoints cannot hold",
                clip(v)
            ))
        })
    }
}

/// A shape: at most `SAFETENSORS_MAX_RANK` non-negative integers.
struct ShapeVisitor;

impl<'de> DeserializeSeed<'de> for ShapeVisitor {
    type Value = Vec<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u64>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Vec<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a shape: a list of non-negative integers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
        let mut shape = Vec::new();
        while let Some(dim) = seq.next_element_seed(Count("a shape: a list of non-negative integers"))? {
            if shape.len() == SAFETENSORS_MAX_RANK {
                return Err(de::Error::custom(format_args!(
                    "its shape has more than {SAFETENSORS_MAX_RANK} dimensions (numpy's limit)"
                )));
            }
            shape.push(dim);
        }
        Ok(shape)
    }
}

/// `data_offsets`: exactly two non-negative integers.
struct OffsetsVisitor;

const OFFSETS: &str = "data_offsets: two non-negative integers [begin, end]";

impl<'de> DeserializeSeed<'de> for OffsetsVisitor {
    type Value = (u64, u64);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(u64, u64), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for OffsetsVisitor {
    type Value = (u64, u64);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(OFFSETS)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(u64, u64), A::Error> {
        let wrong = || de::Error::custom(format_args!("its {OFFSETS} are not two"));
        let begin = seq.next_element_seed(Count(OFFSETS))?.ok_or_else(wrong)?;
        let end = seq.next_element_seed(Count(OFFSETS))?.ok_or_else(wrong)?;
        if seq.next_element_seed(Count(OFFSETS))?.is_some() {
            return Err(wrong());
        }
        Ok((begin, end))
    }
}

/// A non-negative integer (JSON floats, booleans and negative numbers are refused); the string
/// says what it is part of, for messages.
#[derive(Clone, Copy)]
struct Count(&'static str);

impl<'de> DeserializeSeed<'de> for Count {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_u64(self)
    }
}

impl<'de> Visitor<'de> for Count {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }
}
