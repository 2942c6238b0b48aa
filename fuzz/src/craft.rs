//! Checkpoints `serialize_checkpoint` never writes (external offsets, version 1, doc strings, ...),
//! built field by field with ortckpt-core's test-support builder: seeds and repros.

use ortckpt_core::test_support::raw::{RawCheckpoint, RawGroup, RawTensor};

/// Checkpoints `serialize_checkpoint` does not write, all of which `index_checkpoint` accepts:
/// the seeds in `seeds/index_bytes/` (see `examples/make_seeds.rs`).
pub fn examples() -> Vec<RawCheckpoint> {
    let strings = RawTensor::strings;
    vec![
        // External data: two float tensors beside small inline ones, and an empty external one.
        RawCheckpoint {
            has_external_data: true,
            trainable: vec![
                RawTensor::external("a", &[16], 0),
                RawTensor::external("b", &[4, 4], 64),
                RawTensor::floats("c", &[3]),
            ],
            frozen: vec![RawTensor::external("e", &[0], 128), strings("s", &["x", "", "✓"])],
            groups: vec![RawGroup {
                name: Some("group0".into()),
                step: 2,
                initial_learning_rate: 1e-3,
                states: vec![(Some("a".into()), vec![RawTensor::external("momentum0", &[16], 192)])],
            }],
            ..RawCheckpoint::default()
        },
        // Version 1, unsorted, a doc string, every property type.
        RawCheckpoint {
            version: 1,
            trainable: vec![
                RawTensor { doc_string: Some("doc".into()), ..RawTensor::floats("z", &[2, 2]) },
                RawTensor::floats("a", &[]),
            ],
            ints: vec![(Some("epoch".into()), -1)],
            floats: vec![(Some("loss".into()), 0.5)],
            strings: vec![(Some("note".into()), Some("héllo".into()))],
            ..RawCheckpoint::default()
        },
        // A nominal checkpoint with dims, and a state without module state.
        RawCheckpoint {
            nominal: true,
            trainable: vec![RawTensor { raw: Some(vec![]), ..RawTensor::floats("w", &[3, 0]) }],
            frozen: vec![RawTensor { strings: Some(vec![]), raw: None, ..strings("s", &[]) }],
            ..RawCheckpoint::default()
        },
        RawCheckpoint { module: false, ints: vec![(Some("only".into()), 1)], ..RawCheckpoint::default() },
    ]
}

/// External tensors a = [0, 16) and b = [12, 28) overlap; an empty one at 8 sorts between them.
pub fn overlap_hidden_by_empty_tensor() -> RawCheckpoint {
    RawCheckpoint {
        has_external_data: true,
        trainable: vec![
            RawTensor::external("a", &[4], 0),
            RawTensor::external("e", &[0], 8),
            RawTensor::external("b", &[4], 12),
        ],
        ..RawCheckpoint::default()
    }
}
