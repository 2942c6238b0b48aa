use std::io::{Cursor, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use super::*;

fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}\n");
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(dict.len()).unwrap().to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

fn archive(members: &[(&str, CompressionMethod, Vec<u8>)]) -> Vec<u8> {
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, method, bytes) in members {
        zip.start_file(*name, SimpleFileOptions::default().compression_method(*method)).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// Replaces every occurrence of `from` (a name in the local and central headers) by `to`.
fn patch(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    let mut at = 0;
    while let Some(pos) = bytes[at..].windows(from.len()).position(|w| w == from) {
        bytes[at + pos..at + pos + to.len()].copy_from_slice(to);
        at += pos + from.len();
    }
}

#[test]
fn stored_and_deflated_members_are_read() {
    let floats: Vec<u8> = (0..24u8).collect();
    let bytes = archive(&[
        ("w.npy", CompressionMethod::Stored, npy("<f4", "(2, 3)", &floats)),
        ("z.npy", CompressionMethod::Deflated, npy("<i8", "(4,)", &[0; 32])),
    ]);
    let members = read_npz(&bytes, 1 << 20).unwrap();
    assert_eq!(members.len(), 2);
    assert_eq!((members[0].key.as_str(), members[0].header.shape.as_slice()), ("w", &[2, 3][..]));
    let NpzData::InPlace { offset } = members[0].data else { panic!("stored member copied") };
    assert_eq!(&bytes[offset as usize..offset as usize + 24], &floats[..]);
    let NpzData::Inflated(ref z) = members[1].data else { panic!("deflated member in place") };
    assert_eq!(z.len(), members[1].header.header_len + 32);
}

#[test]
fn a_bomb_is_refused_before_it_is_inflated() {
    let bytes =
        archive(&[("z.npy", CompressionMethod::Deflated, npy("|u1", "(4000000,)", &vec![0; 4_000_000]))]);
    assert!(bytes.len() < 40_000);
    let err = read_npz(&bytes, 1_000_000).unwrap_err();
    assert!(err.to_string().contains("over the budget of 1000000"), "{err}");
    assert!(read_npz(&bytes, 4_000_200).is_ok());
}

#[test]
fn a_member_larger_than_declared_is_refused() {
    let member = npy("|u1", "(4000,)", &[0; 4000]);
    let mut bytes = archive(&[("z.npy", CompressionMethod::Deflated, member.clone())]);
    let declared = u32::try_from(member.len()).unwrap().to_le_bytes();
    patch(&mut bytes, &declared, &100u32.to_le_bytes());
    let err = read_npz(&bytes, 1 << 20).unwrap_err();
    assert!(err.to_string().contains("more than the 100 bytes"), "{err}");
}

#[test]
fn names_must_be_exact_utf8_and_unique() {
    let member = npy("|u1", "(1,)", &[7]);
    let mut bytes = archive(&[("abcd.npy", CompressionMethod::Stored, member.clone())]);
    patch(&mut bytes, b"abcd", b"\xf4\x90\x80\x80"); // above U+10FFFF: not UTF-8
    assert!(read_npz(&bytes, 0).unwrap_err().to_string().contains("not valid UTF-8"));
    let mut bytes = archive(&[
        ("a.npy", CompressionMethod::Stored, member.clone()),
        ("b.npy", CompressionMethod::Stored, member.clone()),
    ]);
    patch(&mut bytes, b"b.npy", b"a.npy");
    assert!(read_npz(&bytes, 0).unwrap_err().to_string().contains("appears twice"));
    let bytes = archive(&[("a.txt", CompressionMethod::Stored, member)]);
    assert!(read_npz(&bytes, 0).unwrap_err().to_string().contains("not a .npy array"));
}

#[test]
fn truncated_and_inconsistent_members_are_refused() {
    let bytes = archive(&[("w.npy", CompressionMethod::Stored, npy("<f4", "(3,)", &[0; 8]))]);
    assert!(read_npz(&bytes, 0).unwrap_err().to_string().contains("truncated"));
    let bytes = archive(&[("w.npy", CompressionMethod::Stored, npy("|O", "(1,)", &[0; 8]))]);
    assert!(read_npz(&bytes, 0).unwrap_err().to_string().contains("unpickling"));
    let good = archive(&[("w.npy", CompressionMethod::Stored, npy("<f4", "(2,)", &[0; 8]))]);
    for cut in [0, 4, 30, good.len() / 2, good.len() - 1] {
        assert!(read_npz(&good[..cut], 0).is_err(), "cut at {cut}");
    }
    assert!(read_npz(b"not a zip at all", 0).unwrap_err().to_string().contains("not a valid zip"));
}

#[test]
fn names_a_zip_tool_would_extract_outside_its_folder_are_refused() {
    let member = npy("|u1", "(1,)", &[7]);
    for name in ["../../outside/evil.npy", "/abs/path.npy", "a\\..\\b.npy", "C:evil.npy", "a/../b.npy"] {
        assert!(npz_member_problem(name).is_some(), "{name}");
        let bytes = archive(&[(name, CompressionMethod::Stored, member.clone())]);
        let err = read_npz(&bytes, 0).unwrap_err();
        assert!(err.to_string().contains("would not extract it inside its folder"), "{name}: {err}");
    }
    for name in [
        "w.npy",
        "fc1.weight.npy",
        "layers/0/w.npy",
        "__optimizer__/g/p/m.npy",
        "..w.npy",
        "a..b.npy",
        "a//b.npy",
    ] {
        assert_eq!(npz_member_problem(name), None, "{name}");
    }
}
