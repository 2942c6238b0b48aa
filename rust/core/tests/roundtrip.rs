//! Writer → reader round trips through the public API, and ORT's own files when present.

use ortckpt_core::test_support::{bytes_tensor as tensor, checkpoint_files, ort_corpus_dir, spec_from_index};
use ortckpt_core::{
    index_checkpoint, save_checkpoint, serialize_checkpoint, CheckpointIndex, CheckpointSpec, DataType,
    Error, OptimizerGroupSpec, ParameterStateSpec, Property, PropertyValue, Storage, TensorPayload,
    TensorRef, TensorSpec, DATA_ALIGNMENT, WRITTEN_VERSION,
};

fn inline<'b>(buf: &'b [u8], storage: &Storage<'_>) -> &'b [u8] {
    match *storage {
        Storage::Inline { offset, len, .. } => &buf[offset..offset + len],
        other => panic!("expected inline storage, got {other:?}"),
    }
}

#[test]
fn full_state_round_trips_sorted_and_aligned() {
    let w: Vec<u8> = (0..24u8).collect();
    let d: Vec<u8> = (0..24u8).rev().collect();
    let b = [7u8; 3];
    let c = [9u8; 16];
    let spec = CheckpointSpec {
        version: WRITTEN_VERSION,
        is_nominal: false,
        trainable: vec![
            tensor("z.weight", DataType::Float, &[2, 3], &w),
            tensor("a.double", DataType::Double, &[3], &d),
            tensor("c", DataType::Complex128, &[], &c),
        ],
        frozen: vec![
            tensor("mask", DataType::Bool, &[3], &b),
            TensorSpec {
                name: "labels".into(),
                data_type: DataType::String,
                dims: vec![2],
                data: TensorPayload::Strings(vec!["héllo".into(), String::new()]),
                doc_string: None,
            },
        ],
        optimizer_groups: vec![OptimizerGroupSpec {
            name: "group0".into(),
            step: 7,
            initial_learning_rate: 0.001,
            states: vec![ParameterStateSpec {
                param_name: "z.weight".into(),
                momentums: vec![
                    tensor("momentum1", DataType::Float, &[2, 3], &w),
                    tensor("momentum0", DataType::Float, &[2, 3], &w),
                ],
            }],
        }],
        properties: vec![
            Property { name: "note".into(), value: PropertyValue::Str("✓".into()) },
            Property { name: "epoch".into(), value: PropertyValue::Int(-3) },
            Property { name: "loss".into(), value: PropertyValue::Float(0.25) },
        ],
    };
    let bytes = serialize_checkpoint(&spec).unwrap();
    let index: CheckpointIndex = index_checkpoint(&bytes).unwrap();
    assert_eq!(index.version, WRITTEN_VERSION);
    let names: Vec<_> = index.trainable().map(|t| t.name).collect();
    assert_eq!(names, ["a.double", "c", "z.weight"]);
    assert_eq!(inline(&bytes, &index.tensor(2).unwrap().storage), &w[..]);
    assert_eq!(inline(&bytes, &index.tensor(0).unwrap().storage), &d[..]);
    for t in index.tensors() {
        if let Storage::Inline { offset, .. } = t.storage {
            assert_eq!(offset % DATA_ALIGNMENT, 0, "{} is not aligned", t.name);
        }
    }
    let labels = index.frozen().next().unwrap();
    assert_eq!(labels.name, "labels");
    assert_eq!(labels.storage, Storage::Strings(&["héllo".into(), String::new()]));
    let group = &index.optimizer_groups[0];
    assert_eq!((group.step, group.initial_learning_rate), (7, 0.001));
    let momentum_names: Vec<_> = index.momentums(&group.states[0]).map(|m| m.name).collect();
    assert_eq!(momentum_names, ["momentum0", "momentum1"]);
    let props: Vec<_> = index.properties.iter().map(|p| (p.name.as_str(), p.value.clone())).collect();
    assert_eq!(
        props,
        [
            ("epoch", PropertyValue::Int(-3)),
            ("loss", PropertyValue::Float(0.25)),
            ("note", PropertyValue::Str("✓".into()))
        ]
    );
    // Deterministic: the same spec in another order gives the same bytes.
    let mut shuffled = spec.clone();
    shuffled.trainable.reverse();
    shuffled.properties.reverse();
    assert_eq!(serialize_checkpoint(&shuffled).unwrap(), bytes);
}

