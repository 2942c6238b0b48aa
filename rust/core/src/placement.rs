//! Which tensors go to the external data file, and where: a plan in file order.
//!
//! ORT's rule (docs/format.md §7): when the checkpoint's tensor data exceed the threshold, every
//! non-string parameter of at least [`MIN_EXTERNAL_BYTES`] goes external; smaller ones and strings
//! stay inline. ORT keeps optimizer momentums inline whatever their size, and so does ortckpt by
//! default; [`SaveOptions::external_momentums`] moves them out too (ORT reads external momentums
//! through the same path), for optimizer state that would not fit in a 2 GiB flatbuffer. Offsets
//! are assigned in file order, each aligned to [`EXTERNAL_ALIGNMENT`] so the external file can be
//! memory-mapped with aligned views.

use crate::spec::{Role, TensorPayload, TensorSpec};

/// ORT keeps tensors smaller than this inline even in external mode.
pub const MIN_EXTERNAL_BYTES: usize = 64;

/// Alignment of each tensor's first byte in the external data file (ORT uses 4 or 8; any value
/// reads back in ORT, and 16 suits every element type).
pub const EXTERNAL_ALIGNMENT: u64 = 16;

/// ORT's default `external_data_threshold`: 1800 MiB.
pub const DEFAULT_EXTERNAL_DATA_THRESHOLD: u64 = 1800 * 1024 * 1024;

/// How a save places tensor data: inline in the checkpoint or in its external data file.
#[derive(Clone, Copy, Debug)]
pub struct SaveOptions {
    /// Tensor data beyond this many bytes in total go to the external data file; `None` keeps
    /// everything inline (and fails beyond the 2 GiB a flatbuffer can hold).
    pub external_data_threshold: Option<u64>,
    /// In external mode, also move optimizer momentums of at least [`MIN_EXTERNAL_BYTES`] to the
    /// external file. ORT keeps them inline (the default, `false`); set it when the optimizer
    /// state alone is too large for the 2 GiB flatbuffer. ORT 1.19.2 loads either.
    pub external_momentums: bool,
}

impl Default for SaveOptions {
    fn default() -> Self {
        SaveOptions {
            external_data_threshold: Some(DEFAULT_EXTERNAL_DATA_THRESHOLD),
            external_momentums: false,
        }
    }
}

/// Where one tensor's values go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// In the checkpoint file (`raw_data` or `string_data`, or no values for a nominal tensor).
    Inline,
    /// In the external data file, at this byte offset.
    External { offset: u64 },
}

/// The place of every tensor, in file order (`spec::tensors_in_file_order`).
#[derive(Debug)]
pub(crate) struct Plan {
    pub places: Vec<Place>,
    /// Length of the external data file (0 when nothing goes external).
    pub external_len: u64,
}

impl Plan {
    pub(crate) fn has_external(&self) -> bool {
        self.places.iter().any(|p| matches!(p, Place::External { .. }))
    }
}

/// Places `tensors` (a checkpoint's, in file order) for a save with `options`; a nominal
/// checkpoint is never external.
pub(crate) fn plan(tensors: &[(Role, &TensorSpec<'_>)], is_nominal: bool, options: &SaveOptions) -> Plan {
    let total: u64 = tensors
        .iter()
        .map(|(_, t)| match t.data {
            TensorPayload::Bytes(b) => b.len() as u64,
            _ => 0,
        })
        .fold(0, u64::saturating_add);
    let external = !is_nominal && options.external_data_threshold.is_some_and(|t| total > t);
    let mut cursor: u64 = 0;
    let places = tensors
        .iter()
        .map(|(role, t)| {
            let movable = external && (*role == Role::Parameter || options.external_momentums);
            match t.data {
                TensorPayload::Bytes(bytes) if movable && bytes.len() >= MIN_EXTERNAL_BYTES => {
                    let offset = cursor.next_multiple_of(EXTERNAL_ALIGNMENT);
                    cursor = offset.saturating_add(bytes.len() as u64);
                    Place::External { offset }
                }
                _ => Place::Inline,
            }
        })
        .collect();
    Plan { places, external_len: cursor }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{tensors_in_file_order, CheckpointSpec, OptimizerGroupSpec, ParameterStateSpec};
    use crate::test_support::u8_tensor as tensor;

    fn plan(spec: &CheckpointSpec<'_>, options: &SaveOptions) -> Plan {
        super::plan(&tensors_in_file_order(spec), spec.is_nominal, options)
    }

    fn spec<'a>(big: &'a [u8], small: &'a [u8]) -> CheckpointSpec<'a> {
        CheckpointSpec {
            trainable: vec![tensor("w", big), tensor("a", big)],
            frozen: vec![tensor("s", small)],
            optimizer_groups: vec![OptimizerGroupSpec {
                name: "group0".into(),
                step: 1,
                initial_learning_rate: 0.1,
                states: vec![ParameterStateSpec {
                    param_name: "w".into(),
                    momentums: vec![tensor("m", big)],
                }],
            }],
            ..Default::default()
        }
    }

    #[test]
    fn momentums_stay_inline_unless_asked() {
        let big = [1u8; 100];
        let small = [1u8; 63];
        let s = spec(&big, &small);
        let options = SaveOptions { external_data_threshold: Some(0), ..Default::default() };
        let p = plan(&s, &options);
        // a, w, s, m
        assert_eq!(
            p.places,
            [Place::External { offset: 0 }, Place::External { offset: 112 }, Place::Inline, Place::Inline]
        );
        assert_eq!(p.external_len, 212);
        let p = plan(&s, &SaveOptions { external_momentums: true, ..options });
        assert_eq!(p.places[3], Place::External { offset: 224 });
        assert_eq!(p.external_len, 324);
    }

    #[test]
    fn under_threshold_or_nominal_is_all_inline() {
        let big = [1u8; 100];
        let s = spec(&big, &big);
        let p = plan(&s, &SaveOptions { external_data_threshold: Some(400), external_momentums: true });
        assert!(!p.has_external());
        assert_eq!(p.external_len, 0);
        let p = plan(&s, &SaveOptions { external_data_threshold: None, external_momentums: true });
        assert!(!p.has_external());
    }
}
