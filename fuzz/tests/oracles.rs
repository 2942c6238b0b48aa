//! The fuzz oracles on the seed files and on hand-made checkpoints, and repros of the issues the
//! fuzzers found (all fixed in ortckpt-core since).
//!
//! Run with `cargo test --manifest-path fuzz/Cargo.toml` (no sanitizer or nightly flags needed).

use std::path::{Path, PathBuf};

use ortckpt_core::test_support::raw::{RawCheckpoint, RawGroup, RawTensor};
use ortckpt_core::test_support::{bytes_tensor, checkpoint_files, ort_corpus_dir, test_data_dir};
use ortckpt_core::{
    check_external_ranges, index_checkpoint, serialize_checkpoint, CheckpointSpec, DataType,
    OptimizerGroupSpec, ParameterStateSpec, Property, PropertyValue, Storage, TensorPayload, TensorSpec,
    WRITTEN_VERSION,
};
use ortckpt_fuzz::{check_bytes, check_spec};

fn seed_files() -> Vec<PathBuf> {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/index_bytes");
    [test_data_dir(), ort_corpus_dir(), seeds].iter().flat_map(|d| checkpoint_files(d)).collect()
}

#[test]
fn seed_files_pass_the_oracle() {
    let files = seed_files();
    assert!(files.len() >= 10, "expected the tests/data checkpoints, found {files:?}");
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        index_checkpoint(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        check_bytes(&bytes);
    }
}

#[test]
fn crafted_checkpoints_pass_the_oracle() {
    for raw in ortckpt_fuzz::craft::examples() {
        let bytes = raw.build();
        index_checkpoint(&bytes).unwrap_or_else(|e| panic!("{raw:?}: {e}"));
        check_bytes(&bytes);
    }
}

fn t<'a>(name: &str, dims: &[i64], bytes: &'a [u8]) -> TensorSpec<'a> {
    bytes_tensor(name, DataType::Float, dims, bytes)
}

#[test]
fn specs_pass_the_oracle() {
    let w = [1u8; 24];
    let spec = CheckpointSpec {
        version: WRITTEN_VERSION,
        is_nominal: false,
        trainable: vec![t("w", &[2, 3], &w), t("e", &[0, 5], &[])],
        frozen: vec![TensorSpec {
            name: "s".into(),
            data_type: DataType::String,
            dims: vec![2],
            data: TensorPayload::Strings(vec!["x".into(), String::new()]),
            doc_string: None,
        }],
        optimizer_groups: vec![OptimizerGroupSpec {
            name: "group0".into(),
            step: 3,
            initial_learning_rate: f32::NAN,
            states: vec![ParameterStateSpec {
                param_name: "w".into(),
                momentums: vec![t("momentum0", &[2, 3], &w)],
            }],
        }],
        properties: vec![Property { name: "p".into(), value: PropertyValue::Float(f32::INFINITY) }],
    };
    check_spec(&spec);
}

// ---- Issues the fuzzers found; each asserts the behaviour that ortckpt-core promises.

/// Fixed: `check_external_ranges` compared only neighbours in offset order and skipped pairs with
/// an empty range, so an empty external tensor between two overlapping ones hid their overlap.
#[test]
fn overlap_is_found_past_an_empty_external_tensor() {
    let bytes = ortckpt_fuzz::craft::overlap_hidden_by_empty_tensor().build();
    let index = index_checkpoint(&bytes).unwrap();
    // a = [0, 16), e = [8, 8), b = [12, 28): a and b share bytes 12..16.
    let result = check_external_ranges(&index, 1 << 20);
    assert!(result.is_err(), "check_external_ranges accepted overlapping tensors a and b");
}

