//! Build checkpoint flatbuffers field by field (slots from the generated code), bypassing the
//! writer, for malformed files, seeds and shapes `serialize_checkpoint` never writes (external
//! offsets, version 1, doc strings, missing names, ...).

use flatbuffers::{FlatBufferBuilder, TableFinishedWIPOffset, WIPOffset};

use crate::schema::fbs;

type Table = WIPOffset<TableFinishedWIPOffset>;

/// A tensor table; `None` fields are left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawTensor {
    /// `name`.
    pub name: Option<String>,
    /// `doc_string`.
    pub doc_string: Option<String>,
    /// `dims`.
    pub dims: Option<Vec<i64>>,
    /// `data_type` (0, the default, is left out).
    pub data_type: i32,
    /// `raw_data`.
    pub raw: Option<Vec<u8>>,
    /// `string_data`.
    pub strings: Option<Vec<String>>,
    /// `external_data_offset`; -1 (the default) is left out.
    pub external_offset: i64,
    /// A `uint32` in field id 7, which the schema does not have (as a newer writer might add).
    pub unknown: Option<u32>,
}

impl RawTensor {
    /// A float tensor with inline zero bytes.
    pub fn floats(name: &str, dims: &[i64]) -> RawTensor {
        let count: i64 = dims.iter().product();
        RawTensor {
            name: Some(name.into()),
            dims: Some(dims.to_vec()),
            data_type: 1,
            raw: Some(vec![0; usize::try_from(count * 4).unwrap_or(0)]),
            external_offset: -1,
            ..RawTensor::default()
        }
    }

    /// A float tensor whose bytes are at `offset` of the external file.
    pub fn external(name: &str, dims: &[i64], offset: i64) -> RawTensor {
        RawTensor { raw: None, external_offset: offset, ..RawTensor::floats(name, dims) }
    }

    /// A string tensor of shape `[values.len()]`.
    pub fn strings(name: &str, values: &[&str]) -> RawTensor {
        RawTensor {
            name: Some(name.into()),
            dims: Some(vec![values.len() as i64]),
            data_type: 8,
            strings: Some(values.iter().map(|s| s.to_string()).collect()),
            external_offset: -1,
            ..RawTensor::default()
        }
    }

    /// A tensor of a nominal checkpoint as ORT writes it: a name and a type only.
    pub fn nominal(name: &str) -> RawTensor {
        RawTensor { dims: None, raw: None, ..RawTensor::floats(name, &[]) }
    }
}

/// An optimizer group table; its states are `(param_name, momentums)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawGroup {
    /// `group_name`.
    pub name: Option<String>,
    /// `step` (always written).
    pub step: i64,
    /// `initial_learning_rate` (always written).
    pub initial_learning_rate: f32,
    /// `optimizer_states`: parameter name and momentums of each.
    pub states: Vec<(Option<String>, Vec<RawTensor>)>,
}

/// A checkpoint; the property bag and the groups vector are left out when empty.
#[derive(Clone, Debug, PartialEq)]
pub struct RawCheckpoint {
    /// `version` (always written).
    pub version: i32,
    /// Whether to write a module state.
    pub module: bool,
    /// `is_nominal_state`.
    pub nominal: bool,
    /// `has_external_data`.
    pub has_external_data: bool,
    /// `requires_grad_params`.
    pub trainable: Vec<RawTensor>,
    /// `frozen_params`.
    pub frozen: Vec<RawTensor>,
    /// `optimizer_groups`.
    pub groups: Vec<RawGroup>,
    /// Integer properties (name, value).
    pub ints: Vec<(Option<String>, i64)>,
    /// Float properties (name, value).
    pub floats: Vec<(Option<String>, f32)>,
    /// String properties (name, value).
    pub strings: Vec<(Option<String>, Option<String>)>,
}

impl Default for RawCheckpoint {
    /// Version 2, an empty module state, nothing else.
    fn default() -> Self {
        RawCheckpoint {
            version: 2,
            module: true,
            nominal: false,
            has_external_data: false,
            trainable: Vec::new(),
            frozen: Vec::new(),
            groups: Vec::new(),
            ints: Vec::new(),
            floats: Vec::new(),
            strings: Vec::new(),
        }
    }
}

fn string<'f>(fbb: &mut FlatBufferBuilder<'f>, s: Option<&str>) -> Option<WIPOffset<&'f str>> {
    s.map(|s| fbb.create_string(s))
}

fn tensor(fbb: &mut FlatBufferBuilder<'_>, t: &RawTensor) -> Table {
    use fbs::Tensor as T;
    let name = string(fbb, t.name.as_deref());
    let doc = string(fbb, t.doc_string.as_deref());
    let dims = t.dims.as_deref().map(|d| fbb.create_vector(d));
    let raw = t.raw.as_deref().map(|r| fbb.create_vector(r));
    let strings = t.strings.as_deref().map(|v| {
        let offsets: Vec<_> = v.iter().map(|s| fbb.create_string(s)).collect();
        fbb.create_vector(&offsets)
    });
    let start = fbb.start_table();
    if let Some(o) = name {
        fbb.push_slot_always(T::VT_NAME, o);
    }
    if let Some(o) = doc {
        fbb.push_slot_always(T::VT_DOC_STRING, o);
    }
    if let Some(o) = dims {
        fbb.push_slot_always(T::VT_DIMS, o);
    }
    fbb.push_slot::<i32>(T::VT_DATA_TYPE, t.data_type, 0);
    if let Some(o) = raw {
        fbb.push_slot_always(T::VT_RAW_DATA, o);
    }
    if let Some(o) = strings {
        fbb.push_slot_always(T::VT_STRING_DATA, o);
    }
    fbb.push_slot::<i64>(T::VT_EXTERNAL_DATA_OFFSET, t.external_offset, -1);
    if let Some(value) = t.unknown {
        fbb.push_slot_always::<u32>(T::VT_EXTERNAL_DATA_OFFSET + 2, value);
    }
    fbb.end_table(start)
}

