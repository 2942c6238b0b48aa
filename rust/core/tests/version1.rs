//! Writing format version 1 (what ORT 1.16-1.17 read).

use ortckpt_core::test_support::bytes_tensor;
use ortckpt_core::{
    index_checkpoint, serialize_checkpoint, CheckpointSpec, DataType, Error, TensorPayload, TensorSpec,
};

fn weight(data: &[u8]) -> TensorSpec<'_> {
    bytes_tensor("w", DataType::Float, &[2], data)
}

#[test]
fn version_one_differs_only_in_the_version_field() {
    let data = [0u8, 0, 128, 63, 0, 0, 0, 64];
    let v2 = serialize_checkpoint(&CheckpointSpec { trainable: vec![weight(&data)], ..Default::default() })
        .unwrap();
    let v1 = serialize_checkpoint(&CheckpointSpec {
        version: 1,
        trainable: vec![weight(&data)],
        ..Default::default()
    })
    .unwrap();
    assert_eq!(index_checkpoint(&v1).unwrap().version, 1);
    assert_eq!(index_checkpoint(&v2).unwrap().version, 2);
    assert_eq!(v1.len(), v2.len());
    let differing: Vec<usize> = (0..v1.len()).filter(|&i| v1[i] != v2[i]).collect();
    assert_eq!(differing.len(), 1, "only the version byte differs");
    assert_eq!((v1[differing[0]], v2[differing[0]]), (1, 2));
}

#[test]
fn version_one_refuses_nominal_states_and_other_versions() {
    let nominal = TensorSpec {
        name: "w".into(),
        data_type: DataType::Float,
        dims: vec![],
        data: TensorPayload::Nominal,
        doc_string: None,
    };
    let spec =
        CheckpointSpec { version: 1, is_nominal: true, trainable: vec![nominal], ..Default::default() };
    match serialize_checkpoint(&spec) {
        Err(Error::InvalidSpec { detail }) => assert!(detail.contains("nominal"), "{detail}"),
        other => panic!("{other:?}"),
    }
    for version in [0, 3, -1] {
        match serialize_checkpoint(&CheckpointSpec { version, ..Default::default() }) {
            Err(Error::InvalidSpec { detail }) => assert!(detail.contains(&version.to_string()), "{detail}"),
            other => panic!("{other:?}"),
        }
    }
}
