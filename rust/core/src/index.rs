//! The owned result of verifying a checkpoint: what it holds and where each tensor's bytes are.

use crate::DataType;

/// Everything a checkpoint holds, with tensor bytes given as ranges, not copied.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointIndex {
    pub version: i32,
    pub is_nominal: bool,
    pub has_external_data: bool,
    /// Parameters with `requires_grad`, in file order.
    pub trainable: Vec<TensorIndex>,
    /// Frozen parameters, in file order.
    pub frozen: Vec<TensorIndex>,
    pub optimizer_groups: Vec<OptimizerGroupIndex>,
    /// Integer, then float, then string properties, each in file order.
    pub properties: Vec<Property>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TensorIndex {
    pub name: String,
    pub data_type: DataType,
    pub dims: Vec<i64>,
    pub storage: Storage,
}

/// Where a tensor's values are.
#[derive(Clone, Debug, PartialEq)]
pub enum Storage {
    /// `len` bytes at `offset` in the checkpoint buffer (`len` may be 0).
    Inline { offset: usize, len: usize },
    /// `len` bytes at `offset` in the external data file.
    External { offset: u64, len: u64 },
    /// The values of a string tensor.
    Strings(Vec<String>),
    /// A tensor of a nominal checkpoint: name and type only, no values.
    Nominal,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerGroupIndex {
    pub name: String,
    pub step: i64,
    pub initial_learning_rate: f32,
    pub states: Vec<ParameterStateIndex>,
}

/// The optimizer state of one parameter: its momentum tensors, named e.g. `momentum0`.
#[derive(Clone, Debug, PartialEq)]
pub struct ParameterStateIndex {
    pub param_name: String,
    pub momentums: Vec<TensorIndex>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Property {
    pub name: String,
    pub value: PropertyValue,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PropertyValue {
    Int(i64),
    Float(f32),
    Str(String),
}