type Tables<'f> = WIPOffset<flatbuffers::Vector<'f, flatbuffers::ForwardsUOffset<TableFinishedWIPOffset>>>;

fn tensors<'f>(fbb: &mut FlatBufferBuilder<'f>, ts: &[RawTensor]) -> Tables<'f> {
    let offsets: Vec<Table> = ts.iter().map(|t| tensor(fbb, t)).collect();
    fbb.create_vector(&offsets)
}

fn property<V: flatbuffers::Push + Copy>(
    fbb: &mut FlatBufferBuilder<'_>,
    name: Option<&str>,
    value: V,
) -> Table {
    let name = string(fbb, name);
    let start = fbb.start_table();
    if let Some(o) = name {
        fbb.push_slot_always(fbs::IntProperty::VT_NAME, o);
    }
    fbb.push_slot_always::<V>(fbs::IntProperty::VT_VALUE, value);
    fbb.end_table(start)
}

impl RawCheckpoint {
    /// The checkpoint's bytes.
    pub fn build(&self) -> Vec<u8> {
        let mut fbb = FlatBufferBuilder::new();
        let fbb = &mut fbb;
        let module = self.module.then(|| {
            use fbs::ModuleState as T;
            let trainable = tensors(fbb, &self.trainable);
            let frozen = tensors(fbb, &self.frozen);
            let start = fbb.start_table();
            fbb.push_slot_always(T::VT_REQUIRES_GRAD_PARAMS, trainable);
            fbb.push_slot_always(T::VT_FROZEN_PARAMS, frozen);
            fbb.push_slot::<bool>(T::VT_IS_NOMINAL_STATE, self.nominal, false);
            fbb.push_slot::<bool>(T::VT_HAS_EXTERNAL_DATA, self.has_external_data, false);
            fbb.end_table(start)
        });
        let groups = (!self.groups.is_empty()).then(|| {
            let offsets: Vec<Table> = self.groups.iter().map(|g| group(fbb, g)).collect();
            fbb.create_vector(&offsets)
        });
        let bag = (!(self.ints.is_empty() && self.floats.is_empty() && self.strings.is_empty())).then(|| {
            use fbs::PropertyBag as T;
            let ints: Vec<Table> = self.ints.iter().map(|(n, v)| property(fbb, n.as_deref(), *v)).collect();
            let floats: Vec<Table> =
                self.floats.iter().map(|(n, v)| property(fbb, n.as_deref(), *v)).collect();
            let strings: Vec<Table> = self
                .strings
                .iter()
                .map(|(n, v)| {
                    let v = string(fbb, v.as_deref());
                    let n = string(fbb, n.as_deref());
                    let start = fbb.start_table();
                    if let Some(o) = n {
                        fbb.push_slot_always(fbs::StringProperty::VT_NAME, o);
                    }
                    if let Some(o) = v {
                        fbb.push_slot_always(fbs::StringProperty::VT_VALUE, o);
                    }
                    fbb.end_table(start)
                })
                .collect();
            let (ints, floats, strings) =
                (fbb.create_vector(&ints), fbb.create_vector(&floats), fbb.create_vector(&strings));
            let start = fbb.start_table();
            fbb.push_slot_always(T::VT_INTS, ints);
            fbb.push_slot_always(T::VT_FLOATS, floats);
            fbb.push_slot_always(T::VT_STRINGS, strings);
            fbb.end_table(start)
        });
        use fbs::Checkpoint as T;
        let start = fbb.start_table();
        fbb.push_slot_always::<i32>(T::VT_VERSION, self.version);
        if let Some(o) = module {
            fbb.push_slot_always(T::VT_MODULE_STATE, o);
        }
        if let Some(o) = groups {
            fbb.push_slot_always(T::VT_OPTIMIZER_GROUPS, o);
        }
        if let Some(o) = bag {
            fbb.push_slot_always(T::VT_PROPERTY_BAG, o);
        }
        let root = fbb.end_table(start);
        fbb.finish(root, Some("ODTC"));
        fbb.finished_data().to_vec()
    }
}

fn group(fbb: &mut FlatBufferBuilder<'_>, g: &RawGroup) -> Table {
    use fbs::OptimizerGroup as T;
    use fbs::ParameterOptimizerState as S;
    let states: Vec<Table> = g
        .states
        .iter()
        .map(|(p, ms)| {
            let p = string(fbb, p.as_deref());
            let ms = tensors(fbb, ms);
            let start = fbb.start_table();
            if let Some(o) = p {
                fbb.push_slot_always(S::VT_PARAM_NAME, o);
            }
            fbb.push_slot_always(S::VT_MOMENTUMS, ms);
            fbb.end_table(start)
        })
        .collect();
    let states = fbb.create_vector(&states);
    let name = string(fbb, g.name.as_deref());
    let start = fbb.start_table();
    if let Some(o) = name {
        fbb.push_slot_always(T::VT_GROUP_NAME, o);
    }
    fbb.push_slot_always::<i64>(T::VT_STEP, g.step);
    fbb.push_slot_always::<f32>(T::VT_INITIAL_LEARNING_RATE, g.initial_learning_rate);
    fbb.push_slot_always(T::VT_OPTIMIZER_STATES, states);
    fbb.end_table(start)
}
