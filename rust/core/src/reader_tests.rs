//! One test per way a file can be malformed, each building exactly that file.

use crate::raw_builder::{RawCheckpoint, RawGroup, RawTensor};
use crate::{index_checkpoint, Error, ErrorKind, Storage};

fn err(c: &RawCheckpoint) -> Error {
    index_checkpoint(&c.build()).expect_err("malformed checkpoint was accepted")
}

fn with_tensor(t: RawTensor) -> RawCheckpoint {
    RawCheckpoint { trainable: vec![t], ..Default::default() }
}

#[test]
fn well_formed_raw_checkpoint_is_accepted() {
    let index = index_checkpoint(&RawCheckpoint::default().build()).unwrap();
    assert_eq!(index.version, 2);
    assert_eq!(index.trainable[0].name, "w");
    assert!(matches!(index.trainable[0].storage, Storage::Inline { len: 24, .. }));
}

#[test]
fn too_short() {
    for len in 0..8 {
        assert!(matches!(index_checkpoint(&vec![0u8; len]), Err(Error::TooShort { .. })));
    }
}

#[test]
fn wrong_identifier() {
    let mut bytes = RawCheckpoint::default().build();
    bytes[4..8].copy_from_slice(b"ORTM");
    let e = index_checkpoint(&bytes).unwrap_err();
    assert!(matches!(e, Error::WrongIdentifier { .. }));
    assert!(e.to_string().contains("\"ORTM\""), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidCheckpoint);
}

#[test]
fn broken_flatbuffer() {
    let mut bytes = RawCheckpoint::default().build();
    bytes[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(index_checkpoint(&bytes), Err(Error::Flatbuffer(_))));
}

#[test]
fn unsupported_version() {
    for version in [0, 3, -1, i32::MAX] {
        let e = err(&RawCheckpoint { version, ..Default::default() });
        assert!(matches!(e, Error::UnsupportedVersion { found } if found == version));
        assert_eq!(e.kind(), ErrorKind::UnsupportedVersion);
    }
}

#[test]
fn missing_fields() {
    // ORT omits the module state of a state without parameters: that is an empty checkpoint.
    let no_module = index_checkpoint(&RawCheckpoint { module: false, ..Default::default() }.build()).unwrap();
    assert!(no_module.trainable.is_empty() && no_module.frozen.is_empty() && !no_module.is_nominal);
    let mut t = RawTensor::floats("w", &[1]);
    t.name = None;
    assert!(matches!(err(&with_tensor(t)), Error::MissingField { .. }));
    let nameless_group =
        RawCheckpoint { groups: vec![RawGroup { name: None, states: vec![] }], ..Default::default() };
    assert!(matches!(err(&nameless_group), Error::MissingField { .. }));
    let nameless_param = RawCheckpoint {
        groups: vec![RawGroup { name: Some("g".into()), states: vec![(None, vec![])] }],
        ..Default::default()
    };
    assert!(matches!(err(&nameless_param), Error::MissingField { .. }));
    let valueless = RawCheckpoint { strings: vec![(Some("s".into()), None)], ..Default::default() };
    assert!(matches!(err(&valueless), Error::MissingField { .. }));
    let nameless_prop = RawCheckpoint { ints: vec![(None, 1)], ..Default::default() };
    assert!(matches!(err(&nameless_prop), Error::MissingField { .. }));
}

#[test]
fn unknown_data_type() {
    for code in [0, 21, -5, 1000] {
        let mut t = RawTensor::floats("w", &[1]);
        t.data_type = code;
        let e = err(&with_tensor(t));
        assert!(matches!(e, Error::UnknownDataType { code: c, .. } if c == code), "{e}");
        assert_eq!(e.kind(), ErrorKind::TensorData);
    }
}

#[test]
fn negative_dim() {
    let mut t = RawTensor::floats("w", &[1]);
    t.dims = Some(vec![2, -3]);
    let e = err(&with_tensor(t));
    assert!(matches!(e, Error::NegativeDim { .. }));
    assert!(e.to_string().contains("\"w\""), "{e}");
}

