//! The metadata buffer's initial capacity.

use crate::index::PropertyValue;
use crate::spec::{CheckpointSpec, Role, TensorPayload, TensorSpec};

/// A generous guess of the metadata size, so the buffer rarely grows.
pub(super) fn metadata_bytes(spec: &CheckpointSpec<'_>, tensors: &[(Role, &TensorSpec<'_>)]) -> usize {
    let per_tensor: usize = tensors
        .iter()
        .map(|(_, t)| {
            let strings = match &t.data {
                TensorPayload::Strings(v) => v.iter().map(|s| s.len() + 8).sum(),
                _ => 0,
            };
            48 + t.name.len() + 8 * t.dims.len() + t.doc_string.as_ref().map_or(0, |d| d.len() + 8) + strings
        })
        .sum();
    let properties: usize = spec
        .properties
        .iter()
        .map(|p| {
            24 + p.name.len()
                + match &p.value {
                    PropertyValue::Str(s) => s.len() + 8,
                    _ => 0,
                }
        })
        .sum();
    let states: usize =
        spec.optimizer_groups.iter().flat_map(|g| &g.states).map(|s| 24 + s.param_name.len()).sum();
    (256 + per_tensor + properties + states).min(1 << 30)
}
