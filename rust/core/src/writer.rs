//! Build checkpoint bytes the way ORT 1.19.2 lays them out, and save them atomically.
//!
//! Output is deterministic: parameters, optimizer groups, parameter states, momentums and
//! properties are sorted by name (ORT sorts the same lists when it saves). Tensor data is placed
//! on a [`DATA_ALIGNMENT`]-byte boundary of the file so readers can view it in place.

use std::path::Path;

use flatbuffers::{FlatBufferBuilder, Push, PushAlignment, WIPOffset};

use crate::index::{Property, PropertyValue};
use crate::names::ensure_unique;
use crate::placement::Placement;
use crate::save::{save_checkpoint, SaveOptions};
use crate::schema::fbs;
use crate::shape::{byte_size, element_count};
use crate::{DataType, Error, Result};

/// The checkpoint version ORT 1.19.2 writes.
pub const WRITTEN_VERSION: i32 = 2;

/// Byte alignment of every tensor's `raw_data` in files this library writes: enough for any
/// element type, so memory-mapped readers get aligned views.
pub const DATA_ALIGNMENT: usize = 16;

/// The largest buffer a flatbuffer can address with its 32-bit signed offsets.
const MAX_FLATBUFFER_BYTES: u64 = (1 << 31) - 1;

/// A tensor to write; `data` borrows the caller's bytes, nothing is copied before serializing.
#[derive(Clone, Debug)]
pub struct TensorSpec<'a> {
    pub name: String,
    pub data_type: DataType,
    pub dims: Vec<i64>,
    pub data: TensorPayload<'a>,
}

#[derive(Clone, Debug)]
pub enum TensorPayload<'a> {
    /// Little-endian element bytes, `element count × element size` long.
    Bytes(&'a [u8]),
    /// The values of a string tensor.
    Strings(Vec<String>),
    /// No values: a tensor of a nominal checkpoint.
    Nominal,
}

#[derive(Clone, Debug)]
pub struct CheckpointSpec<'a> {
    /// The format version to write: 2 (ORT 1.18 and later read it, the default) or 1 (what ORT
    /// 1.16-1.17 read: the same tables without `is_nominal_state`, so nominal states cannot be
    /// written as version 1).
    pub version: i32,
    pub is_nominal: bool,
    pub trainable: Vec<TensorSpec<'a>>,
    pub frozen: Vec<TensorSpec<'a>>,
    pub optimizer_groups: Vec<OptimizerGroupSpec<'a>>,
    pub properties: Vec<Property>,
}

impl Default for CheckpointSpec<'_> {
    fn default() -> Self {
        CheckpointSpec {
            version: WRITTEN_VERSION,
            is_nominal: false,
            trainable: Vec::new(),
            frozen: Vec::new(),
            optimizer_groups: Vec::new(),
            properties: Vec::new(),
        }
    }
}

/// The format versions [`CheckpointSpec::version`] may name.
pub const WRITABLE_VERSIONS: [i32; 2] = [1, 2];

#[derive(Clone, Debug)]
pub struct OptimizerGroupSpec<'a> {
    pub name: String,
    pub step: i64,
    pub initial_learning_rate: f32,
    pub states: Vec<ParameterStateSpec<'a>>,
}

#[derive(Clone, Debug)]
pub struct ParameterStateSpec<'a> {
    pub param_name: String,
    pub momentums: Vec<TensorSpec<'a>>,
}

/// Serializes `spec` to checkpoint bytes with every tensor inline.
pub fn serialize_checkpoint(spec: &CheckpointSpec<'_>) -> Result<Vec<u8>> {
    validate(spec)?;
    build(spec, &Placement::all_inline())
}

/// Builds the flatbuffer; tensors that `placement` puts in the external file get its offset
/// instead of `raw_data`.
pub(crate) fn build(spec: &CheckpointSpec<'_>, placement: &Placement) -> Result<Vec<u8>> {
    if spec.version == 1 && placement.has_external() {
        // External data came after ORT 1.17, the last release that reads version 1.
        return Err(Error::InvalidSpec {
            detail: "external data cannot be written as format version 1 (ORT 1.16-1.17 cannot read it); \
                     write version 2, or keep the tensors inline (a flatbuffer holds up to 2 GiB)"
                .to_owned(),
        });
    }
    let estimate = estimate_size(spec, placement);
    if estimate > MAX_FLATBUFFER_BYTES {
        return Err(Error::TooLarge { bytes: estimate });
    }
    let capacity = usize::try_from(estimate).map_err(|_| Error::TooLarge { bytes: estimate })?;
    let mut fbb = FlatBufferBuilder::with_capacity(capacity);
    let mut w = Writer { fbb: &mut fbb, placement };

    let trainable = w.tensors(&spec.trainable);
    let frozen = w.tensors(&spec.frozen);
    let module_state = fbs::ModuleState::create(
        w.fbb,
        &fbs::ModuleStateArgs {
            requires_grad_params: Some(trainable),
            frozen_params: Some(frozen),
            is_nominal_state: spec.is_nominal,
            has_external_data: placement.has_external(),
        },
    );
    let optimizer_groups =
        (!spec.optimizer_groups.is_empty()).then(|| w.optimizer_groups(&spec.optimizer_groups));
    let property_bag = (!spec.properties.is_empty()).then(|| write_properties(w.fbb, &spec.properties));
    let root = fbs::Checkpoint::create(
        &mut fbb,
        &fbs::CheckpointArgs {
            version: spec.version,
            module_state: Some(module_state),
            optimizer_groups,
            property_bag,
        },
    );
    fbs::finish_checkpoint_buffer(&mut fbb, root);
    // The builder fills its buffer back to front; move the data to the front of that same buffer
    // instead of copying it out, so a save never holds two copies of the file.
    let (mut buf, head) = fbb.collapse();
    buf.drain(..head);
    Ok(buf)
}