#[test]
fn huge_dims_overflow() {
    let mut t = RawTensor::floats("w", &[1]);
    t.dims = Some(vec![i64::MAX, 4]);
    assert!(matches!(err(&with_tensor(t)), Error::SizeOverflow { .. }));
    let mut t = RawTensor::floats("w", &[1]);
    t.dims = Some(vec![1 << 62]); // count fits, bytes (× 4) do not
    assert!(matches!(err(&with_tensor(t)), Error::SizeOverflow { .. }));
}

#[test]
fn raw_data_length_mismatch() {
    let mut t = RawTensor::floats("w", &[2, 3]);
    t.raw = Some(vec![0; 23]);
    let e = err(&with_tensor(t));
    assert!(matches!(e, Error::DataLengthMismatch { expected: 24, found: 23, .. }), "{e}");
    let mut t = RawTensor::floats("w", &[2]);
    t.dims = Some(vec![1 << 40]);
    assert!(matches!(err(&with_tensor(t)), Error::DataLengthMismatch { .. }));
}

#[test]
fn string_tensors() {
    let strings = |dims: Vec<i64>, values: &[&str]| RawTensor {
        name: Some("s".into()),
        data_type: 8,
        dims: Some(dims),
        raw: None,
        strings: Some(values.iter().map(|s| s.to_string()).collect()),
        external_offset: -1,
    };
    let ok = index_checkpoint(&with_tensor(strings(vec![2], &["a", "é"])).build()).unwrap();
    assert_eq!(ok.trainable[0].storage, Storage::Strings(vec!["a".into(), "é".into()]));
    assert!(matches!(
        err(&with_tensor(strings(vec![3], &["a"]))),
        Error::StringCountMismatch { expected: 3, found: 1, .. }
    ));
    let mut raw = strings(vec![1], &["a"]);
    raw.raw = Some(vec![1]);
    assert!(matches!(err(&with_tensor(raw)), Error::WrongStorage { .. }));
    let mut ext = strings(vec![1], &["a"]);
    ext.external_offset = 0;
    assert!(matches!(err(&with_tensor(ext)), Error::WrongStorage { .. }));
    let mut numeric_with_strings = RawTensor::floats("w", &[1]);
    numeric_with_strings.strings = Some(vec!["x".into()]);
    assert!(matches!(err(&with_tensor(numeric_with_strings)), Error::WrongStorage { .. }));
}

#[test]
fn external_data_rules() {
    let mut both = RawTensor::floats("w", &[2]);
    both.external_offset = 0;
    let c = RawCheckpoint { trainable: vec![both], has_external_data: true, ..Default::default() };
    assert!(matches!(err(&c), Error::InlineAndExternal { .. }));

    let mut ext = RawTensor::floats("w", &[2]);
    ext.raw = None;
    ext.external_offset = 64;
    let flagged =
        RawCheckpoint { trainable: vec![ext.clone()], has_external_data: true, ..Default::default() };
    let index = index_checkpoint(&flagged.build()).unwrap();
    assert_eq!(index.trainable[0].storage, Storage::External { offset: 64, len: 8 });
    let unflagged = RawCheckpoint { trainable: vec![ext.clone()], ..Default::default() };
    assert!(matches!(err(&unflagged), Error::ExternalWithoutFlag { .. }));

    let mut bad = ext.clone();
    bad.external_offset = -2;
    let c = RawCheckpoint { trainable: vec![bad], has_external_data: true, ..Default::default() };
    assert!(matches!(err(&c), Error::BadExternalOffset { offset: -2, .. }));
    let mut end_overflows = ext;
    end_overflows.external_offset = i64::MAX;
    end_overflows.dims = Some(vec![1 << 60]);
    let c = RawCheckpoint { trainable: vec![end_overflows], has_external_data: true, ..Default::default() };
    assert!(matches!(err(&c), Error::BadExternalOffset { .. }));
}

