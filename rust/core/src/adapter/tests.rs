use super::oracle::{check_adapter_bytes, rewrite};
use super::schema::fbs;
use super::*;
use crate::{DataType, Error, ErrorKind};

fn floats(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Three parameters: a 2×2 float, a one-element int64 and an empty float16.
fn sample() -> Vec<u8> {
    let a = floats(&[1.0, -2.5, 3.0, 4.25]);
    let b = 7i64.to_le_bytes();
    let specs = [
        AdapterParameterSpec { name: "lora_A", data_type: DataType::Float, dims: &[2, 2], data: &a },
        AdapterParameterSpec { name: "step", data_type: DataType::Int64, dims: &[1], data: &b },
        AdapterParameterSpec { name: "empty", data_type: DataType::Float16, dims: &[0, 3], data: &[] },
    ];
    serialize_adapter(&specs, 3, 9).unwrap()
}

/// An adapter written back to front by the flatbuffers builder of the generated code, the way
/// ORT's own writer (the C++ builder) lays one out.
fn built_by_flatbuffers(format_version: i32, names: &[&str], data_len: usize) -> Vec<u8> {
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let mut params = Vec::new();
    for name in names {
        let name = b.create_string(name);
        let dims = b.create_vector(&[data_len as i64]);
        let raw = b.create_vector(&vec![0xabu8; data_len]);
        let args = fbs::ParameterArgs {
            name: Some(name),
            dims: Some(dims),
            data_type: fbs::TensorDataType::UINT8,
            raw_data: Some(raw),
        };
        params.push(fbs::Parameter::create(&mut b, &args));
    }
    let parameters = b.create_vector(&params);
    let args = fbs::AdapterArgs {
        format_version,
        adapter_version: 1,
        model_version: 2,
        parameters: Some(parameters),
    };
    let root = fbs::Adapter::create(&mut b, &args);
    fbs::finish_adapter_buffer(&mut b, root);
    b.finished_data().to_vec()
}

#[test]
fn writes_and_reads_back() {
    let bytes = sample();
    assert_eq!(&bytes[4..8], ADAPTER_FILE_IDENTIFIER);
    let index = index_adapter(&bytes).unwrap();
    assert_eq!((index.format_version, index.adapter_version, index.model_version), (1, 3, 9));
    let names: Vec<_> = index.parameters.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["lora_A", "step", "empty"]);
    let a = &index.parameters[0];
    assert_eq!((a.data_type, a.dims.as_slice()), (DataType::Float, &[2i64, 2][..]));
    assert_eq!(&bytes[a.offset..a.offset + a.len], floats(&[1.0, -2.5, 3.0, 4.25]));
    assert_eq!(&bytes[index.parameters[1].offset..][..8], 7i64.to_le_bytes());
    assert_eq!(index.parameters[2].len, 0);
    check_adapter_bytes(&bytes);
}

#[test]
fn reads_the_flatbuffers_builders_layout() {
    let bytes = built_by_flatbuffers(1, &["x", "y"], 5);
    let index = index_adapter(&bytes).unwrap();
    assert_eq!(index.parameters.len(), 2);
    assert_eq!(index.parameters[1].dims, [5]);
    assert_eq!(&bytes[index.parameters[1].offset..][..5], [0xab; 5]);
    check_adapter_bytes(&bytes);
    // Written again by ortckpt: same contents, read by the verifier as well.
    let again = rewrite(&index, &bytes);
    assert!(fbs::root_as_adapter(&again).is_ok());
}

#[test]
fn refuses_what_ort_refuses() {
    let kind = |bytes: &[u8]| index_adapter(bytes).unwrap_err().kind();
    assert_eq!(kind(b"12345678"), ErrorKind::InvalidCheckpoint);
    let mut other = sample();
    other[4..8].copy_from_slice(b"ODTC");
    let err = index_adapter(&other).unwrap_err();
    assert!(err.to_string().contains("not an ORT adapter file"), "{err}");
    let v2 = built_by_flatbuffers(2, &["x"], 1);
    assert!(matches!(index_adapter(&v2), Err(Error::UnsupportedAdapterVersion { found: 2 })));
    assert_eq!(kind(&built_by_flatbuffers(0, &["x"], 1)), ErrorKind::UnsupportedVersion);
    let twice = built_by_flatbuffers(1, &["x", "x"], 1);
    assert!(matches!(index_adapter(&twice), Err(Error::DuplicateName { .. })));
    assert_eq!(kind(&built_by_flatbuffers(1, &[""], 1)), ErrorKind::InvalidCheckpoint);
}

#[test]
fn refuses_data_that_disagrees_with_the_shape() {
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let name = b.create_string("w");
    let dims = b.create_vector(&[2i64, 3]);
    let raw = b.create_vector(&[0u8; 20]);
    let args = fbs::ParameterArgs {
        name: Some(name),
        dims: Some(dims),
        data_type: fbs::TensorDataType::FLOAT,
        raw_data: Some(raw),
    };
    let p = fbs::Parameter::create(&mut b, &args);
    let parameters = b.create_vector(&[p]);
    let root = fbs::Adapter::create(
        &mut b,
        &fbs::AdapterArgs {
            format_version: 1,
            adapter_version: 0,
            model_version: 0,
            parameters: Some(parameters),
        },
    );
    fbs::finish_adapter_buffer(&mut b, root);
    let err = index_adapter(b.finished_data()).unwrap_err();
    assert!(matches!(err, Error::DataLengthMismatch { expected: 24, found: 20, .. }), "{err}");
    assert_eq!(err.tensor(), Some("w"));
}