/// Serializes `spec` and writes it to `path` atomically, every tensor inline: a temporary file in
/// the same directory is written, synced and renamed over `path`, so `path` holds either the old
/// or the new checkpoint, never a partial one. See [`crate::save_checkpoint`] for external data.
pub fn write_checkpoint(path: &Path, spec: &CheckpointSpec<'_>) -> Result<()> {
    save_checkpoint(path, spec, &SaveOptions { external_data_threshold: None }).map(|_| ())
}

/// Every tensor of `spec` in the order the file lists them: sorted trainable, sorted frozen,
/// then momentums by sorted group, parameter and momentum name.
pub(crate) fn tensors_in_file_order<'s, 'a>(spec: &'s CheckpointSpec<'a>) -> Vec<&'s TensorSpec<'a>> {
    let mut out = sorted_by_name(&spec.trainable, |t| &t.name);
    out.extend(sorted_by_name(&spec.frozen, |t| &t.name));
    for g in sorted_by_name(&spec.optimizer_groups, |g| &g.name) {
        for s in sorted_by_name(&g.states, |s| &s.param_name) {
            out.extend(sorted_by_name(&s.momentums, |m| &m.name));
        }
    }
    out
}

/// Checks what ORT relies on: consistent dims, types and data, unique names.
pub(crate) fn validate(spec: &CheckpointSpec<'_>) -> Result<()> {
    if !WRITABLE_VERSIONS.contains(&spec.version) {
        return Err(Error::InvalidSpec {
            detail: format!(
                "cannot write checkpoint format version {}; the versions ortckpt writes are 1 (ORT 1.16-1.17) \
                 and 2 (ORT 1.18 and later)",
                spec.version
            ),
        });
    }
    if spec.version == 1 && spec.is_nominal {
        return Err(Error::InvalidSpec {
            detail: "a nominal checkpoint cannot be written as format version 1: version 1 (ORT 1.16-1.17) \
                     has no is_nominal_state flag; write version 2, or load the full checkpoint instead"
                .to_owned(),
        });
    }
    for t in spec.trainable.iter().chain(&spec.frozen) {
        validate_tensor(t, spec.is_nominal)?;
    }
    ensure_unique("parameter", spec.trainable.iter().chain(&spec.frozen).map(|t| t.name.as_str()))?;
    for g in &spec.optimizer_groups {
        for s in &g.states {
            for m in &s.momentums {
                validate_tensor(m, false)?;
            }
            ensure_unique("momentum", s.momentums.iter().map(|m| m.name.as_str()))?;
        }
        ensure_unique("optimizer state parameter", g.states.iter().map(|s| s.param_name.as_str()))?;
    }
    ensure_unique("optimizer group", spec.optimizer_groups.iter().map(|g| g.name.as_str()))?;
    ensure_unique("property", spec.properties.iter().map(|p| p.name.as_str()))?;
    Ok(())
}

/// An upper bound of the flatbuffer's size, so the builder never reallocates and never hits the
/// flatbuffers crate's 2 GiB assertion.
fn estimate_size(spec: &CheckpointSpec<'_>, placement: &Placement) -> u64 {
    let mut estimate: u64 = 1024;
    for t in tensors_in_file_order(spec) {
        let fixed = 96 + t.name.len() as u64 + 8 * t.dims.len() as u64;
        let data = match &t.data {
            TensorPayload::Bytes(_) if placement.offset_of(t).is_some() => 0,
            TensorPayload::Bytes(b) => b.len() as u64 + 2 * DATA_ALIGNMENT as u64,
            TensorPayload::Strings(values) => values.iter().map(|s| s.len() as u64 + 12).sum(),
            TensorPayload::Nominal => 8,
        };
        estimate = estimate.saturating_add(fixed).saturating_add(data);
    }
    for g in &spec.optimizer_groups {
        estimate = estimate.saturating_add(64 + g.name.len() as u64);
        for s in &g.states {
            estimate = estimate.saturating_add(64 + s.param_name.len() as u64);
        }
    }
    for p in &spec.properties {
        let value_len = match &p.value {
            PropertyValue::Str(s) => s.len() as u64,
            _ => 8,
        };
        estimate = estimate.saturating_add(64 + p.name.len() as u64 + value_len);
    }
    estimate
}