#[test]
fn writer_rejects_inconsistent_specs() {
    let short = [0u8; 5];
    let spec =
        CheckpointSpec { trainable: vec![tensor("w", DataType::Float, &[2], &short)], ..Default::default() };
    assert!(matches!(
        serialize_checkpoint(&spec),
        Err(Error::DataLengthMismatch { expected: 8, found: 5, .. })
    ));
    let ok = [0u8; 4];
    let spec = CheckpointSpec {
        trainable: vec![tensor("w", DataType::Float, &[1], &ok)],
        frozen: vec![tensor("w", DataType::Float, &[1], &ok)],
        ..Default::default()
    };
    assert!(matches!(serialize_checkpoint(&spec), Err(Error::DuplicateName { .. })));
    let spec = CheckpointSpec {
        trainable: vec![TensorSpec {
            name: "w".into(),
            data_type: DataType::Float,
            dims: vec![],
            data: TensorPayload::Nominal,
            doc_string: None,
        }],
        ..Default::default()
    };
    assert!(matches!(serialize_checkpoint(&spec), Err(Error::InvalidSpec { .. })));
    let spec =
        CheckpointSpec { trainable: vec![tensor("w", DataType::Float, &[-1], &ok)], ..Default::default() };
    assert!(matches!(serialize_checkpoint(&spec), Err(Error::NegativeDim { .. })));
}

#[test]
fn nominal_round_trip() {
    let spec = CheckpointSpec {
        is_nominal: true,
        trainable: vec![TensorSpec {
            name: "w".into(),
            data_type: DataType::Float16,
            dims: vec![],
            data: TensorPayload::Nominal,
            doc_string: None,
        }],
        ..Default::default()
    };
    let index = index_checkpoint(&serialize_checkpoint(&spec).unwrap()).unwrap();
    assert!(index.is_nominal);
    let w = index.tensor(0).unwrap();
    assert_eq!((w.storage, w.data_type), (Storage::Nominal, DataType::Float16));
}

#[test]
fn save_checkpoint_is_atomic_and_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.ckpt");
    let data = [1u8; 8];
    let spec =
        CheckpointSpec { trainable: vec![tensor("w", DataType::Int64, &[1], &data)], ..Default::default() };
    let inline = ortckpt_core::SaveOptions { external_data_threshold: None, ..Default::default() };
    save_checkpoint(&path, &spec, &inline).unwrap();
    let bad =
        CheckpointSpec { trainable: vec![tensor("w", DataType::Int64, &[2], &data)], ..Default::default() };
    assert!(save_checkpoint(&path, &bad, &inline).is_err());
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(index_checkpoint(&bytes).unwrap().tensor(0).unwrap().dims, [1]);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "a temporary file was left behind");
}

/// ORT-written files of the corpus (tests/data/corpus) index, and re-serializing what they hold
/// gives a file with the same contents.
#[test]
fn ort_corpus_files_round_trip() {
    let corpus = ort_corpus_dir();
    let files = checkpoint_files(&corpus);
    assert!(!files.is_empty(), "corpus folder has no .ckpt files");
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        let index = index_checkpoint(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let spec = spec_from_index(&index, &bytes, &|_, _| panic!("corpus has no external data"));
        let again = serialize_checkpoint(&spec).unwrap();
        let reindexed = index_checkpoint(&again).unwrap();
        let by_name = |ts: &mut dyn Iterator<Item = TensorRef<'_>>, buf: &[u8]| {
            let mut v: Vec<_> = ts
                .map(|t| {
                    let data = match t.storage {
                        Storage::Inline { offset, len, .. } => buf[offset..offset + len].to_vec(),
                        _ => Vec::new(),
                    };
                    (t.name.to_owned(), t.data_type, t.dims.to_vec(), data)
                })
                .collect();
            v.sort();
            v
        };
        assert_eq!(by_name(&mut index.trainable(), &bytes), by_name(&mut reindexed.trainable(), &again));
        assert_eq!(by_name(&mut index.frozen(), &bytes), by_name(&mut reindexed.frozen(), &again));
        assert_eq!(index.is_nominal, reindexed.is_nominal);
        assert_eq!(index.optimizer_groups.len(), reindexed.optimizer_groups.len());
    }
}

#[test]
fn negative_zero_floats_keep_their_sign() {
    let spec = CheckpointSpec {
        optimizer_groups: vec![OptimizerGroupSpec {
            name: "g".into(),
            step: 0,
            initial_learning_rate: -0.0,
            states: vec![],
        }],
        properties: vec![Property { name: "p".into(), value: PropertyValue::Float(-0.0) }],
        ..Default::default()
    };
    let index = index_checkpoint(&serialize_checkpoint(&spec).unwrap()).unwrap();
    assert!(index.optimizer_groups[0].initial_learning_rate.is_sign_negative());
    let PropertyValue::Float(p) = index.properties[0].value else { panic!("float property expected") };
    assert!(p == 0.0 && p.is_sign_negative());
}
