//! The one index → spec converter of the tests.

use crate::{
    CheckpointIndex, CheckpointSpec, OptimizerGroupSpec, ParameterStateSpec, Storage, TensorPayload,
    TensorRef, TensorSpec,
};

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