/// Validates one tensor's dims, type and data against each other.
fn validate_tensor(t: &TensorSpec<'_>, nominal_allowed: bool) -> Result<()> {
    let name = t.name.as_str();
    match (&t.data, t.data_type.element_size()) {
        (TensorPayload::Nominal, _) => {
            element_count(name, &t.dims)?;
            if !nominal_allowed {
                return Err(Error::InvalidSpec {
                    detail: format!(
                        "tensor {name:?} has no values; only parameters of a nominal checkpoint may omit them"
                    ),
                });
            }
        }
        (TensorPayload::Bytes(bytes), Some(_)) => {
            let expected = byte_size(name, t.data_type, &t.dims)?.unwrap_or(0);
            let found = bytes.len() as u64;
            if found != expected {
                return Err(Error::DataLengthMismatch {
                    tensor: t.name.clone(),
                    dims: t.dims.clone(),
                    expected,
                    found,
                });
            }
        }
        (TensorPayload::Strings(values), None) => {
            let expected = element_count(name, &t.dims)?;
            let found = values.len() as u64;
            if found != expected {
                return Err(Error::StringCountMismatch {
                    tensor: t.name.clone(),
                    dims: t.dims.clone(),
                    expected,
                    found,
                });
            }
        }
        (TensorPayload::Bytes(_), None) => {
            return Err(Error::WrongStorage {
                tensor: t.name.clone(),
                detail: "string tensor given raw bytes; give its values as strings",
            })
        }
        (TensorPayload::Strings(_), Some(_)) => {
            return Err(Error::WrongStorage {
                tensor: t.name.clone(),
                detail: "numeric tensor given string values",
            })
        }
    }
    Ok(())
}

/// Pushing this aligns the builder's head to [`DATA_ALIGNMENT`] (and makes the whole buffer at
/// least that aligned) without writing anything.
struct AlignData;

impl Push for AlignData {
    type Output = ();
    unsafe fn push(&self, _dst: &mut [u8], _written_len: usize) {}
    fn size() -> usize {
        0
    }
    fn alignment() -> PushAlignment {
        PushAlignment::new(DATA_ALIGNMENT)
    }
}

/// Writes `bytes` as a `[uint8]` vector whose first byte lands on a [`DATA_ALIGNMENT`] boundary
/// of the finished buffer. The builder writes back to front, so: align the head, pad by the
/// amount that makes `pad + len` a multiple of the alignment, then write the vector.
fn aligned_bytes<'f>(
    fbb: &mut FlatBufferBuilder<'f>,
    bytes: &[u8],
) -> WIPOffset<flatbuffers::Vector<'f, u8>> {
    fbb.push(AlignData);
    let pad = (DATA_ALIGNMENT - bytes.len() % DATA_ALIGNMENT) % DATA_ALIGNMENT;
    for _ in 0..pad {
        fbb.push(0u8);
    }
    fbb.create_vector(bytes)
}

pub(crate) fn sorted_by_name<T>(items: &[T], name: impl Fn(&T) -> &str) -> Vec<&T> {
    let mut sorted: Vec<&T> = items.iter().collect();
    sorted.sort_by(|a, b| name(a).cmp(name(b)));
    sorted
}

type TensorVector<'f> = WIPOffset<flatbuffers::Vector<'f, flatbuffers::ForwardsUOffset<fbs::Tensor<'f>>>>;
type GroupVector<'f> =
    WIPOffset<flatbuffers::Vector<'f, flatbuffers::ForwardsUOffset<fbs::OptimizerGroup<'f>>>>;

struct Writer<'w, 'f> {
    fbb: &'w mut FlatBufferBuilder<'f>,
    placement: &'w Placement,
}

