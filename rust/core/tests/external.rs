//! External data: saving with a threshold, the file layout, and the range checks on reading.

use ortckpt_core::{
    check_external_ranges, external_data_path, index_checkpoint, save_checkpoint, CheckpointSpec, DataType,
    Error, ErrorKind, OptimizerGroupSpec, ParameterStateSpec, SaveOptions, Storage, TensorPayload,
    TensorSpec, EXTERNAL_ALIGNMENT, MIN_EXTERNAL_BYTES,
};

fn tensor<'a>(name: &str, dims: &[i64], bytes: &'a [u8]) -> TensorSpec<'a> {
    TensorSpec {
        name: name.into(),
        data_type: DataType::Uint8,
        dims: dims.to_vec(),
        data: TensorPayload::Bytes(bytes),
        doc_string: None,
    }
}

fn threshold(bytes: Option<u64>) -> SaveOptions {
    SaveOptions { external_data_threshold: bytes, ..Default::default() }
}

fn spec<'a>(big: &'a [u8], small: &'a [u8], momentum: &'a [u8]) -> CheckpointSpec<'a> {
    CheckpointSpec {
        trainable: vec![tensor("w", &[big.len() as i64], big)],
        frozen: vec![tensor("b", &[small.len() as i64], small)],
        optimizer_groups: vec![OptimizerGroupSpec {
            name: "group0".into(),
            step: 1,
            initial_learning_rate: 0.1,
            states: vec![ParameterStateSpec {
                param_name: "w".into(),
                momentums: vec![tensor("momentum0", &[momentum.len() as i64], momentum)],
            }],
        }],
        ..Default::default()
    }
}

#[test]
fn path_rule_appends_data() {
    assert_eq!(external_data_path("a/x.ckpt".as_ref()), std::path::PathBuf::from("a/x.ckpt.data"));
    assert_eq!(external_data_path("checkpoint".as_ref()), std::path::PathBuf::from("checkpoint.data"));
}

#[test]
fn over_threshold_goes_external_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.ckpt");
    let big: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    let small = vec![5u8; MIN_EXTERNAL_BYTES - 1];
    let momentum: Vec<u8> = (0..100u8).collect();
    let s = spec(&big, &small, &momentum);

    let summary = save_checkpoint(&path, &s, &threshold(Some(500))).unwrap();
    let ext = std::fs::read(external_data_path(&path)).unwrap();
    assert_eq!(summary.external_data_bytes, Some(ext.len() as u64));
    let bytes = std::fs::read(&path).unwrap();
    let index = index_checkpoint(&bytes).unwrap();
    assert!(index.has_external_data);
    check_external_ranges(&index, ext.len() as u64).unwrap();

    let Storage::External { offset, len } = index.trainable[0].storage else {
        panic!("w should be external")
    };
    assert_eq!(&ext[offset as usize..(offset + len) as usize], &big[..]);
    assert!(matches!(index.frozen[0].storage, Storage::Inline { .. }), "tensors under 64 bytes stay inline");
    let m = &index.optimizer_groups[0].states[0].momentums[0];
    assert!(matches!(m.storage, Storage::Inline { .. }), "momentums stay inline by default, as in ORT");
    assert!(bytes.len() < 1000, "flatbuffer should hold no external bytes");
}

#[test]
fn momentums_go_external_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.ckpt");
    let big = vec![1u8; 1000];
    let momentum: Vec<u8> = (0..100u8).collect();
    let s = spec(&big, &[2u8; 3], &momentum);
    let options = SaveOptions { external_data_threshold: Some(500), external_momentums: true };
    let summary = save_checkpoint(&path, &s, &options).unwrap();
    let ext = std::fs::read(external_data_path(&path)).unwrap();
    assert_eq!(summary.external_data_bytes, Some(ext.len() as u64));
    let index = index_checkpoint(&std::fs::read(&path).unwrap()).unwrap();
    let m = &index.optimizer_groups[0].states[0].momentums[0];
    let Storage::External { offset, len } = m.storage else { panic!("momentum should be external") };
    assert_eq!(offset % EXTERNAL_ALIGNMENT, 0);
    assert_eq!(&ext[offset as usize..(offset + len) as usize], &momentum[..]);
}

