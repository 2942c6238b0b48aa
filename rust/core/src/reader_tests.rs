//! One test per way a file can be malformed, each building exactly that file.

use crate::schema::fbs;
use crate::test_support::oracle::{reference_index, same_result};
use crate::test_support::raw::{RawCheckpoint, RawGroup, RawTensor};
use crate::test_support::Rng;
use crate::{index_checkpoint, Error, ErrorKind, Storage};

/// A trainable `w` of shape [2, 3] and a frozen `b` of shape [3], inline.
fn base() -> RawCheckpoint {
    RawCheckpoint {
        trainable: vec![RawTensor::floats("w", &[2, 3])],
        frozen: vec![RawTensor::floats("b", &[3])],
        ..Default::default()
    }
}

fn group(name: &str, states: Vec<(Option<String>, Vec<RawTensor>)>) -> RawGroup {
    RawGroup { name: Some(name.into()), step: 1, initial_learning_rate: 0.5, states }
}

fn err(c: &RawCheckpoint) -> Error {
    index_checkpoint(&c.build()).expect_err("malformed checkpoint was accepted")
}

fn with_tensor(t: RawTensor) -> RawCheckpoint {
    RawCheckpoint { trainable: vec![t], ..base() }
}

#[test]
fn well_formed_raw_checkpoint_is_accepted() {
    let index = index_checkpoint(&base().build()).unwrap();
    assert_eq!(index.version, 2);
    let w = index.tensor(0).unwrap();
    assert_eq!((w.name, w.doc_string, w.dims), ("w", "", &[2i64, 3][..]));
    assert!(matches!(w.storage, Storage::Inline { len: 24, .. }));
    assert_eq!((index.trainable_count(), index.parameter_count(), index.tensor_count()), (1, 2, 2));
    assert_eq!(index.frozen().next().unwrap().name, "b");
    assert_eq!(index.find_parameter("b"), Some(1));
    assert_eq!(index.find_parameter("x"), None);
    assert_eq!(index.parameters_by_name(), [1, 0]);
    // the rank is a hint only: right, wrong or past the end, the answer is the same
    for rank in [0, 1, 7] {
        assert_eq!(index.find_parameter_ranked("b", rank), Some(1));
        assert_eq!(index.find_parameter_ranked("w", rank), Some(0));
        assert_eq!(index.find_parameter_ranked("x", rank), None);
    }
}

#[test]
fn too_short() {
    for len in 0..8 {
        assert!(matches!(index_checkpoint(&vec![0u8; len]), Err(Error::TooShort { .. })));
    }
}

#[test]
fn wrong_identifier() {
    let mut bytes = base().build();
    bytes[4..8].copy_from_slice(b"XYZW");
    let e = index_checkpoint(&bytes).unwrap_err();
    assert!(matches!(e, Error::WrongIdentifier { .. }));
    assert!(e.to_string().contains("\"XYZW\""), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidCheckpoint);
    // an identifier of another ORT file kind names that kind instead (sniff.rs)
    bytes[4..8].copy_from_slice(b"ORTM");
    let e = index_checkpoint(&bytes).unwrap_err();
    assert!(matches!(e, Error::WrongKind { found: crate::FileKind::OrtModel, .. }), "{e}");
    assert!(e.to_string().contains("an ORT format model (.ort)"), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidCheckpoint);
}