#[test]
fn writer_refuses_what_the_reader_would() {
    let f = floats(&[1.0]);
    let spec = |name, data_type, dims, data| AdapterParameterSpec { name, data_type, dims, data };
    let one = spec("a", DataType::Float, &[1][..], &f[..]);
    assert!(matches!(serialize_adapter(&[one, one], 0, 0), Err(Error::DuplicateName { .. })));
    assert!(serialize_adapter(&[spec("", DataType::Float, &[1], &f)], 0, 0).is_err());
    assert!(matches!(
        serialize_adapter(&[spec("s", DataType::String, &[1], &[])], 0, 0),
        Err(Error::WrongStorage { .. })
    ));
    assert!(matches!(
        serialize_adapter(&[spec("a", DataType::Float, &[2], &f)], 0, 0),
        Err(Error::DataLengthMismatch { .. })
    ));
    assert!(matches!(
        serialize_adapter(&[spec("a", DataType::Float, &[-1], &f)], 0, 0),
        Err(Error::NegativeDim { .. })
    ));
    // What ONNX Runtime 1.32 refuses to load: scalars, bool and complex values.
    for (data_type, dims) in
        [(DataType::Float, &[][..]), (DataType::Bool, &[4][..]), (DataType::Complex64, &[][..])]
    {
        let err = serialize_adapter(&[spec("a", data_type, dims, &f)], 0, 0).unwrap_err();
        assert!(matches!(err, Error::WrongStorage { .. }), "{err}");
        assert!(err.to_string().contains("ONNX Runtime refuses"), "{err}");
    }
}

#[test]
fn every_truncation_and_byte_change_is_an_error_or_the_same_reading() {
    for bytes in [sample(), built_by_flatbuffers(1, &["x", "yy"], 3)] {
        for len in 0..bytes.len() {
            check_adapter_bytes(&bytes[..len]);
        }
        for at in 0..bytes.len() {
            for value in [0u8, 1, 4, 7, 8, 0x7f, 0x80, 0xff, bytes[at] ^ 1] {
                let mut changed = bytes.clone();
                changed[at] = value;
                check_adapter_bytes(&changed);
            }
        }
    }
}

/// One parameter `p` of type `data_type` and shape `dims` with `data_len` bytes, as ORT's writer
/// lays it out.
fn one_parameter(data_type: fbs::TensorDataType, dims: &[i64], data_len: usize) -> Vec<u8> {
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let name = b.create_string("p");
    let dims = b.create_vector(dims);
    let raw = b.create_vector(&vec![1u8; data_len]);
    let args = fbs::ParameterArgs { name: Some(name), dims: Some(dims), data_type, raw_data: Some(raw) };
    let p = fbs::Parameter::create(&mut b, &args);
    let parameters = b.create_vector(&[p]);
    let args = fbs::AdapterArgs {
        format_version: 1,
        adapter_version: 0,
        model_version: 0,
        parameters: Some(parameters),
    };
    let root = fbs::Adapter::create(&mut b, &args);
    fbs::finish_adapter_buffer(&mut b, root);
    b.finished_data().to_vec()
}

#[test]
fn reader_refuses_what_ort_refuses_to_load() {
    // ORT 1.32 writes these (its writer does not check) but refuses to load them.
    for (data_type, dims, len) in [
        (fbs::TensorDataType::FLOAT, &[][..], 4),
        (fbs::TensorDataType::BOOL, &[2][..], 2),
        (fbs::TensorDataType::COMPLEX128, &[1][..], 16),
        (fbs::TensorDataType::STRING, &[1][..], 0),
    ] {
        let err = index_adapter(&one_parameter(data_type, dims, len)).unwrap_err();
        assert!(matches!(err, Error::WrongStorage { .. }), "{data_type:?}: {err}");
        assert_eq!(err.tensor(), Some("p"));
    }
    let unknown = index_adapter(&one_parameter(fbs::TensorDataType(99), &[1], 1)).unwrap_err();
    assert!(matches!(unknown, Error::UnknownDataType { code: 99, .. }), "{unknown}");
    let negative = index_adapter(&one_parameter(fbs::TensorDataType::UINT8, &[-1], 0)).unwrap_err();
    assert!(matches!(negative, Error::NegativeDim { .. }), "{negative}");
    // Accepted: every other numeric type, an empty tensor.
    assert!(index_adapter(&one_parameter(fbs::TensorDataType::BFLOAT16, &[0, 7], 0)).is_ok());
    assert!(index_adapter(&one_parameter(fbs::TensorDataType::FLOAT8E5M2, &[3], 3)).is_ok());
}

#[test]
fn offsets_of_zero_or_negative_are_refused_as_by_ort() {
    // The parameter list offset (at byte 36 of `sample()`'s root table) pointing at itself, a
    // zero-length list there: ORT's verifier refuses it ("may not point to itself").
    let bytes = sample();
    let list_field = 20 + 16;
    assert_eq!(u32::from_le_bytes(bytes[list_field..list_field + 4].try_into().unwrap()), 4);
    for offset in [0u32, 0x8000_0000] {
        let mut changed = bytes.clone();
        changed[list_field..list_field + 4].copy_from_slice(&offset.to_le_bytes());
        let err = index_adapter(&changed).unwrap_err();
        assert!(err.to_string().contains("an offset is 0 or negative"), "{err}");
    }
}
