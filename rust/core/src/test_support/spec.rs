//! The one index → spec converter of the tests, and the tests' tensor spec constructors.

use crate::{
    CheckpointIndex, CheckpointSpec, DataType, OptimizerGroupSpec, ParameterStateSpec, Storage,
    TensorPayload, TensorRef, TensorSpec,
};

/// A tensor spec whose values are `bytes` (no doc string): the tests' way to write a tensor.
pub fn bytes_tensor<'a>(name: &str, data_type: DataType, dims: &[i64], bytes: &'a [u8]) -> TensorSpec<'a> {
    TensorSpec {
        name: name.into(),
        data_type,
        dims: dims.to_vec(),
        data: TensorPayload::Bytes(bytes),
        doc_string: None,
    }
}

/// A 1-D uint8 tensor spec holding `bytes`.
pub fn u8_tensor<'a>(name: &str, bytes: &'a [u8]) -> TensorSpec<'a> {
    bytes_tensor(name, DataType::Uint8, &[bytes.len() as i64], bytes)
}

/// The spec that writes `index` back: inline bytes taken from `buf` (the buffer `index` was read
/// from), an external tensor's bytes from `external(offset, len)`.
pub fn spec_from_index<'a>(
    index: &CheckpointIndex,
    buf: &'a [u8],
    external: &dyn Fn(u64, u64) -> &'a [u8],
) -> CheckpointSpec<'a> {
    let tensor = |t: TensorRef<'_>| TensorSpec {
        name: t.name.to_owned(),
        data_type: t.data_type,
        dims: t.dims.to_vec(),
        data: match t.storage {
            Storage::Inline { offset, len, .. } => TensorPayload::Bytes(&buf[offset..offset + len]),
            Storage::External { offset, len } => TensorPayload::Bytes(external(offset, len)),
            Storage::Strings(s) => TensorPayload::Strings(s.to_vec()),
            Storage::Nominal => TensorPayload::Nominal,
        },
        doc_string: (!t.doc_string.is_empty()).then(|| t.doc_string.to_owned()),
    };
    CheckpointSpec {
        version: index.version,
        is_nominal: index.is_nominal,
        trainable: index.trainable().map(tensor).collect(),
        frozen: index.frozen().map(tensor).collect(),
        optimizer_groups: index
            .optimizer_groups
            .iter()
            .map(|g| OptimizerGroupSpec {
                name: g.name.clone(),
                step: g.step,
                initial_learning_rate: g.initial_learning_rate,
                states: g
                    .states
                    .iter()
                    .map(|s| ParameterStateSpec {
                        param_name: s.param_name.clone(),
                        momentums: index.momentums(s).map(tensor).collect(),
                    })
                    .collect(),
            })
            .collect(),
        properties: index.properties.clone(),
    }
}