#[test]
fn broken_flatbuffer() {
    let mut bytes = base().build();
    bytes[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = index_checkpoint(&bytes).unwrap_err();
    assert!(matches!(e, Error::Malformed { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::InvalidCheckpoint);
}

#[test]
fn unsupported_version() {
    for version in [0, 3, -1, i32::MAX] {
        let e = err(&RawCheckpoint { version, ..base() });
        assert!(matches!(e, Error::UnsupportedVersion { found } if found == version));
        assert_eq!(e.kind(), ErrorKind::UnsupportedVersion);
    }
}

#[test]
fn missing_fields() {
    // ORT omits the module state of a state without parameters: that is an empty checkpoint.
    let no_module = index_checkpoint(&RawCheckpoint { module: false, ..base() }.build()).unwrap();
    assert!(no_module.tensor_count() == 0 && no_module.parameter_count() == 0 && !no_module.is_nominal);
    let mut t = RawTensor::floats("w", &[1]);
    t.name = None;
    assert!(matches!(err(&with_tensor(t)), Error::MissingField { .. }));
    let nameless_group =
        RawCheckpoint { groups: vec![RawGroup { name: None, ..group("g", vec![]) }], ..base() };
    assert!(matches!(err(&nameless_group), Error::MissingField { .. }));
    let nameless_param = RawCheckpoint { groups: vec![group("g", vec![(None, vec![])])], ..base() };
    assert!(matches!(err(&nameless_param), Error::MissingField { .. }));
    let valueless = RawCheckpoint { strings: vec![(Some("s".into()), None)], ..base() };
    assert!(matches!(err(&valueless), Error::MissingField { .. }));
    let nameless_prop = RawCheckpoint { ints: vec![(None, 1)], ..base() };
    assert!(matches!(err(&nameless_prop), Error::MissingField { .. }));
    let nameless_float = RawCheckpoint { floats: vec![(None, 1.0)], ..base() };
    assert!(matches!(err(&nameless_float), Error::MissingField { .. }));
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
    let strings =
        |dims: Vec<i64>, values: &[&str]| RawTensor { dims: Some(dims), ..RawTensor::strings("s", values) };
    let ok = index_checkpoint(&with_tensor(strings(vec![2], &["a", "é"])).build()).unwrap();
    assert_eq!(ok.tensor(0).unwrap().storage, Storage::Strings(&["a".into(), "é".into()]));
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
    let c = RawCheckpoint { trainable: vec![both], has_external_data: true, ..base() };
    assert!(matches!(err(&c), Error::InlineAndExternal { .. }));

    let mut ext = RawTensor::floats("w", &[2]);
    ext.raw = None;
    ext.external_offset = 64;
    let flagged = RawCheckpoint { trainable: vec![ext.clone()], has_external_data: true, ..base() };
    let index = index_checkpoint(&flagged.build()).unwrap();
    assert_eq!(index.tensor(0).unwrap().storage, Storage::External { offset: 64, len: 8 });
    let unflagged = RawCheckpoint { trainable: vec![ext.clone()], ..base() };
    assert!(matches!(err(&unflagged), Error::ExternalWithoutFlag { .. }));

    let mut bad = ext.clone();
    bad.external_offset = -2;
    let c = RawCheckpoint { trainable: vec![bad], has_external_data: true, ..base() };
    assert!(matches!(err(&c), Error::BadExternalOffset { offset: -2, .. }));
    let mut end_overflows = ext;
    end_overflows.external_offset = i64::MAX;
    end_overflows.dims = Some(vec![1 << 60]);
    let c = RawCheckpoint { trainable: vec![end_overflows], has_external_data: true, ..base() };
    assert!(matches!(err(&c), Error::BadExternalOffset { .. }));
}

#[test]
fn duplicate_names() {
    let dup_param = RawCheckpoint {
        trainable: vec![RawTensor::floats("w", &[1])],
        frozen: vec![RawTensor::floats("w", &[1])],
        ..base()
    };
    let e = err(&dup_param);
    assert!(matches!(e, Error::DuplicateName { kind: "parameter", .. }));
    assert_eq!(e.kind(), ErrorKind::DuplicateName);

    let dup_group = RawCheckpoint { groups: vec![group("g", vec![]), group("g", vec![])], ..base() };
    assert!(matches!(err(&dup_group), Error::DuplicateName { kind: "optimizer group", .. }));
    let dup_state = RawCheckpoint {
        groups: vec![group("g", vec![(Some("w".into()), vec![]), (Some("w".into()), vec![])])],
        ..base()
    };
    assert!(matches!(err(&dup_state), Error::DuplicateName { kind: "optimizer state parameter", .. }));
    let m = RawTensor::floats("momentum0", &[1]);
    let dup_momentum =
        RawCheckpoint { groups: vec![group("g", vec![(Some("w".into()), vec![m.clone(), m])])], ..base() };
    assert!(matches!(err(&dup_momentum), Error::DuplicateName { kind: "momentum", .. }));
    let dup_prop = RawCheckpoint {
        ints: vec![(Some("p".into()), 1)],
        strings: vec![(Some("p".into()), Some("x".into()))],
        ..base()
    };
    assert!(matches!(err(&dup_prop), Error::DuplicateName { kind: "property", .. }));
    // Many parameters: the duplicate is found by sorting.
    let many: Vec<RawTensor> = (0..50).map(|i| RawTensor::floats(&format!("p{i}"), &[1])).collect();
    let mut frozen = many.clone();
    frozen.truncate(10);
    let c = RawCheckpoint { trainable: many[10..].to_vec(), frozen: frozen.clone(), ..base() };
    let index = index_checkpoint(&c.build()).unwrap();
    let names: Vec<&str> =
        index.parameters_by_name().iter().map(|&p| index.tensor(p as usize).unwrap().name).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
    for (position, t) in index.tensors().enumerate() {
        assert_eq!(index.find_parameter(t.name), Some(position));
    }
    frozen.push(RawTensor::floats("p33", &[2]));
    let c = RawCheckpoint { trainable: many[10..].to_vec(), frozen, ..base() };
    assert!(matches!(err(&c), Error::DuplicateName { kind: "parameter", ref name } if name == "p33"));
}

#[test]
fn nominal_tensors_have_no_data() {
    let mut t = RawTensor::floats("w", &[1]);
    t.dims = None;
    t.raw = None;
    let c = RawCheckpoint { trainable: vec![t], nominal: true, ..base() };
    let index = index_checkpoint(&c.build()).unwrap();
    assert!(index.is_nominal);
    assert_eq!(index.tensor(0).unwrap().storage, Storage::Nominal);
    // A zero-element tensor keeps its (empty) data: nominal tensors are the ones without dims.
    let mut empty = RawTensor::floats("e", &[0]);
    empty.raw = Some(vec![]);
    let c = RawCheckpoint { trainable: vec![empty], nominal: true, ..base() };
    let index = index_checkpoint(&c.build()).unwrap();
    assert!(matches!(index.tensor(0).unwrap().storage, Storage::Inline { len: 0, .. }));
    // Momentums always hold values, even in a nominal checkpoint.
    let mut m = RawTensor::floats("momentum0", &[1]);
    m.dims = None;
    m.raw = None;
    let c = RawCheckpoint {
        nominal: true,
        groups: vec![group("g", vec![(Some("b".into()), vec![m])])],
        ..base()
    };
    assert!(matches!(err(&c), Error::DataLengthMismatch { .. }));
    // The same tensor in a non-nominal checkpoint is a data error.
    let mut t = RawTensor::floats("w", &[1]);
    t.raw = None;
    assert!(matches!(err(&with_tensor(t)), Error::DataLengthMismatch { .. }));
}

fn rich_checkpoint() -> Vec<u8> {
    RawCheckpoint {
        groups: vec![group(
            "group0",
            vec![(Some("w".into()), vec![RawTensor::floats("momentum0", &[2, 3])])],
        )],
        ints: vec![(Some("epoch".into()), 3)],
        strings: vec![(Some("note".into()), Some("héllo".into()))],
        ..base()
    }
    .build()
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let bytes = rich_checkpoint();
    // Only the alignment padding after the last object may go.
    let shortest = (0..=bytes.len()).find(|&len| index_checkpoint(&bytes[..len]).is_ok()).unwrap();
    assert!(shortest + 3 >= bytes.len(), "truncated to {shortest} of {} bytes was accepted", bytes.len());
    assert!((shortest..=bytes.len()).all(|len| index_checkpoint(&bytes[..len]).is_ok()));
}

#[test]
fn doc_strings_and_unknown_fields() {
    let mut t = RawTensor::floats("w", &[2]);
    t.doc_string = Some("the weight ✓".into());
    // A field id this schema does not know (a newer writer's) is ignored, as flatbuffers does.
    t.unknown = Some(7);
    let c = RawCheckpoint { trainable: vec![t, RawTensor::floats("v", &[1])], ..base() };
    let bytes = c.build();
    let index = index_checkpoint(&bytes).unwrap();
    assert_eq!(index.tensor(0).unwrap().doc_string, "the weight ✓");
    assert_eq!(index.tensor(1).unwrap().doc_string, "");
    assert!(same_result(&Ok(index), &reference_index(&bytes).unwrap()));
}

#[test]
fn shared_objects_are_bounded() {
    // One tensor with a long name, referenced 20,000 times from the trainable vector: a small
    // buffer that expands to megabytes of names. The reader stops at its budget.
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let name = fbb.create_string(&"n".repeat(2000));
    let tensor = {
        let start = fbb.start_table();
        fbb.push_slot_always(fbs::Tensor::VT_NAME, name);
        fbb.push_slot::<i32>(fbs::Tensor::VT_DATA_TYPE, 1, 0);
        fbb.end_table(start)
    };
    let shared = fbb.create_vector(&vec![tensor; 20_000]);
    let module = {
        let start = fbb.start_table();
        fbb.push_slot_always(fbs::ModuleState::VT_REQUIRES_GRAD_PARAMS, shared);
        fbb.push_slot_always(fbs::ModuleState::VT_FROZEN_PARAMS, shared);
        fbb.push_slot::<bool>(fbs::ModuleState::VT_IS_NOMINAL_STATE, true, false);
        fbb.end_table(start)
    };
    let start = fbb.start_table();
    fbb.push_slot_always::<i32>(fbs::Checkpoint::VT_VERSION, 2);
    fbb.push_slot_always(fbs::Checkpoint::VT_MODULE_STATE, module);
    let root = fbb.end_table(start);
    fbb.finish(root, Some("ODTC"));
    let bytes = fbb.finished_data();
    let e = index_checkpoint(bytes).unwrap_err();
    assert!(matches!(e, Error::Malformed { .. }), "{e}");
    assert!(reference_index(bytes).is_none(), "the flatbuffers verifier has the same bound");
}

/// Checkpoints of every shape the reader knows, as mutation bases.
fn bases() -> Vec<Vec<u8>> {
    let mut nominal = base();
    nominal.nominal = true;
    nominal.trainable =
        vec![RawTensor::nominal("w"), RawTensor { raw: Some(vec![]), ..RawTensor::floats("e", &[0]) }];
    let external = RawCheckpoint {
        has_external_data: true,
        trainable: vec![RawTensor::external("a", &[4], 0), RawTensor::external("b", &[2], 16)],
        frozen: vec![RawTensor::strings("s", &["x", "", "✓"])],
        groups: vec![group("g", vec![(Some("a".into()), vec![RawTensor::external("momentum0", &[4], 64)])])],
        floats: vec![(Some("loss".into()), -0.5)],
        ..base()
    };
    let mut doc = base();
    doc.version = 1;
    doc.trainable[0].doc_string = Some("doc".into());
    doc.trainable[0].unknown = Some(3);
    let mut out = vec![rich_checkpoint(), nominal.build(), external.build(), doc.build()];
    let data = crate::test_support::test_data_dir();
    for name in ["dtypes.ckpt", "mlp_adamw_with_optimizer.ckpt", "nominal_protos.ckpt"] {
        out.push(std::fs::read(data.join(name)).unwrap());
    }
    out
}

/// A copy of `bytes` with a few random changes: byte flips, 32-bit values written over offsets
/// and lengths, or a truncation.
fn mutate(bytes: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut m = bytes.to_vec();
    for _ in 0..(1 + rng.next_u64() % 3) {
        let i = (rng.next_u64() as usize) % m.len();
        match rng.next_u64() % 8 {
            0..=3 => m[i] = rng.next_u64() as u8,
            4..=6 => {
                let at = i & !3;
                let value = match rng.next_u64() % 3 {
                    0 => rng.next_u64() as u32,
                    1 => (rng.next_u64() % 64) as u32,
                    _ => u32::MAX - (rng.next_u64() % 8) as u32,
                };
                if at + 4 <= m.len() {
                    m[at..at + 4].copy_from_slice(&value.to_le_bytes());
                }
            }
            _ => m.truncate(i.max(8)),
        }
    }
    m
}

/// Mutants per base checkpoint: `ORTCKPT_ORACLE_ROUNDS`, 4,000 by default.
fn mutation_rounds() -> usize {
    std::env::var("ORTCKPT_ORACLE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(4000)
}

#[test]
fn reader_agrees_with_the_flatbuffers_oracle() {
    let rounds = mutation_rounds();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut compared, mut accepted) = (0, 0);
    for bytes in bases() {
        let reference = reference_index(&bytes);
        let found = index_checkpoint(&bytes);
        assert!(found.is_ok(), "a base checkpoint does not read: {:?}", found.err());
        if let Some(reference) = reference {
            assert!(same_result(&found, &reference));
        }
        for _ in 0..rounds {
            let m = mutate(&bytes, &mut rng);
            let found = index_checkpoint(&m);
            if let Err(e) = &found {
                let _ = (e.to_string(), e.kind());
            }
            accepted += usize::from(found.is_ok());
            if let Some(reference) = reference_index(&m) {
                compared += 1;
                assert!(
                    same_result(&found, &reference),
                    "reader and oracle disagree on {m:?}:\nreader: {found:?}\noracle: {reference:?}"
                );
            }
        }
    }
    // The comparison must not be vacuous. (The generated verifier refuses ORT's own dtypes and
    // nominal files, whose int64 dims are 4-byte aligned: their mutations only test for panics.)
    assert!(compared > rounds && accepted > rounds / 4, "compared {compared}, accepted {accepted}");
}

/// A random checkpoint: mostly valid, sometimes with a wrong size, count, flag or name.
fn random_checkpoint(rng: &mut Rng) -> RawCheckpoint {
    const NAMES: [&str; 8] = ["w", "b", "é✓", "", "momentum0", "momentum1", "a\0b", "layer.0.weight"];
    let name = |rng: &mut Rng| -> Option<String> {
        match rng.next_u64() % 16 {
            0 => None,
            1 => Some(format!("n{}", rng.next_u64() % 1000)),
            i => Some(NAMES[i as usize % NAMES.len()].to_owned()),
        }
    };
    let tensor = |rng: &mut Rng, external: bool| -> RawTensor {
        let dims: Vec<i64> = (0..rng.next_u64() % 4).map(|_| (rng.next_u64() % 4) as i64).collect();
        let count: i64 = dims.iter().product();
        let data_type = (rng.next_u64() % 22) as i32;
        let element = match data_type {
            2 | 3 | 9 | 17..=20 => 1,
            4 | 5 | 10 | 16 => 2,
            7 | 11 | 13 | 14 => 8,
            15 => 16,
            _ => 4,
        };
        let mut t = RawTensor {
            name: name(rng),
            doc_string: rng.next_u64().is_multiple_of(4).then(|| "doc ✓".to_owned()),
            dims: (!rng.next_u64().is_multiple_of(8)).then_some(dims),
            data_type,
            unknown: rng.next_u64().is_multiple_of(8).then_some(9),
            external_offset: -1,
            ..RawTensor::default()
        };
        let wrong = rng.next_u64().is_multiple_of(8) as i64;
        if data_type == 8 {
            t.strings = Some((0..count + wrong).map(|i| format!("s{i}")).collect());
        } else if external && rng.next_u64().is_multiple_of(2) {
            t.external_offset = (rng.next_u64() % 256) as i64 - wrong;
        } else if !rng.next_u64().is_multiple_of(8) {
            t.raw = Some(vec![7; ((count + wrong) * element) as usize]);
        }
        t
    };
    let external = rng.next_u64().is_multiple_of(3);
    let tensors =
        |rng: &mut Rng, n: u64| (0..rng.next_u64() % n).map(|_| tensor(rng, external)).collect::<Vec<_>>();
    let groups = (0..rng.next_u64() % 3)
        .map(|_| RawGroup {
            name: name(rng),
            step: rng.next_u64() as i64,
            initial_learning_rate: f32::from_bits(rng.next_u64() as u32),
            states: (0..rng.next_u64() % 3).map(|_| (name(rng), tensors(rng, 3))).collect(),
        })
        .collect();
    RawCheckpoint {
        version: [2, 2, 2, 1, 0, 3][rng.next_u64() as usize % 6],
        module: !rng.next_u64().is_multiple_of(8),
        nominal: rng.next_u64().is_multiple_of(4),
        has_external_data: external && !rng.next_u64().is_multiple_of(4),
        trainable: tensors(rng, 5),
        frozen: tensors(rng, 3),
        groups,
        ints: (0..rng.next_u64() % 3).map(|_| (name(rng), rng.next_u64() as i64)).collect(),
        floats: (0..rng.next_u64() % 2).map(|_| (name(rng), f32::from_bits(rng.next_u64() as u32))).collect(),
        strings: (0..rng.next_u64() % 2).map(|_| (name(rng), name(rng))).collect(),
    }
}

#[test]
fn reader_agrees_with_the_oracle_on_random_checkpoints() {
    let mut rng = Rng(0x853c_49e6_748f_ea9b);
    let (mut ok, mut errors) = (0, std::collections::BTreeMap::<String, usize>::new());
    for _ in 0..1500 {
        let bytes = random_checkpoint(&mut rng).build();
        let found = index_checkpoint(&bytes);
        let reference = reference_index(&bytes).expect("the builder wrote a buffer flatbuffers refuses");
        assert!(same_result(&found, &reference), "reader: {found:?}\noracle: {reference:?}");
        match &found {
            Ok(_) => ok += 1,
            Err(e) => *errors.entry(format!("{:?}", e.kind())).or_default() += 1,
        }
        for _ in 0..10 {
            let m = mutate(&bytes, &mut rng);
            let found = index_checkpoint(&m);
            if let Some(reference) = reference_index(&m) {
                assert!(
                    same_result(&found, &reference),
                    "on {m:?}:\nreader: {found:?}\noracle: {reference:?}"
                );
            }
        }
    }
    eprintln!("{ok} valid, errors {errors:?}");
    // Valid checkpoints and every family of error come out of the generator.
    assert!(ok > 100 && errors.len() >= 4, "{ok} valid, errors {errors:?}");
}

#[test]
fn misaligned_values_are_refused_as_ort_does() {
    let bytes = rich_checkpoint();
    let u32_at = |b: &[u8], p: usize| u32::from_le_bytes(b[p..p + 4].try_into().unwrap()) as usize;
    let root = u32_at(&bytes, 0);
    let vtable = (root as i64 - i64::from(u32_at(&bytes, root) as i32)) as usize;
    let not_aligned = |b: &[u8]| {
        let e = index_checkpoint(b).unwrap_err();
        assert!(matches!(e, Error::Malformed { .. }) && e.to_string().contains("aligned"), "{e}");
    };
    // The root table 2 bytes off.
    let mut m = bytes.clone();
    m[0..4].copy_from_slice(&((root + 2) as u32).to_le_bytes());
    not_aligned(&m);
    // `version` (int32) moved 2 bytes inside its table.
    let mut m = bytes.clone();
    let slot = vtable + usize::from(fbs::Checkpoint::VT_VERSION);
    let field = u16::from_le_bytes([m[slot], m[slot + 1]]);
    m[slot..slot + 2].copy_from_slice(&(field + 2).to_le_bytes());
    not_aligned(&m);
    // An offset (module_state's) moved 2 bytes.
    let mut m = bytes;
    let slot = vtable + usize::from(fbs::Checkpoint::VT_MODULE_STATE);
    let field = u16::from_le_bytes([m[slot], m[slot + 1]]);
    m[slot..slot + 2].copy_from_slice(&(field + 2).to_le_bytes());
    not_aligned(&m);
}

/// Indexes with lengths compared on first use, then compares every one: the outcome eager
/// indexing would give, as one result.
fn index_deferred_then_check_all(bytes: &[u8]) -> crate::Result<crate::CheckpointIndex> {
    // SAFETY: `bytes` is borrowed for the whole call.
    let index =
        unsafe { crate::index_checkpoint_raw(bytes.as_ptr(), bytes.len(), crate::LengthCheck::OnFirstUse) }?;
    for position in 0..index.tensor_count() {
        index.check_inline_length(position, bytes)?;
    }
    Ok(index)
}

/// The debug form of an index with its deferred length checks counted as done.
fn checked_form(index: &crate::CheckpointIndex) -> String {
    format!("{index:?}").replace("InlineUnchecked", "Inline")
}

#[test]
fn a_deferred_length_is_compared_on_first_use() {
    let mut t = RawTensor::floats("w", &[2, 3]);
    t.raw = Some(vec![0; 23]);
    let bytes = with_tensor(t).build();
    // SAFETY: `bytes` is borrowed for the whole call.
    let index =
        unsafe { crate::index_checkpoint_raw(bytes.as_ptr(), bytes.len(), crate::LengthCheck::OnFirstUse) }
            .expect("the range the shape calls for lies inside the buffer");
    assert!(index.has_unchecked_lengths());
    let w = index.tensor(0).unwrap();
    assert!(matches!(w.storage, Storage::Inline { len: 24, length_checked: false, .. }), "{w:?}");
    let e = index.check_inline_length(0, &bytes).unwrap_err();
    assert!(matches!(e, Error::DataLengthMismatch { expected: 24, found: 23, .. }), "{e}");
    assert!(e.to_string().contains("\"w\""), "{e}");
    // The frozen `b` is fine; out-of-range positions have nothing to check.
    index.check_inline_length(1, &bytes).unwrap();
    index.check_inline_length(99, &bytes).unwrap();
    // A buffer too short for the prefix reads as a mismatch, never a panic.
    assert!(index.check_inline_length(0, &bytes[..8]).is_err());
}

#[test]
fn a_deferred_range_must_still_lie_inside_the_buffer() {
    // The shape calls for more bytes than the file has after the prefix: refused while indexing,
    // with the error eager indexing gives.
    let mut t = RawTensor::floats("w", &[2]);
    t.dims = Some(vec![1 << 40]);
    let bytes = with_tensor(t).build();
    // SAFETY: `bytes` is borrowed for the whole call.
    let found =
        unsafe { crate::index_checkpoint_raw(bytes.as_ptr(), bytes.len(), crate::LengthCheck::OnFirstUse) };
    assert!(matches!(found, Err(Error::DataLengthMismatch { .. })), "{found:?}");
    assert!(same_result(&found, &index_checkpoint(&bytes)));
}

#[test]
fn deferred_and_eager_length_checks_agree() {
    let rounds = mutation_rounds();
    let mut rng = Rng(0x51f1_5eed_d00d_f00d);
    let (mut compared, mut deferred_some) = (0, 0);
    for bytes in bases() {
        for round in 0..=rounds {
            let m = if round == 0 { bytes.clone() } else { mutate(&bytes, &mut rng) };
            let eager = index_checkpoint(&m);
            let deferred = index_deferred_then_check_all(&m);
            match (&eager, &deferred) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(checked_form(a), checked_form(b), "on {m:?}");
                    deferred_some += usize::from(b.has_unchecked_lengths());
                }
                (Err(_), Err(_)) => {}
                _ => panic!("eager and deferred length checks disagree on {m:?}:\n{eager:?}\n{deferred:?}"),
            }
            compared += 1;
        }
    }
    assert!(deferred_some > 0 && compared > rounds, "compared {compared}, deferred {deferred_some}");
}

/// The flatbuffers C++ verifier (which ORT runs) refuses an offset of 0 ("may not point to
/// itself") and one of 2^31 or more ("can't wrap around"), and one that points past the buffer;
/// the reader refuses them too, wherever they are: the root offset, a table's field offset, and an
/// element of a vector of tables. The flatbuffers crate's Rust verifier lets some of them through.
#[test]
fn offsets_the_cpp_verifier_refuses_are_refused() {
    let bytes = base().build();
    let u32_at = |b: &[u8], p: usize| u32::from_le_bytes(b[p..p + 4].try_into().unwrap()) as usize;
    let root = u32_at(&bytes, 0);
    let vtable =
        (root as i64 - i64::from(i32::from_le_bytes(bytes[root..root + 4].try_into().unwrap()))) as usize;
    let slot = usize::from(fbs::Checkpoint::VT_MODULE_STATE);
    let module_field =
        root + usize::from(u16::from_le_bytes(bytes[vtable + slot..vtable + slot + 2].try_into().unwrap()));
    // The module state's first field (its trainable tensors) is a vector of tables.
    let module = module_field + u32_at(&bytes, module_field);
    let mvtable = (module as i64
        - i64::from(i32::from_le_bytes(bytes[module..module + 4].try_into().unwrap())))
        as usize;
    let tslot = usize::from(fbs::ModuleState::VT_REQUIRES_GRAD_PARAMS);
    let params_field = module
        + usize::from(u16::from_le_bytes(bytes[mvtable + tslot..mvtable + tslot + 2].try_into().unwrap()));
    let first_element = params_field + u32_at(&bytes, params_field) + 4;
    let mut lax = 0;
    for at in [0, module_field, params_field, first_element] {
        for (value, what) in [
            (0u32, "an offset is 0 or negative"),
            (0x8000_0000, "an offset is 0 or negative"),
            (u32::MAX, "an offset is 0 or negative"),
            ((bytes.len() - at) as u32, "an offset points outside the buffer"),
        ] {
            let mut m = bytes.clone();
            m[at..at + 4].copy_from_slice(&value.to_le_bytes());
            match index_checkpoint(&m) {
                Err(Error::Malformed { what: found, offset }) => {
                    assert_eq!((found, offset), (what, at), "offset {value:#x} at {at}")
                }
                other => panic!("offset {value:#x} at {at}: {other:?}"),
            }
            lax += usize::from(value == 0 && reference_index(&m).is_some());
        }
    }
    // (Documents why the oracle skips these: the Rust verifier accepts some offsets of 0.)
    assert!(lax > 0, "the Rust verifier now refuses offsets of 0: the oracle's exception can go");
    assert!(index_checkpoint(&bytes).is_ok());
}