#[test]
fn version_1_cannot_hold_external_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.ckpt");
    let big = vec![1u8; 1000];
    let s = CheckpointSpec { version: 1, ..spec(&big, &[2u8; 3], &[3u8; 100]) };
    let e = save_checkpoint(&path, &s, &threshold(Some(0))).unwrap_err();
    assert!(e.to_string().contains("cannot hold external data"), "{e}");
    assert!(!path.exists() && !external_data_path(&path).exists());
    save_checkpoint(&path, &s, &threshold(None)).unwrap();
    assert_eq!(index_checkpoint(&std::fs::read(&path).unwrap()).unwrap().version, 1);
}

#[test]
fn under_threshold_stays_inline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.ckpt");
    let big = vec![1u8; 1000];
    let s = spec(&big, &[2u8; 3], &[3u8; 100]);
    let summary = save_checkpoint(&path, &s, &threshold(Some(10_000))).unwrap();
    assert_eq!(summary.external_data_bytes, None);
    assert!(!external_data_path(&path).exists());
    assert!(!index_checkpoint(&std::fs::read(&path).unwrap()).unwrap().has_external_data);
    let summary = save_checkpoint(&path, &s, &threshold(None)).unwrap();
    assert_eq!(summary.external_data_bytes, None);
}

#[test]
fn short_external_file_and_overlap_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.ckpt");
    let big = vec![1u8; 1000];
    let momentum = vec![3u8; 100];
    let s = spec(&big, &[2u8; 3], &momentum);
    save_checkpoint(&path, &s, &threshold(Some(0))).unwrap();
    let ext_len = std::fs::metadata(external_data_path(&path)).unwrap().len();
    let index = index_checkpoint(&std::fs::read(&path).unwrap()).unwrap();
    let e = check_external_ranges(&index, ext_len - 1).unwrap_err();
    assert!(matches!(e, Error::ExternalOutOfRange { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::ExternalData);

    let mut overlapping = index.clone();
    overlapping.trainable[0].storage = Storage::External { offset: 0, len: 1000 };
    overlapping.optimizer_groups[0].states[0].momentums[0].storage =
        Storage::External { offset: 999, len: 100 };
    let e = check_external_ranges(&overlapping, 1 << 20).unwrap_err();
    assert!(matches!(e, Error::ExternalOverlap { .. }), "{e}");
}

#[test]
fn overlap_is_found_across_an_empty_range() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.ckpt");
    let big = vec![1u8; 1000];
    let s = spec(&big, &[2u8; 3], &[3u8; 100]);
    save_checkpoint(&path, &s, &threshold(Some(0))).unwrap();
    let mut index = index_checkpoint(&std::fs::read(&path).unwrap()).unwrap();
    // w: 0..1000; an empty tensor at 10 sorts between w and the momentum at 500, which overlaps w.
    index.trainable[0].storage = Storage::External { offset: 0, len: 1000 };
    index.frozen[0].storage = Storage::External { offset: 10, len: 0 };
    index.optimizer_groups[0].states[0].momentums[0].storage = Storage::External { offset: 500, len: 100 };
    let e = check_external_ranges(&index, 1 << 20).unwrap_err();
    assert!(
        matches!(e, Error::ExternalOverlap { ref first, ref second } if first == "w" && second == "momentum0"),
        "{e}"
    );
    // Touching ranges do not overlap.
    index.optimizer_groups[0].states[0].momentums[0].storage = Storage::External { offset: 1000, len: 100 };
    check_external_ranges(&index, 1 << 20).unwrap();
}
