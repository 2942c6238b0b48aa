//! External data: saving with a threshold, the file layout, and the range checks on reading.

use ortckpt_core::test_support::bytes_tensor;
use ortckpt_core::test_support::raw::{RawCheckpoint, RawGroup, RawTensor};
use ortckpt_core::{
    check_external_ranges, external_data_path, index_checkpoint, save_checkpoint, CheckpointSpec, DataType,
    Error, ErrorKind, OptimizerGroupSpec, ParameterStateSpec, SaveOptions, Storage, TensorSpec,
    EXTERNAL_ALIGNMENT, MIN_EXTERNAL_BYTES,
};

fn tensor<'a>(name: &str, dims: &[i64], bytes: &'a [u8]) -> TensorSpec<'a> {
    bytes_tensor(name, DataType::Uint8, dims, bytes)
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

    let Storage::External { offset, len } = index.tensor(0).unwrap().storage else {
        panic!("w should be external")
    };
    assert_eq!(&ext[offset as usize..(offset + len) as usize], &big[..]);
    let b = index.tensor(1).unwrap();
    assert!(matches!(b.storage, Storage::Inline { .. }), "tensors under 64 bytes stay inline");
    let m = index.momentums(&index.optimizer_groups[0].states[0]).next().unwrap();
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
    let m = index.momentums(&index.optimizer_groups[0].states[0]).next().unwrap();
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
}

/// w (`[0, 1000)`), an empty frozen tensor at `empty_at`, and a momentum at `momentum_at`.
fn external_layout(empty_at: i64, momentum_at: i64, momentum_len: i64) -> ortckpt_core::CheckpointIndex {
    let raw = RawCheckpoint {
        has_external_data: true,
        trainable: vec![RawTensor::external("w", &[250], 0)],
        frozen: vec![RawTensor::external("e", &[0], empty_at)],
        groups: vec![RawGroup {
            name: Some("group0".into()),
            step: 1,
            initial_learning_rate: 0.1,
            states: vec![(
                Some("w".into()),
                vec![RawTensor::external("momentum0", &[momentum_len / 4], momentum_at)],
            )],
        }],
        ..RawCheckpoint::default()
    };
    index_checkpoint(&raw.build()).unwrap()
}

#[test]
fn overlapping_ranges_are_errors() {
    let e = check_external_ranges(&external_layout(0, 996, 100), 1 << 20).unwrap_err();
    assert!(matches!(e, Error::ExternalOverlap { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::ExternalData);
}

#[test]
fn overlap_is_found_across_an_empty_range() {
    // w: 0..1000; an empty tensor at 10 sorts between w and the momentum at 500, which overlaps w.
    let e = check_external_ranges(&external_layout(10, 500, 100), 1 << 20).unwrap_err();
    assert!(
        matches!(e, Error::ExternalOverlap { ref first, ref second } if first == "w" && second == "momentum0"),
        "{e}"
    );
    // Touching ranges do not overlap.
    check_external_ranges(&external_layout(10, 1000, 100), 1 << 20).unwrap();
    let e = check_external_ranges(&external_layout(10, 1000, 100), 1099).unwrap_err();
    assert!(matches!(e, Error::ExternalOutOfRange { ref tensor, .. } if tensor == "momentum0"), "{e}");
}
