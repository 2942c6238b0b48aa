use super::*;

/// A file with the header `json` (padded with spaces to a multiple of 8, as writers do) and `data`.
fn file(json: &str, data: &[u8]) -> Vec<u8> {
    let mut text = json.as_bytes().to_vec();
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out.extend_from_slice(data);
    out
}

fn two_tensors() -> Vec<u8> {
    file(
        r#"{"__metadata__":{"ortckpt":"{}","k":"v"},"b":{"dtype":"F32","shape":[2],"data_offsets":[2,10]},"a":{"dtype":"U8","shape":[2,1],"data_offsets":[0,2]},"e":{"dtype":"BF16","shape":[0,3],"data_offsets":[10,10]}}"#,
        &[1, 2, 0, 0, 128, 63, 0, 0, 0, 64],
    )
}

fn err(bytes: &[u8]) -> SafetensorsError {
    match check_safetensors(bytes) {
        Ok(f) => panic!("accepted: {f:?}"),
        Err(e) => e,
    }
}

fn err_of(json: &str, data: &[u8]) -> String {
    err(&file(json, data)).to_string()
}

#[test]
fn a_valid_file_gives_every_tensor_in_file_order() {
    let bytes = two_tensors();
    let f = read_safetensors(&bytes).unwrap();
    let start = f.data_start;
    assert_eq!(start as usize, bytes.len() - 10);
    let names: Vec<&str> = f.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "e"]);
    assert_eq!(f.tensors[0].shape, [2, 1]);
    assert_eq!((f.tensors[1].offset - start, f.tensors[1].len, f.tensors[1].dtype.name), (2, 8, "float32"));
    assert_eq!((f.tensors[2].len, f.tensors[2].dtype.code), (0, "BF16"));
    let meta = f.metadata.unwrap();
    assert_eq!(meta, [("ortckpt".into(), "{}".into()), ("k".into(), "v".into())]);
}