#[test]
fn duplicate_names() {
    let dup_param = RawCheckpoint {
        trainable: vec![RawTensor::floats("w", &[1])],
        frozen: vec![RawTensor::floats("w", &[1])],
        ..Default::default()
    };
    let e = err(&dup_param);
    assert!(matches!(e, Error::DuplicateName { kind: "parameter", .. }));
    assert_eq!(e.kind(), ErrorKind::DuplicateName);

    let group = |name: &str, states| RawGroup { name: Some(name.into()), states };
    let dup_group =
        RawCheckpoint { groups: vec![group("g", vec![]), group("g", vec![])], ..Default::default() };
    assert!(matches!(err(&dup_group), Error::DuplicateName { kind: "optimizer group", .. }));
    let dup_state = RawCheckpoint {
        groups: vec![group("g", vec![(Some("w".into()), vec![]), (Some("w".into()), vec![])])],
        ..Default::default()
    };
    assert!(matches!(err(&dup_state), Error::DuplicateName { kind: "optimizer state parameter", .. }));
    let m = RawTensor::floats("momentum0", &[1]);
    let dup_momentum = RawCheckpoint {
        groups: vec![group("g", vec![(Some("w".into()), vec![m.clone(), m])])],
        ..Default::default()
    };
    assert!(matches!(err(&dup_momentum), Error::DuplicateName { kind: "momentum", .. }));
    let dup_prop = RawCheckpoint {
        ints: vec![(Some("p".into()), 1)],
        strings: vec![(Some("p".into()), Some("x".into()))],
        ..Default::default()
    };
    assert!(matches!(err(&dup_prop), Error::DuplicateName { kind: "property", .. }));
}

#[test]
fn nominal_tensors_have_no_data() {
    let mut t = RawTensor::floats("w", &[1]);
    t.dims = None;
    t.raw = None;
    let c = RawCheckpoint { trainable: vec![t], nominal: true, ..Default::default() };
    let index = index_checkpoint(&c.build()).unwrap();
    assert!(index.is_nominal);
    assert_eq!(index.trainable[0].storage, Storage::Nominal);
    // A zero-element tensor keeps its (empty) data: nominal tensors are the ones without dims.
    let mut empty = RawTensor::floats("e", &[0]);
    empty.raw = Some(vec![]);
    let c = RawCheckpoint { trainable: vec![empty], nominal: true, ..Default::default() };
    let index = index_checkpoint(&c.build()).unwrap();
    assert!(matches!(index.trainable[0].storage, Storage::Inline { len: 0, .. }));
    // Momentums always hold values, even in a nominal checkpoint.
    let mut m = RawTensor::floats("momentum0", &[1]);
    m.dims = None;
    m.raw = None;
    let c = RawCheckpoint {
        nominal: true,
        groups: vec![RawGroup { name: Some("g".into()), states: vec![(Some("b".into()), vec![m])] }],
        ..Default::default()
    };
    assert!(matches!(err(&c), Error::DataLengthMismatch { .. }));
    // The same tensor in a non-nominal checkpoint is a data error.
    let mut t = RawTensor::floats("w", &[1]);
    t.raw = None;
    assert!(matches!(err(&with_tensor(t)), Error::DataLengthMismatch { .. }));
}

/// Deterministic xorshift so the mutation tests need no extra dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn rich_checkpoint() -> Vec<u8> {
    RawCheckpoint {
        groups: vec![RawGroup {
            name: Some("group0".into()),
            states: vec![(Some("w".into()), vec![RawTensor::floats("momentum0", &[2, 3])])],
        }],
        ints: vec![(Some("epoch".into()), 3)],
        strings: vec![(Some("note".into()), Some("héllo".into()))],
        ..Default::default()
    }
    .build()
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let bytes = rich_checkpoint();
    for len in 0..bytes.len() {
        assert!(index_checkpoint(&bytes[..len]).is_err(), "truncated to {len} bytes was accepted");
    }
}

#[test]
fn random_byte_flips_never_panic() {
    let bytes = rich_checkpoint();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let mut m = bytes.clone();
        for _ in 0..(1 + rng.next() % 4) {
            let i = (rng.next() as usize) % m.len();
            m[i] = rng.next() as u8;
        }
        let _ = index_checkpoint(&m);
    }
}
