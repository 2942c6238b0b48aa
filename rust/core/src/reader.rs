//! Verify a checkpoint and index it, without touching tensor bytes.
//!
//! Order of checks: length and identifier first (cheap, and gives the clearest message for files
//! that are not checkpoints at all), then the flatbuffer verifier with explicit limits, then the
//! semantics ORT relies on (version, data types, dims, sizes, unique names).

use flatbuffers::{ForwardsUOffset, Vector, VerifierOptions};

use crate::index::{
    CheckpointIndex, OptimizerGroupIndex, ParameterStateIndex, Property, PropertyValue, Storage, TensorIndex,
};
use crate::names::ensure_unique;
use crate::schema::fbs;
use crate::shape::{byte_size, element_count};
use crate::verify::verify_checkpoint;
use crate::{DataType, Error, Result};

/// The flatbuffer file identifier of ORT training checkpoints.
pub const FILE_IDENTIFIER: &[u8; 4] = b"ODTC";

/// Checkpoint versions this library reads.
pub const SUPPORTED_VERSIONS: [i32; 2] = [1, 2];

/// A root offset (4 bytes) and the file identifier (4 bytes).
const HEADER_LEN: usize = 8;

/// Nesting in the schema is at most five tables deep (Checkpoint > OptimizerGroup >
/// ParameterOptimizerState > Tensor); anything deeper is not a checkpoint.
const MAX_DEPTH: usize = 16;

fn verifier_options(len: usize) -> VerifierOptions {
    VerifierOptions {
        max_depth: MAX_DEPTH,
        // A table takes at least 4 bytes (its vtable offset), so no valid buffer has more.
        max_tables: len / 4 + 1,
        // Shared sub-objects can make a small file look huge to the verifier; a checkpoint writer
        // never shares tensors, so bound the verifier's work by the buffer's real size.
        max_apparent_size: len.saturating_mul(2),
        ignore_missing_null_terminator: false,
    }
}

/// Verifies `buf` as an ORT training checkpoint and returns its index.
pub fn index_checkpoint(buf: &[u8]) -> Result<CheckpointIndex> {
    if buf.len() < HEADER_LEN {
        return Err(Error::TooShort { len: buf.len() });
    }
    let mut found = [0u8; 4];
    found.copy_from_slice(&buf[4..HEADER_LEN]);
    if &found != FILE_IDENTIFIER {
        return Err(Error::WrongIdentifier { found });
    }
    verify_checkpoint(&verifier_options(buf.len()), buf)?;
    // SAFETY: verify_checkpoint checked every field of every table reachable from the root.
    let root = unsafe { fbs::root_as_checkpoint_unchecked(buf) };

    let version = root.version();
    if !SUPPORTED_VERSIONS.contains(&version) {
        return Err(Error::UnsupportedVersion { found: version });
    }
    // ORT writes no module state at all for a state without parameters.
    let module = root.module_state();
    let is_nominal = module.is_some_and(|m| m.is_nominal_state());
    let has_external_data = module.is_some_and(|m| m.has_external_data());
    let reader = TensorReader { buf, is_nominal, has_external_data };

    let trainable = reader.tensors(module.and_then(|m| m.requires_grad_params()))?;
    let frozen = reader.tensors(module.and_then(|m| m.frozen_params()))?;
    ensure_unique("parameter", trainable.iter().chain(&frozen).map(|t| t.name.as_str()))?;

    let optimizer_groups = read_optimizer_groups(&reader, root.optimizer_groups())?;
    let properties = read_properties(root.property_bag())?;

    Ok(CheckpointIndex {
        version,
        is_nominal,
        has_external_data,
        trainable,
        frozen,
        optimizer_groups,
        properties,
    })
}

type Tables<'a, T> = Option<Vector<'a, ForwardsUOffset<T>>>;

struct TensorReader<'b> {
    buf: &'b [u8],
    is_nominal: bool,
    has_external_data: bool,
}