impl<'f> Writer<'_, 'f> {
    fn tensors(&mut self, tensors: &[TensorSpec<'_>]) -> TensorVector<'f> {
        let offsets: Vec<_> =
            sorted_by_name(tensors, |t| &t.name).into_iter().map(|t| self.tensor(t)).collect();
        self.fbb.create_vector(&offsets)
    }

    fn tensor(&mut self, t: &TensorSpec<'_>) -> WIPOffset<fbs::Tensor<'f>> {
        let external = self.placement.offset_of(t);
        let fbb = &mut *self.fbb;
        let (raw_data, string_data) = match (&t.data, external) {
            // External tensors have no raw_data field at all, as ORT writes them.
            (TensorPayload::Bytes(_), Some(_)) => (None, None),
            (TensorPayload::Bytes(bytes), None) => (Some(aligned_bytes(fbb, bytes)), None),
            (TensorPayload::Strings(values), _) => {
                let strings: Vec<_> = values.iter().map(|s| fbb.create_string(s)).collect();
                (None, Some(fbb.create_vector(&strings)))
            }
            // ORT requires raw_data to be present (if empty) on every numeric tensor, nominal ones too.
            (TensorPayload::Nominal, _) => (Some(fbb.create_vector::<u8>(&[])), None),
        };
        let name = fbb.create_string(&t.name);
        // Readers tell a nominal tensor (no values) from a zero-element one (no values either) by
        // its element count, so a nominal tensor never gets a zero-element shape: it is written
        // without dims then, as ORT writes every nominal tensor.
        let zero_elements = t.dims.contains(&0);
        let dims: &[i64] =
            if matches!(t.data, TensorPayload::Nominal) && zero_elements { &[] } else { &t.dims };
        let dims = fbb.create_vector(dims);
        fbs::Tensor::create(
            fbb,
            &fbs::TensorArgs {
                name: Some(name),
                doc_string: None,
                dims: Some(dims),
                data_type: fbs::TensorDataType(t.data_type.code()),
                raw_data,
                string_data,
                external_data_offset: external.map_or(-1, |o| o as i64),
            },
        )
    }

    fn optimizer_groups(&mut self, groups: &[OptimizerGroupSpec<'_>]) -> GroupVector<'f> {
        let offsets: Vec<_> = sorted_by_name(groups, |g| &g.name)
            .into_iter()
            .map(|g| {
                let states: Vec<_> = sorted_by_name(&g.states, |s| &s.param_name)
                    .into_iter()
                    .map(|s| {
                        let momentums = self.tensors(&s.momentums);
                        let param_name = self.fbb.create_string(&s.param_name);
                        fbs::ParameterOptimizerState::create(
                            self.fbb,
                            &fbs::ParameterOptimizerStateArgs {
                                param_name: Some(param_name),
                                momentums: Some(momentums),
                            },
                        )
                    })
                    .collect();
                let optimizer_states = self.fbb.create_vector(&states);
                let group_name = self.fbb.create_string(&g.name);
                keeping_negative_zero(self.fbb, g.initial_learning_rate, |fbb| {
                    fbs::OptimizerGroup::create(
                        fbb,
                        &fbs::OptimizerGroupArgs {
                            group_name: Some(group_name),
                            step: g.step,
                            initial_learning_rate: g.initial_learning_rate,
                            optimizer_states: Some(optimizer_states),
                        },
                    )
                })
            })
            .collect();
        self.fbb.create_vector(&offsets)
    }
}

fn write_properties<'f>(
    fbb: &mut FlatBufferBuilder<'f>,
    properties: &[Property],
) -> WIPOffset<fbs::PropertyBag<'f>> {
    let sorted = sorted_by_name(properties, |p| &p.name);
    let mut ints = Vec::new();
    let mut floats = Vec::new();
    let mut strings = Vec::new();
    for p in sorted {
        let name = Some(fbb.create_string(&p.name));
        match &p.value {
            PropertyValue::Int(value) => {
                ints.push(fbs::IntProperty::create(fbb, &fbs::IntPropertyArgs { name, value: *value }))
            }
            PropertyValue::Float(value) => floats.push(keeping_negative_zero(fbb, *value, |fbb| {
                fbs::FloatProperty::create(fbb, &fbs::FloatPropertyArgs { name, value: *value })
            })),
            PropertyValue::Str(value) => {
                let value = Some(fbb.create_string(value));
                strings.push(fbs::StringProperty::create(fbb, &fbs::StringPropertyArgs { name, value }))
            }
        }
    }
    let ints = Some(fbb.create_vector(&ints));
    let floats = Some(fbb.create_vector(&floats));
    let strings = Some(fbb.create_vector(&strings));
    fbs::PropertyBag::create(fbb, &fbs::PropertyBagArgs { ints, floats, strings })
}

/// Runs `create` so that a float field holding -0.0 is written: it equals the schema default 0.0,
/// which flatbuffers builders leave out, and the sign would be lost.
fn keeping_negative_zero<'f, T>(
    fbb: &mut FlatBufferBuilder<'f>,
    value: f32,
    create: impl FnOnce(&mut FlatBufferBuilder<'f>) -> T,
) -> T {
    let negative_zero = value == 0.0 && value.is_sign_negative();
    fbb.force_defaults(negative_zero);
    let out = create(fbb);
    fbb.force_defaults(false);
    out
}