/// Fixed: flatbuffers leaves out a field equal to its default, and `-0.0 == 0.0`, so -0.0 learning
/// rates and float properties read back as +0.0.
#[test]
fn negative_zero_floats_round_trip() {
    let spec = CheckpointSpec {
        optimizer_groups: vec![OptimizerGroupSpec {
            name: "group0".into(),
            step: 0,
            initial_learning_rate: -0.0,
            states: vec![],
        }],
        properties: vec![Property { name: "f".into(), value: PropertyValue::Float(-0.0) }],
        ..CheckpointSpec::default()
    };
    let index = index_checkpoint(&serialize_checkpoint(&spec).unwrap()).unwrap();
    assert_eq!(index.optimizer_groups[0].initial_learning_rate.to_bits(), (-0.0f32).to_bits());
    assert!(
        matches!(index.properties[0].value, PropertyValue::Float(f) if f.to_bits() == (-0.0f32).to_bits())
    );
}

/// Fixed: in a nominal checkpoint an empty tensor read back as nominal, and for a momentum that
/// index could not be written back (the writer refuses nominal momentums).
#[test]
fn empty_tensors_of_a_nominal_checkpoint_round_trip() {
    let spec = CheckpointSpec {
        is_nominal: true,
        trainable: vec![t("w", &[0], &[])],
        optimizer_groups: vec![OptimizerGroupSpec {
            name: "group0".into(),
            step: 1,
            initial_learning_rate: 0.5,
            states: vec![ParameterStateSpec {
                param_name: "w".into(),
                momentums: vec![t("momentum0", &[0], &[])],
            }],
        }],
        ..CheckpointSpec::default()
    };
    let bytes = serialize_checkpoint(&spec).unwrap();
    let index = index_checkpoint(&bytes).unwrap();
    assert!(matches!(index.tensor(0).unwrap().storage, Storage::Inline { len: 0, .. }));
    let momentum = index.momentums(&index.optimizer_groups[0].states[0]).next().unwrap();
    assert!(matches!(momentum.storage, Storage::Inline { len: 0, .. }), "momentum read back as {momentum:?}");
}

#[test]
fn raw_group_builder_matches_the_writer() {
    // The hand-made builder and the writer agree on a group's fields.
    let raw = RawCheckpoint {
        groups: vec![RawGroup {
            name: Some("g".into()),
            step: 5,
            initial_learning_rate: 0.25,
            states: vec![(Some("w".into()), vec![RawTensor::floats("momentum0", &[2])])],
        }],
        trainable: vec![RawTensor::floats("w", &[2])],
        ..RawCheckpoint::default()
    };
    let index = index_checkpoint(&raw.build()).unwrap();
    assert_eq!((index.optimizer_groups[0].step, index.optimizer_groups[0].initial_learning_rate), (5, 0.25));
}

/// spec_roundtrip's finding of 2026-12-04 (CI): the spec generator added to a byte size near
/// u64::MAX and overflowed (a panic of the harness, not of the core). The input, as libFuzzer
/// gives it to the target.
#[test]
fn a_generated_size_near_u64_max_does_not_overflow_the_generator() {
    use arbitrary::{Arbitrary, Unstructured};
    let bytes = include_bytes!("data/spec_roundtrip_size_overflow.bin");
    let input = ortckpt_fuzz::gen::FuzzSpec::arbitrary_take_rest(Unstructured::new(bytes));
    let input = input.map_err(|e| e.to_string()).unwrap();
    check_spec(&input.build().spec());
}

/// index_bytes's finding of 2026-12-04 (CI): a version-1 file with the nominal flag set is read
/// (as ORT >= 1.18 reads it) but cannot be written as version 1; the oracle writes it as version 2.
#[test]
fn a_nominal_version_1_file_is_written_back_as_version_2() {
    let bytes = include_bytes!("data/index_bytes_nominal_v1.bin");
    let index = ortckpt_core::index_checkpoint(bytes);
    assert!(
        index.as_ref().is_ok_and(|i| i.version == 1 && i.is_nominal),
        "the finding reads as nominal version 1"
    );
    ortckpt_fuzz::check_bytes(bytes);
}