impl<'b> TensorReader<'b> {
    /// A reader for tensors that must hold values whatever the checkpoint's nominal flag.
    fn with_values(&self) -> TensorReader<'b> {
        TensorReader { buf: self.buf, is_nominal: false, has_external_data: self.has_external_data }
    }

    fn tensors(&self, tensors: Tables<'_, fbs::Tensor<'_>>) -> Result<Vec<TensorIndex>> {
        tensors.map_or(Ok(Vec::new()), |v| v.iter().map(|t| self.tensor(&t)).collect())
    }

    fn tensor(&self, t: &fbs::Tensor<'_>) -> Result<TensorIndex> {
        let name = t.name().ok_or_else(|| Error::MissingField { what: "a tensor's name".into() })?.to_owned();
        let code = t.data_type().0;
        let data_type =
            DataType::from_code(code).ok_or_else(|| Error::UnknownDataType { tensor: name.clone(), code })?;
        let dims: Vec<i64> = t.dims().map(|d| d.iter().collect()).unwrap_or_default();
        let raw = t.raw_data();
        let raw_len = raw.map_or(0, |r| r.len());
        let strings = t.string_data();
        let external_offset = t.external_data_offset();

        // A nominal tensor is a name and a type; ORT writes neither dims nor data for it.
        // A nominal tensor has no values (ORT writes it without dims, so one element). A tensor of
        // zero elements also has none, but it is a real, empty tensor: it keeps its storage.
        let no_values = raw_len == 0 && strings.is_none_or(|s| s.is_empty()) && external_offset == -1;
        if self.is_nominal && no_values && element_count(&name, &dims)? != 0 {
            return Ok(TensorIndex { name, data_type, dims, storage: Storage::Nominal });
        }

        let storage = match data_type.element_size() {
            None => {
                if raw_len != 0 {
                    return Err(Error::WrongStorage {
                        tensor: name,
                        detail: "string tensor has raw_data; strings must be in string_data",
                    });
                }
                if external_offset != -1 {
                    return Err(Error::WrongStorage {
                        tensor: name,
                        detail: "string tensor refers to external data; strings cannot be stored externally",
                    });
                }
                let expected = element_count(&name, &dims)?;
                let values: Vec<String> =
                    strings.map(|s| s.iter().map(str::to_owned).collect()).unwrap_or_default();
                let found = values.len() as u64;
                if found != expected {
                    return Err(Error::StringCountMismatch { tensor: name, dims, expected, found });
                }
                Storage::Strings(values)
            }
            Some(_) => {
                if strings.is_some_and(|s| !s.is_empty()) {
                    return Err(Error::WrongStorage {
                        tensor: name,
                        detail: "numeric tensor has string_data",
                    });
                }
                let expected = byte_size(&name, data_type, &dims)?.unwrap_or(0);
                match external_offset {
                    -1 => {
                        let found = raw_len as u64;
                        if found != expected {
                            return Err(Error::DataLengthMismatch { tensor: name, dims, expected, found });
                        }
                        let offset = match raw {
                            Some(r) => offset_in(self.buf, r.bytes())?,
                            None => 0,
                        };
                        Storage::Inline { offset, len: raw_len }
                    }
                    offset if offset >= 0 => {
                        if raw_len != 0 {
                            return Err(Error::InlineAndExternal { tensor: name });
                        }
                        if !self.has_external_data {
                            return Err(Error::ExternalWithoutFlag { tensor: name });
                        }
                        let offset = offset as u64;
                        // ORT addresses external data with int64 offsets.
                        if offset.checked_add(expected).is_none_or(|end| end > i64::MAX as u64) {
                            return Err(Error::BadExternalOffset { tensor: name, offset: offset as i64 });
                        }
                        Storage::External { offset, len: expected }
                    }
                    offset => return Err(Error::BadExternalOffset { tensor: name, offset }),
                }
            }
        };
        Ok(TensorIndex { name, data_type, dims, storage })
    }
}

/// The position of `part` inside `buf`. The verifier guarantees `part` lies inside `buf`; this
/// checks it again rather than trusting pointer arithmetic.
fn offset_in(buf: &[u8], part: &[u8]) -> Result<usize> {
    let base = buf.as_ptr() as usize;
    let start = part.as_ptr() as usize;
    start
        .checked_sub(base)
        .filter(|off| off.checked_add(part.len()).is_some_and(|end| end <= buf.len()))
        .ok_or_else(|| Error::MissingField { what: "a tensor's raw_data inside the buffer".into() })
}

fn read_optimizer_groups(
    reader: &TensorReader<'_>,
    groups: Tables<'_, fbs::OptimizerGroup<'_>>,
) -> Result<Vec<OptimizerGroupIndex>> {
    let Some(groups) = groups else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(groups.len());
    for g in groups.iter() {
        let name = g
            .group_name()
            .ok_or_else(|| Error::MissingField { what: "an optimizer group's name".into() })?
            .to_owned();
        let mut states = Vec::new();
        if let Some(param_states) = g.optimizer_states() {
            states.reserve(param_states.len());
            for s in param_states.iter() {
                let param_name = s
                    .param_name()
                    .ok_or_else(|| Error::MissingField {
                        what: format!("a parameter name in optimizer group {name:?}"),
                    })?
                    .to_owned();
                // Only parameters can be nominal: momentums always hold values.
                let momentums = reader.with_values().tensors(s.momentums())?;
                ensure_unique("momentum", momentums.iter().map(|m| m.name.as_str()))?;
                states.push(ParameterStateIndex { param_name, momentums });
            }
        }
        ensure_unique("optimizer state parameter", states.iter().map(|s| s.param_name.as_str()))?;
        out.push(OptimizerGroupIndex {
            name,
            step: g.step(),
            initial_learning_rate: g.initial_learning_rate(),
            states,
        });
    }
    ensure_unique("optimizer group", out.iter().map(|g| g.name.as_str()))?;
    Ok(out)
}

fn read_properties(bag: Option<fbs::PropertyBag<'_>>) -> Result<Vec<Property>> {
    let Some(bag) = bag else { return Ok(Vec::new()) };
    let missing = |what: &str| Error::MissingField { what: format!("a {what} property's name") };
    let mut out = Vec::new();
    for p in bag.ints().into_iter().flatten() {
        let name = p.name().ok_or_else(|| missing("int"))?.to_owned();
        out.push(Property { name, value: PropertyValue::Int(p.value()) });
    }
    for p in bag.floats().into_iter().flatten() {
        let name = p.name().ok_or_else(|| missing("float"))?.to_owned();
        out.push(Property { name, value: PropertyValue::Float(p.value()) });
    }
    for p in bag.strings().into_iter().flatten() {
        let name = p.name().ok_or_else(|| missing("string"))?.to_owned();
        let value = p
            .value()
            .ok_or_else(|| Error::MissingField { what: format!("the value of string property {name:?}") })?
            .to_owned();
        out.push(Property { name, value: PropertyValue::Str(value) });
    }
    ensure_unique("property", out.iter().map(|p| p.name.as_str()))?;
    Ok(out)
}