#[test]
fn an_empty_header_object_and_null_metadata_are_valid() {
    assert!(read_safetensors(&file("{}", b"")).unwrap().tensors.is_empty());
    assert_eq!(read_safetensors(&file(r#"{"__metadata__":null}"#, b"")).unwrap().metadata, None);
}

#[test]
fn the_header_length_is_bounded_by_the_file_and_the_limit() {
    assert!(err(b"").to_string().contains("shorter than the 8-byte header length"));
    assert!(err(&[1, 0, 0]).to_string().contains("3 bytes long"));
    let mut huge = (SAFETENSORS_MAX_HEADER_BYTES + 1).to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    assert!(err(&huge).to_string().contains("more than the limit of 100000000"));
    let mut past = 64u64.to_le_bytes().to_vec();
    past.extend_from_slice(b"{}");
    assert!(err(&past).to_string().contains("only 2 follow"));
    let mut max = u64::MAX.to_le_bytes().to_vec();
    max.extend_from_slice(b"{}");
    assert!(err(&max).to_string().contains("more than the limit"));
}

#[test]
fn headers_that_are_not_json_objects_are_refused() {
    for (json, fragment) in [
        ("", "not a JSON object"),
        ("[]", "not a JSON object"),
        (" {}", "not a JSON object"),
        ("{nope", "not UTF-8 JSON"),
        ("{} x", "not UTF-8 JSON"),
        ("{\"a\":", "not UTF-8 JSON"),
        ("{\"\\ud800\":1}", "not UTF-8 JSON"),
    ] {
        let message = err(&file(json, b"")).to_string();
        assert!(message.contains(fragment), "{json:?}: {message}");
    }
    let mut bad_utf8 = 7u64.to_le_bytes().to_vec();
    bad_utf8.extend_from_slice(b"{\"\xff\":1}");
    assert!(err(&bad_utf8).to_string().contains("not UTF-8 JSON"));
}

#[test]
fn deep_nesting_is_refused_without_recursing() {
    let deep = format!("{{\"w\":{}", "[".repeat(200_000));
    assert!(err_of(&deep, b"").contains("expected an entry"));
    let deeper = format!("{{\"__metadata__\":{{\"k\":{}", "{".repeat(200_000));
    assert!(err_of(&deeper, b"").contains("__metadata__"));
}

#[test]
fn every_malformed_entry_is_refused_naming_its_tensor() {
    let entry = |body: &str| format!(r#"{{"w":{body}}}"#);
    for (body, data, fragment) in [
        ("5", 8, "expected an entry {dtype, shape, data_offsets}"),
        (r#"{"dtype":3,"shape":[2],"data_offsets":[0,8]}"#, 8, "a dtype name"),
        (r#"{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}"#, 8, "non-negative integers"),
        (r#"{"dtype":"F32","shape":[true],"data_offsets":[0,8]}"#, 8, "non-negative integers"),
        (r#"{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}"#, 8, "non-negative integers"),
        (r#"{"dtype":"F32","shape":"ab","data_offsets":[0,8]}"#, 8, "non-negative integers"),
        (r#"{"dtype":"F32","shape":[2],"data_offsets":[8,0]}"#, 8, "data_offsets [8, 0]"),
        (r#"{"dtype":"F32","shape":[2],"data_offsets":[0,80]}"#, 8, "data_offsets [0, 80]"),
        (r#"{"dtype":"F32","shape":[2],"data_offsets":[0.0,8.0]}"#, 8, "data_offsets"),
        (r#"{"dtype":"F32","shape":[2],"data_offsets":[0,1e30]}"#, 8, "data_offsets"),
        (r#"{"dtype":"F32","shape":[2],"data_offsets":[0]}"#, 8, "are not two"),
        (r#"{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}"#, 8, "are not two"),
        (r#"{"dtype":"F32","shape":[2]}"#, 8, "lacks \"data_offsets\""),
        (r#"{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}"#, 8, "unknown key \"x\""),
        (r#"{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}"#, 8, "\"dtype\" twice"),
        (r#"{"dtype":"F32","shape":[3],"data_offsets":[0,8]}"#, 8, "holds 8 bytes"),
        (r#"{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}"#, 8, "more than 2^64"),
    ] {
        let e = err(&file(&entry(body), &vec![0; data]));
        assert_eq!(e.kind, SafetensorsErrorKind::Malformed, "{body}");
        assert_eq!(e.tensor.as_deref(), Some("w"), "{body}: {e}");
        assert!(e.to_string().contains(fragment), "{body}: {e}");
    }
    let rank =
        format!(r#"{{"dtype":"U8","shape":[{}1],"data_offsets":[0,1]}}"#, "1,".repeat(SAFETENSORS_MAX_RANK));
    assert!(err(&file(&entry(&rank), &[0])).to_string().contains("more than 32 dimensions"));
    let ok_rank = format!(r#"{{"dtype":"U8","shape":[{}1],"data_offsets":[0,1]}}"#, "1,".repeat(31));
    assert!(read_safetensors(&file(&entry(&ok_rank), &[0])).is_ok());
}

#[test]
fn unsupported_dtypes_are_their_own_kind() {
    let e = err(&file(r#"{"w":{"dtype":"F128","shape":[],"data_offsets":[0,16]}}"#, &[0; 16]));
    assert_eq!((e.kind, e.tensor.as_deref()), (SafetensorsErrorKind::UnsupportedDtype, Some("w")));
    assert_eq!(
        e.to_string(),
        "tensor \"w\": it has safetensors dtype \"F128\", which ONNX Runtime checkpoints cannot hold"
    );
}

#[test]
fn ranges_must_tile_the_buffer_exactly() {
    let t = |name: &str, b: u64, e: u64| {
        format!(r#""{name}":{{"dtype":"U8","shape":[{}],"data_offsets":[{b},{e}]}}"#, e - b)
    };
    let overlap = format!("{{{},{}}}", t("a", 0, 4), t("b", 2, 6));
    assert!(err_of(&overlap, &[0; 6]).contains("overlap or gap"));
    let gap = format!("{{{},{}}}", t("a", 0, 2), t("b", 4, 6));
    assert!(err_of(&gap, &[0; 6]).contains("overlap or gap"));
    let same = format!("{{{},{}}}", t("a", 0, 4), t("b", 0, 4));
    assert!(err_of(&same, &[0; 4]).contains("overlap or gap"));
    let short = format!("{{{}}}", t("a", 0, 4));
    assert!(err_of(&short, &[0; 6]).contains("truncated or padded"));
    let empties = format!("{{{},{},{}}}", t("a", 0, 0), t("b", 0, 0), t("c", 0, 2));
    assert_eq!(read_safetensors(&file(&empties, &[0; 2])).unwrap().tensors.len(), 3);
}

#[test]
fn repeated_names_are_refused() {
    let t = r#"{"dtype":"U8","shape":[0],"data_offsets":[0,0]}"#;
    let e = err(&file(&format!(r#"{{"a":{t},"a":{t}}}"#), b""));
    assert_eq!(e.tensor.as_deref(), Some("a"));
    assert!(e.to_string().contains("appears twice"));
    assert!(err_of(r#"{"__metadata__":{"k":"1","k":"2"}}"#, b"").contains("appears twice"));
    assert!(err_of(r#"{"__metadata__":{},"__metadata__":{}}"#, b"").contains("appears twice"));
    assert!(err_of(r#"{"__metadata__":{"k":5}}"#, b"").contains("__metadata__"));
    assert!(err_of(r#"{"__metadata__":[]}"#, b"").contains("__metadata__"));
}

/// Every truncation and every single-byte change of a valid file is refused or accepted
/// consistently: never a panic, and whatever is accepted keeps the reader's promises.
#[test]
fn every_mutation_is_refused_or_consistent() {
    let good = two_tensors();
    let mut mutants = Vec::new();
    for cut in 0..good.len() {
        mutants.push(good[..cut].to_vec());
    }
    for at in 0..good.len() {
        for value in [0u8, 1, b' ', b'"', b'{', b'}', b'[', b']', b',', b':', b'0', b'9', b'-', 0x7f, 0xff] {
            let mut m = good.clone();
            m[at] = value;
            mutants.push(m);
        }
        let mut m = good.clone();
        m.remove(at);
        mutants.push(m);
    }
    let mut accepted = 0;
    for m in &mutants {
        if let Ok(f) = read_safetensors(m) {
            accepted += 1;
            check_promises(m, &f);
        }
    }
    // Some mutations (a changed data byte, an added space) leave a valid file.
    assert!(accepted > 0 && accepted < mutants.len(), "{accepted} of {}", mutants.len());
}

fn check_promises(bytes: &[u8], f: &SafetensorsFile) {
    let mut at = f.data_start;
    let mut names = HashSet::new();
    for t in &f.tensors {
        assert!(names.insert(t.name.as_str()));
        assert_eq!(t.offset, at);
        let n = t.shape.iter().product::<u64>() * u64::from(t.dtype.itemsize);
        assert_eq!(n, t.len);
        at += t.len;
    }
    assert_eq!(at, bytes.len() as u64);
}

/// The file is read through the core's private read: another program truncating it while it is
/// read is caught (the size or time changed) and nothing is mapped, so no SIGBUS can follow.
#[test]
fn a_file_truncated_while_it_is_read_is_refused() {
    use std::path::Path;

    use crate::{ErrorKind, MappedFile};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    let json = r#"{"w":{"dtype":"U8","shape":[20971520],"data_offsets":[0,20971520]}}"#;
    let good = file(json, &vec![7u8; 20 << 20]);
    for cut in [0, 4, 100, good.len() / 2] {
        std::fs::write(&path, &good).unwrap();
        let mut calls = 0;
        let truncate =
            |p: &Path| std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(cut as u64);
        let read = MappedFile::read_path(&path, &mut || {
            calls += 1;
            if calls == 2 {
                truncate(&path).unwrap(); // after the first chunk was read
            }
            true
        });
        let Err(e) = read else { panic!("a file truncated to {cut} bytes while read was accepted") };
        assert_eq!(e.kind(), ErrorKind::CheckpointChanged, "{e}");
    }
    std::fs::write(&path, &good).unwrap();
    let read = MappedFile::read_path(&path, &mut || true).unwrap();
    assert!(!read.is_mapped());
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
    // The bytes in hand are private: a truncation afterwards changes nothing.
    let f = read_safetensors(read.bytes()).unwrap();
    let t = &f.tensors[0];
    assert!(read.bytes()[t.offset as usize..].iter().all(|&b| b == 7));
}
