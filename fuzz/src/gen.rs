//! Arbitrary checkpoint specs for the `spec_roundtrip` target.
//!
//! Names come mostly from a small pool (so duplicates happen), dims mostly small (so sizes stay
//! small), and data mostly sized to match dims and type, but not always.

use arbitrary::Arbitrary;
use ortckpt_core::{
    CheckpointSpec, DataType, OptimizerGroupSpec, ParameterStateSpec, Property, PropertyValue, TensorPayload,
    TensorSpec, WRITTEN_VERSION,
};

use crate::{byte_size, element_count};

/// Largest tensor data this generator makes, and the total for one spec.
const MAX_TENSOR_BYTES: u64 = 1 << 16;
const MAX_TOTAL_BYTES: u64 = 1 << 22;
const MAX_STRINGS: u64 = 1 << 12;

const NAMES: [&str; 10] = ["", "a", "b", "w.weight", "group0", "momentum0", "momentum1", "é✓", "a\0b", "A"];

#[derive(Arbitrary, Debug)]
pub enum Name {
    Pool(u8),
    Any(String),
}

impl Name {
    fn get(&self) -> String {
        match self {
            Name::Pool(i) => NAMES[*i as usize % NAMES.len()].to_owned(),
            Name::Any(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum Dim {
    Small(u8),
    Any(i64),
}

#[derive(Arbitrary, Debug)]
pub enum Data {
    /// Bytes of the length dims and type call for.
    Matching(u8),
    /// Bytes of that length plus or minus a little.
    Off(u8, bool),
    Bytes(Vec<u8>),
    /// As many strings as dims call for.
    MatchingStrings(Vec<Name>),
    Strings(Vec<Name>),
    Nominal,
}

#[derive(Arbitrary, Debug)]
pub struct Tensor {
    name: Name,
    data_type: u8,
    dims: Vec<Dim>,
    data: Data,
}

#[derive(Arbitrary, Debug)]
pub struct State {
    param_name: Name,
    momentums: Vec<Tensor>,
}

#[derive(Arbitrary, Debug)]
pub struct Group {
    name: Name,
    step: i64,
    initial_learning_rate: f32,
    states: Vec<State>,
}

#[derive(Arbitrary, Debug)]
pub enum Value {
    Int(i64),
    Float(f32),
    Str(Name),
}

#[derive(Arbitrary, Debug)]
pub struct FuzzSpec {
    is_nominal: bool,
    trainable: Vec<Tensor>,
    frozen: Vec<Tensor>,
    groups: Vec<Group>,
    properties: Vec<(Name, Value)>,
}

/// Owned tensor data, so the spec can borrow it.
enum OwnedData {
    Bytes(Vec<u8>),
    Strings(Vec<String>),
    Nominal,
}

struct OwnedTensor {
    name: String,
    data_type: DataType,
    dims: Vec<i64>,
    data: OwnedData,
}

/// A group's name, step, learning rate and (parameter name, momentums) states.
type OwnedGroup = (String, i64, f32, Vec<(String, Vec<OwnedTensor>)>);

/// A spec's tensors with their bytes, built once; [`Owned::spec`] borrows them.
pub struct Owned {
    is_nominal: bool,
    trainable: Vec<OwnedTensor>,
    frozen: Vec<OwnedTensor>,
    groups: Vec<OwnedGroup>,
    properties: Vec<Property>,
}

struct Budget(u64);

impl Budget {
    /// `n` pattern bytes when within the limits, else none (which rarely matches dims).
    fn bytes(&mut self, n: Option<u64>, seed: u8) -> Vec<u8> {
        match n {
            Some(n) if n <= MAX_TENSOR_BYTES && n <= self.0 => {
                self.0 -= n;
                (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
            }
            _ => Vec::new(),
        }
    }
}

impl Tensor {
    fn build(&self, budget: &mut Budget) -> OwnedTensor {
        let data_type = DataType::ALL[self.data_type as usize % DataType::ALL.len()];
        let dims: Vec<i64> = self
            .dims
            .iter()
            .map(|d| match d {
                Dim::Small(n) => i64::from(n % 5),
                Dim::Any(n) => *n,
            })
            .collect();
        let data = match &self.data {
            Data::Matching(seed) => OwnedData::Bytes(budget.bytes(byte_size(data_type, &dims), *seed)),
            Data::Off(delta, more) => {
                let n = byte_size(data_type, &dims).map(|n| {
                    let d = u64::from(delta % 4 + 1);
                    if *more {
                        n.saturating_add(d)
                    } else {
                        n.saturating_sub(d)
                    }
                });
                OwnedData::Bytes(budget.bytes(n, *delta))
            }
            Data::Bytes(b) => OwnedData::Bytes(b.clone()),
            Data::MatchingStrings(pool) => {
                let n = element_count(&dims).filter(|&n| n <= MAX_STRINGS && n <= budget.0).unwrap_or(0);
                budget.0 -= n;
                let s = |i: u64| pool.get(i as usize % pool.len().max(1)).map_or_else(String::new, Name::get);
                OwnedData::Strings((0..n).map(s).collect())
            }
            Data::Strings(names) => OwnedData::Strings(names.iter().map(Name::get).collect()),
            Data::Nominal => OwnedData::Nominal,
        };
        OwnedTensor { name: self.name.get(), data_type, dims, data }
    }
}

impl FuzzSpec {
    pub fn build(&self) -> Owned {
        let mut budget = Budget(MAX_TOTAL_BYTES);
        let mut tensors = |ts: &[Tensor]| ts.iter().map(|t| t.build(&mut budget)).collect::<Vec<_>>();
        let trainable = tensors(&self.trainable);
        let frozen = tensors(&self.frozen);
        let groups = self
            .groups
            .iter()
            .map(|g| {
                let states =
                    g.states.iter().map(|s| (s.param_name.get(), tensors(&s.momentums))).collect::<Vec<_>>();
                (g.name.get(), g.step, g.initial_learning_rate, states)
            })
            .collect();
        let properties = self
            .properties
            .iter()
            .map(|(name, v)| Property {
                name: name.get(),
                value: match v {
                    Value::Int(i) => PropertyValue::Int(*i),
                    Value::Float(f) => PropertyValue::Float(*f),
                    Value::Str(s) => PropertyValue::Str(s.get()),
                },
            })
            .collect();
        Owned { is_nominal: self.is_nominal, trainable, frozen, groups, properties }
    }
}

fn spec_tensor(t: &OwnedTensor) -> TensorSpec<'_> {
    TensorSpec {
        name: t.name.clone(),
        data_type: t.data_type,
        dims: t.dims.clone(),
        data: match &t.data {
            OwnedData::Bytes(b) => TensorPayload::Bytes(b),
            OwnedData::Strings(s) => TensorPayload::Strings(s.clone()),
            OwnedData::Nominal => TensorPayload::Nominal,
        },
        doc_string: None,
    }
}

impl Owned {
    pub fn spec(&self) -> CheckpointSpec<'_> {
        CheckpointSpec {
            version: WRITTEN_VERSION,
            is_nominal: self.is_nominal,
            trainable: self.trainable.iter().map(spec_tensor).collect(),
            frozen: self.frozen.iter().map(spec_tensor).collect(),
            optimizer_groups: self
                .groups
                .iter()
                .map(|(name, step, lr, states)| OptimizerGroupSpec {
                    name: name.clone(),
                    step: *step,
                    initial_learning_rate: *lr,
                    states: states
                        .iter()
                        .map(|(p, ms)| ParameterStateSpec {
                            param_name: p.clone(),
                            momentums: ms.iter().map(spec_tensor).collect(),
                        })
                        .collect(),
                })
                .collect(),
            properties: self.properties.clone(),
        }
    }
}
